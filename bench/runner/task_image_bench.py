"""Task-image benchmark: what a task with its own image costs on its first rollout and on every later one,
beside a catalog-image task and beside Harbor's way (the agent installed in the task container per trial).

    .venv/bin/python bench/runner/task_image_bench.py                 # ~5 min on 2 cores
    .venv/bin/python bench/runner/task_image_bench.py --runs 5 --installs 2

Every rollout is the real Claude Code (claude-code image) against the scripted model, through `Runner`.
- first rollout of a new task image: a fresh copy of examples/tasks/summarize-logs (its setup.sh differs by
  a comment, so its Dockerfile's COPY and RUN steps run again and its runnable layer is new): `image` is the
  build of both, `ready` is the rollout's start -> the agent running;
- the agent bundle's fill (once per agent image, never per task): timed into a throwaway volume;
- cached: the same task image's later rollouts beside the catalog-image example `write-file`, interleaved;
- Harbor's per-trial install, reproduced in the same task image with what this machine reaches (Debian's
  mirror and the npm registry): a container on the default bridge as root, `apt-get update`, `apt-get
  install curl procps ca-certificates`, then the Claude Code native package downloaded and unpacked (Harbor
  runs Anthropic's installer, which fetches the same binary from Anthropic's servers; those are not
  reachable here, so this is a floor for Harbor's install, not its full cost).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import docker
import docker.errors

from agentbake.buildkit import Catalog, build, connect, plan
from agentbake.buildkit.builders import Progress
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.buildkit.labels import ImageLabels
from agentbake.runner import DockerBackend, DockerConfig, Runner, RunnerConfig
from agentbake.runner.result import RolloutResult
from agentbake.tasks import bundle as bundle_module
from agentbake.tasks import load_task
from agentbake.tasks.resolver import ImageResolver

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tasks"
TASK_IMAGE_EXAMPLE = "summarize-logs"
CATALOG_EXAMPLE = "write-file"


def row(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return f"| {name} | {statistics.median(values):.2f} | {p95:.2f} | {len(values)} |"


def fresh_task(root: Path) -> Path:
    """A copy of the task-image example whose setup.sh differs by a comment: its COPY and RUN steps run again
    (no layer cache), then the runnable layer is built on the new image."""
    task = root / f"{TASK_IMAGE_EXAMPLE}-{uuid.uuid4().hex[:8]}"
    shutil.copytree(EXAMPLES / TASK_IMAGE_EXAMPLE, task)
    with (task / "environment" / "setup.sh").open("a") as setup:
        setup.write(f"# {task.name}\n")
    return task


def first_rollouts(runner_image: str, root: Path, runs: int, out: Path, engine: docker.DockerClient) -> list:
    """Each on a new task (and a new Runner): the build of its task image and runnable layer is in `image`."""
    results = []
    for _ in range(runs):
        task = load_task(fresh_task(root))
        with Runner(RunnerConfig(image=runner_image, model="scripted", out_dir=out)) as runner:
            runner.start_scripted([task])
            result = runner.run(task)
        results.append(result)
        for ref in (result.image, result.task_image):  # leave nothing behind
            if ref:
                engine.images.remove(ref, force=True)
    return results


def bundle_fill(engine: docker.DockerClient, agent_image: str) -> float:
    """The bundle's fill, into a throwaway volume (the real one is shared and stays)."""
    attrs = engine.api.inspect_image(agent_image)
    name = f"agentbake-bundle-bench-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    try:
        command = attrs["Config"]["Labels"]["dev.agentbake.agent.command"]
        assert bundle_module._fill(engine, name, attrs["Id"], command, Progress())
        return time.perf_counter() - started
    finally:
        bundle_module._remove(engine, name)


def cached_rollouts(runner_image: str, runs: int, out: Path) -> tuple[list[RolloutResult], list[RolloutResult]]:
    """Interleaved: the task-image example and the catalog-image example, on one runner and backend."""
    image_task, catalog_task = load_task(EXAMPLES / TASK_IMAGE_EXAMPLE), load_task(EXAMPLES / CATALOG_EXAMPLE)
    backend = DockerBackend(DockerConfig())
    with Runner(RunnerConfig(image=runner_image, model="scripted", out_dir=out), backend) as runner:
        runner.start_scripted([image_task, catalog_task])
        for task in (image_task, catalog_task):  # first use: builds (if missing), inspects, connections
            runner.run(task)
        pairs = [(runner.run(image_task), runner.run(catalog_task)) for _ in range(runs)]
    backend.close()
    return [a for a, _ in pairs], [b for _, b in pairs]


