"""Docker backend benchmark: sandbox lifecycle and warm-pool acquire, each beside raw docker-py.

    .venv/bin/python bench/runner/bench.py [--runs 15] [--image claude-code]

Baselines, measured in the same run, same image, same engine, interleaved run by run:
- lifecycle: raw docker-py low-level calls (create_container + start + exec `echo ok` + remove with
  force; on the default bridge network, and again with network none, which skips the veth setup)
  vs `DockerBackend.create` -> ready -> `exec("echo ok")` -> `kill()` (hardened, network none,
  forwarder started, labels, host folder). Target: ours <= 1.15x raw.
- warm-pool acquire: `create` with `DockerConfig(warm=2)` and a gateway socket linked in, vs a cold
  `create`. Target: p50 <= 25 ms.
- exec on a running sandbox and a 1 MiB file write, vs the raw exec / put_archive calls.
"""

from __future__ import annotations

import argparse
import io
import socket
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker

from agentbake.buildkit import Catalog, build, connect, plan
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.runner import DockerBackend, DockerConfig, SandboxRequest


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def raw_exec(api: docker.APIClient, container: str, cmd: list[str]) -> int:
    exec_id = api.exec_create(container, cmd)["Id"]
    api.exec_start(exec_id, demux=True)
    return api.exec_inspect(exec_id)["ExitCode"]


def raw_lifecycle(api: docker.APIClient, image: str, network: str = "default") -> None:
    host_config = api.create_host_config(network_mode=network)
    container = api.create_container(image, command=["sleep", "infinity"], host_config=host_config)["Id"]
    api.start(container)
    assert raw_exec(api, container, ["echo", "ok"]) == 0
    api.remove_container(container, force=True)


def ours_lifecycle(backend: DockerBackend, image: str, phases: dict[str, list[float]]) -> None:
    started = time.perf_counter()
    sandbox = backend.create(SandboxRequest(image=image, rollout_id="bench"))
    created = time.perf_counter()
    assert sandbox.exec("echo ok").stdout == "ok\n"
    executed = time.perf_counter()
    sandbox.kill()
    phases["create -> ready"].append(created - started)
    phases["exec echo ok"].append(executed - created)
    phases["kill"].append(time.perf_counter() - executed)


def one_mib_tar() -> bytes:
    data = b"x" * 2**20
    member = tarfile.TarInfo("blob")
    member.size = len(data)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def row(name: str, ours: list[float], raw: list[float] | None, target: str = "") -> str:
    ratio = f"{statistics.median(ours) / statistics.median(raw):.2f}x" if raw else ""
    raw_ms = f"{statistics.median(raw) * 1e3:8.1f}" if raw else f"{'':8}"
    return f"{name:<34} {statistics.median(ours) * 1e3:8.1f} {p(ours, 0.95) * 1e3:8.1f} {raw_ms} {ratio:>7}  {target}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="repetitions of each measurement")
    parser.add_argument("--image", default="claude-code", help="catalog image to run")
    args = parser.parse_args()

    engine, catalog = connect(), Catalog.discover()
    image = build(engine, plan(engine, catalog.load(args.image), catalog.templates_dir, ca_cert=detect_ca_bundle())).tag
    api = docker.APIClient(timeout=120, **docker.utils.kwargs_from_env())
    backend = DockerBackend(DockerConfig(memory_mb=1024, cpus=1))
    raw_lifecycle(api, image)  # warm the engine's caches for both sides
    ours_lifecycle(backend, image, {"create -> ready": [], "exec echo ok": [], "kill": []})

    raw, raw_none, ours = [], [], []
    phases: dict[str, list[float]] = {"create -> ready": [], "exec echo ok": [], "kill": []}
    for _ in range(args.runs):
        raw.append(timed(lambda: raw_lifecycle(api, image)))
        raw_none.append(timed(lambda: raw_lifecycle(api, image, "none")))
        ours.append(timed(lambda: ours_lifecycle(backend, image, phases)))

    sandbox = backend.create(SandboxRequest(image=image, rollout_id="bench-exec"))
    raw_container = api.create_container(image, command=["sleep", "infinity"])["Id"]
    api.start(raw_container)
    tar = one_mib_tar()
    exec_ours = [timed(lambda: sandbox.exec(["echo", "ok"])) for _ in range(args.runs * 2)]
    exec_raw = [timed(lambda: raw_exec(api, raw_container, ["echo", "ok"])) for _ in range(args.runs * 2)]
    home = sandbox.home
    write_ours = [timed(lambda: sandbox.write_bytes(f"{home}/blob", b"x" * 2**20)) for _ in range(args.runs)]
    write_raw = [timed(lambda: api.put_archive(raw_container, "/tmp", tar)) for _ in range(args.runs)]
    api.remove_container(raw_container, force=True)
    sandbox.kill()

    with tempfile.TemporaryDirectory() as folder:
        gateway = socket.socket(socket.AF_UNIX)
        gateway.bind(str(Path(folder) / "gw.sock"))
        gateway.listen()
        warm = DockerBackend(DockerConfig(memory_mb=1024, cpus=1, warm=2))
        request = SandboxRequest(image=image, rollout_id="bench-warm", gateway_socket=str(Path(folder) / "gw.sock"))
        warm.warm_up(request)
        acquire = []
        for _ in range(args.runs):
            started = time.perf_counter()
            taken = warm.create(request)
            acquire.append(time.perf_counter() - started)
            taken.kill()
            warm.warm_up(request)  # wait for the refill: each acquire finds a ready sandbox
        cold = [timed(lambda: backend.create(request).kill()) for _ in range(args.runs)]
        warm.close()
        gateway.close()
    backend.close()

    print(f"image {image}, {args.runs} runs each, milliseconds")
    print(f"{'':<34} {'p50':>8} {'p95':>8} {'raw p50':>8} {'ratio':>7}  target")
    print(row("lifecycle create+exec+remove", ours, raw, "<= 1.15x raw"))
    print(row("  same, raw with network none", ours, raw_none, "(our overhead)"))
    for name, values in phases.items():
        print(row(f"  ours: {name}", values, None))
    print(row("exec echo ok (running sandbox)", exec_ours, exec_raw))
    print(row("write 1 MiB file", write_ours, write_raw))
    print(row("warm-pool acquire (with gateway)", acquire, None, "p50 <= 25 ms"))
    print(row("cold create + kill (with gateway)", cold, None))


if __name__ == "__main__":
    main()