def harbor_install(engine: docker.DockerClient, task_image: str, tarball: str, runs: int) -> list[float]:
    """Harbor's per-trial agent install, as far as this machine's network allows (see the module doc)."""
    ca = detect_ca_bundle()
    script = (
        "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
        "apt-get install -y -qq --no-install-recommends curl procps ca-certificates >/dev/null; "
        f"mkdir -p /root/.local/claude && curl -fsSL --retry 3 {tarball} | tar -xz -C /root/.local/claude; "
        "/root/.local/claude/package/claude --version"
    )
    times = []
    for _ in range(runs):
        volumes = {str(ca): {"bind": "/etc/ssl/certs/bench-ca.crt", "mode": "ro"}} if ca else {}
        environment = {"CURL_CA_BUNDLE": "/etc/ssl/certs/bench-ca.crt"} if ca else {}
        started = time.perf_counter()
        output = engine.containers.run(
            task_image, ["bash", "-c", script], user="root", remove=True, volumes=volumes, environment=environment
        )
        times.append(time.perf_counter() - started)
        assert b"Claude Code" in output, output[-500:]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="cached rollouts of each kind")
    parser.add_argument("--firsts", type=int, default=3, help="first rollouts of new task images")
    parser.add_argument("--installs", type=int, default=3, help="Harbor-style per-trial installs")
    args = parser.parse_args()

    engine, catalog = connect(), Catalog.discover()
    spec = catalog.load("claude-code")
    image = build(engine, plan(engine, spec, catalog.templates_dir, ca_cert=detect_ca_bundle())).tag
    tarball = json.loads(spec.lock_path.read_text())["native"]["tarball"]
    work = Path(tempfile.mkdtemp(prefix="agentbake-task-image-bench-"))

    fill = [bundle_fill(engine, image) for _ in range(2)]
    firsts = first_rollouts(image, work / "tasks", args.firsts, work / "first", engine)
    on_image, on_catalog = cached_rollouts(image, args.runs, work / "cached")
    labels = ImageLabels.from_labels(image, engine.api.inspect_image(image)["Config"]["Labels"])
    resolved = ImageResolver(image, labels, client=lambda: engine).resolve(load_task(EXAMPLES / TASK_IMAGE_EXAMPLE))
    installs = harbor_install(engine, resolved.task_image or "", tarball, args.installs)

    print(f"## Tasks with their own image ({image}; Claude Code + scripted model; seconds)\n")
    print("| what | p50 | p95 | n |\n|---|---|---|---|")
    print(
        row(
            "first rollout of a new task image: image phase (task image build + runnable layer)",
            [r.timings["image"] for r in firsts],
        )
    )
    print(row("first rollout of a new task image: start -> agent running", [r.timings["ready"] for r in firsts]))
    print(row("agent bundle fill (once per agent image, shared by every task)", fill))
    print(row("cached task image: image phase", [r.timings["image"] for r in on_image]))
    print(row("**cached task image: start -> agent running**", [r.timings["ready"] for r in on_image]))
    print(row("catalog-image task: start -> agent running (baseline)", [r.timings["ready"] for r in on_catalog]))
    for phase in ("create", "upload", "setup"):
        print(
            row(
                f"cached task image: {phase} (catalog: {statistics.median(r.timings[phase] for r in on_catalog):.2f})",
                [r.timings[phase] for r in on_image],
            )
        )
    print(row("Harbor-style per-trial agent install in the task image (floor, see doc)", installs))
    bad = [r for r in [*firsts, *on_image, *on_catalog] if not r.ok or r.reward != 1.0]
    print(f"\nrollouts not ok or not reward 1: {len(bad)}; task image {resolved.task_image}, runnable {resolved.ref}")


if __name__ == "__main__":
    main()
