"""What the agent's container can see and reach, checked from inside it (real engine, real image).

Traffic goes only to loopback, this project's own containers, the host's docker bridge address and
the package mirror this machine uses (to show they are unreachable).
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.sandbox import DockerSandbox
from agentbake.runner.sandbox import SandboxRequest
from agentbake.serve import ServedApp, serve_in_thread
from tests.resources import Peak
from tests.runner.probes import STILL_OPEN

SECRET = "sk-isolation-test-4f1d9c2b7e"
CAPS_OF_ROOT = 0x404EB  # CHOWN(0) DAC_OVERRIDE(1) FOWNER(3) KILL(5) SETGID(6) SETUID(7) NET_BIND_SERVICE(10)
# SYS_CHROOT(18): root_capabilities

# Run by the image's python inside the sandbox: "host port" pairs -> what a 2 s connect did.
PROBE = """
import json, socket, sys
out = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        out[target] = "connected"
    except OSError as exc:
        out[target] = type(exc).__name__
print(json.dumps(out))
"""


async def echo_app(scope, receive, send):  # type: ignore[no-untyped-def]
    """The rollout's gateway stand-in: answers with the path and headers it got."""
    if scope["type"] != "http":
        return
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    body = json.dumps({"path": scope["path"], "headers": headers}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    with serve_in_thread(echo_app, uds=tmp_path_factory.mktemp("gw") / "gateway.sock") as served:
        yield served


@pytest.fixture(scope="module")
def sandbox(backend: DockerBackend, image: str, gateway: ServedApp) -> DockerSandbox:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AGENTBAKE_UPSTREAM_API_KEY", SECRET)  # what the host process holds
        return backend.create(SandboxRequest(image=image, rollout_id="test-isolation", gateway_socket=str(gateway.uds)))


def probe(sandbox: DockerSandbox, *targets: str) -> dict[str, str]:
    result = sandbox.exec([sandbox.image.python or "python3", "-c", PROBE, *targets], timeout=30)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def wait_for_model(sandbox: DockerSandbox) -> None:
    """The forwarder binds a moment after the container starts."""
    port = str(sandbox.model_url).rsplit(":", 1)[1]
    for _ in range(100):
        if probe(sandbox, f"127.0.0.1:{port}")[f"127.0.0.1:{port}"] == "connected":
            return
        time.sleep(0.05)
    raise AssertionError("the forwarder never listened")


def test_model_url_reaches_the_gateway_socket(sandbox: DockerSandbox) -> None:
    assert sandbox.model_url is not None and sandbox.model_url.startswith("http://127.0.0.1:")
    wait_for_model(sandbox)
    result = sandbox.exec(["curl", "-sS", "-H", "x-probe: 1", f"{sandbox.model_url}/v1/models"], timeout=30)
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["path"] == "/v1/models" and answer["headers"]["x-probe"] == "1"


def test_the_agent_cannot_stop_the_forwarder(sandbox: DockerSandbox) -> None:
    wait_for_model(sandbox)
    result = sandbox.exec("kill -9 1 2>/dev/null; kill -9 -1; exit 0")  # -1: every process it may signal
    assert result.exit_code == 0
    assert sandbox.exec(["curl", "-sS", "-o", "/dev/null", f"{sandbox.model_url}/"], timeout=30).exit_code == 0


def test_hardening_seen_from_inside(sandbox: DockerSandbox) -> None:
    agent = sandbox.exec("id -u; grep -E '^(CapEff|CapPrm|CapAmb|NoNewPrivs):' /proc/self/status").stdout.split("\n")
    assert agent[0] == "1000"
    assert agent[1:5] == ["CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapAmb:\t0000000000000000",
                          "NoNewPrivs:\t1"]  # fmt: skip
    job = sandbox.start_bg("sleep 30")
    status = sandbox.exec(f"cat /proc/{job.pid}/status", user="root").stdout
    job.kill()
    assert re.search(r"^CapEff:\s*0+$", status, re.M) and re.search(r"^NoNewPrivs:\s*1$", status, re.M)
    root_caps = sandbox.exec("grep ^CapEff: /proc/self/status", user="root").stdout.split()[1]
    assert int(root_caps, 16) == CAPS_OF_ROOT
    # root may drop to the agent's user (SETUID/SETGID); the agent cannot use them to become root
    assert sandbox.exec("setpriv --reuid=1000 --regid=1000 --clear-groups id -u", user="root").stdout == "1000\n"
    assert sandbox.exec("setpriv --reuid=0 --regid=0 --clear-groups id -u").exit_code != 0

    limits = sandbox.exec(
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max "
        "/sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null"
    ).stdout.split()
    assert limits == [str(512 * 2**20), "256"]


def test_hardening_in_the_engine(sandbox: DockerSandbox, engine: docker.DockerClient, backend: DockerBackend) -> None:
    attrs = engine.api.inspect_container(sandbox.sandbox_id)
    host = attrs["HostConfig"]
    assert (host["NetworkMode"], host["Privileged"], host["Init"], host["CapDrop"]) == ("none", False, True, ["ALL"])
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert (host["Memory"], host["MemorySwap"], host["NanoCpus"], host["PidsLimit"]) == (
        512 * 2**20,
        512 * 2**20,
        10**9,
        256,
    )
    mounts = [(m["Source"], m["Destination"], m["RW"]) for m in attrs["Mounts"] if m["Type"] == "bind"]
    assert mounts == [(str(backend.config.runtime_dir / sandbox.name), "/run/agentbake", False)]
    assert SECRET not in json.dumps(attrs)


def test_no_route_out_and_no_host_port(sandbox: DockerSandbox, engine: docker.DockerClient) -> None:
    assert len(sandbox.exec("cat /proc/net/route").stdout.splitlines()) == 1  # the header: no route at all
    assert sandbox.exec("ls /sys/class/net").stdout.split() == ["lo"]

    bridge = engine.api.inspect_network("bridge")["IPAM"]["Config"][0]
    gateway_ip = bridge.get("Gateway") or str(next(ipaddress.ip_network(bridge["Subnet"]).hosts()))
    decoy = socket.create_server(("0.0.0.0", 0))
    port = decoy.getsockname()[1]
    accepted: list[object] = []
    decoy.settimeout(0.2)

    def accept() -> None:
        while decoy.fileno() != -1:
            try:
                accepted.append(decoy.accept()[1])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    try:
        socket.create_connection((gateway_ip, port), timeout=2).close()  # the host itself reaches it there
        time.sleep(0.3)
        assert len(accepted) == 1
        seen = probe(sandbox, f"{gateway_ip}:{port}", f"127.0.0.1:{port}", f"{gateway_ip}:22")
    finally:
        decoy.close()
    assert all(outcome != "connected" for outcome in seen.values()), seen
    assert len(accepted) == 1, "the decoy on the host's 0.0.0.0 was reached from the sandbox"


def mirror_hosts() -> list[str]:
    """Hosts of the apt sources this machine uses (active .list and .sources files)."""
    found = []
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]:
        if path.suffix not in (".list", ".sources") or not path.is_file():
            continue
        for line in path.read_text().splitlines():
            if line.startswith(("deb ", "URIs:")):
                found += re.findall(r"https?://([^/\s:]+)", line)
    return sorted(set(found))


def test_the_package_mirror_is_unreachable(sandbox: DockerSandbox) -> None:
    hosts = mirror_hosts()
    if not hosts:
        pytest.skip("this machine names no apt mirror")
    try:  # the host resolves it (the sandbox cannot): probe its addresses directly too
        addresses = sorted({info[4][0] for info in socket.getaddrinfo(hosts[0], 80, socket.AF_INET)})
    except socket.gaierror:
        addresses = []
    seen = probe(sandbox, f"{hosts[0]}:80", *(f"{a}:80" for a in addresses[:2]))
    assert seen[f"{hosts[0]}:80"] == "gaierror"  # no DNS either
    assert all(outcome != "connected" for outcome in seen.values()), seen


def test_another_rollouts_container_is_unreachable(
    backend: DockerBackend, image: str, sandbox: DockerSandbox, engine: docker.DockerClient
) -> None:
    with backend.create(SandboxRequest(image=image, rollout_id="test-isolation-neighbour")) as neighbour:
        server = neighbour.start_bg([str(neighbour.image.python), "-m", "http.server", "8099", "--bind", "0.0.0.0"])
        for _ in range(100):
            if probe(neighbour, "127.0.0.1:8099")["127.0.0.1:8099"] == "connected":
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the neighbour's server never listened")
        assert engine.api.inspect_container(neighbour.sandbox_id)["NetworkSettings"]["IPAddress"] == ""
        assert probe(sandbox, "127.0.0.1:8099") == {"127.0.0.1:8099": "ConnectionRefusedError"}
        server.kill()


def test_the_upstream_key_is_nowhere_inside(sandbox: DockerSandbox) -> None:
    processes = sandbox.exec("cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline; env", user="root", timeout=30)
    assert processes.exit_code == 0 and "PATH=" in processes.stdout
    assert SECRET not in processes.stdout
    half = len(SECRET) // 2  # never the whole key on a command line: the scan would find itself
    files = sandbox.exec(
        f"printf %s%s {SECRET[:half]} {SECRET[half:]} | grep -rlsF -f - /home /tmp /run /etc /root /opt /var /srv",
        user="root",
        timeout=60,
    )
    assert (files.exit_code, files.stdout) == (1, ""), files.stdout  # grep: 1 = no file matched


def test_a_fork_bomb_stops_at_the_pids_limit_and_the_relay_survives(sandbox: DockerSandbox) -> None:
    wait_for_model(sandbox)
    sandbox.exec("bomb() { bomb | bomb & }; bomb; sleep 1", timeout=2)
    for _ in range(20):  # the agent's user clears what the deadline's group kill missed
        if sandbox.exec("kill -9 -1 2>/dev/null; exit 0").exit_code == 0:
            break
        time.sleep(0.5)
    refused = sandbox.exec("cat /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events 2>/dev/null", user="root")
    assert int(refused.stdout.split()[1]) > 0, "no fork was refused: the limit never bit"
    assert sandbox.exec(["curl", "-sS", "-o", "/dev/null", f"{sandbox.model_url}/"], timeout=30).exit_code == 0


# Run by the image's python inside the sandbox: opens N connections to the model port, holds them, prints how
# many the relay kept open.
HOLD_CONNECTIONS = (
    STILL_OPEN
    + """
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
time.sleep(1)
print(still_open(held), flush=True)
time.sleep(2)
"""
)


def test_the_forwarder_relays_at_most_max_connections_at_once(sandbox: DockerSandbox) -> None:
    """An agent opening 200 idle connections holds 64 of the host's descriptors, not 200."""
    from agentbake.runner.docker.forwarder import MAX_CONNECTIONS

    wait_for_model(sandbox)
    port = str(sandbox.model_url).rsplit(":", 1)[1]
    with Peak() as peak:
        held = sandbox.exec([sandbox.image.python or "python3", "-c", HOLD_CONNECTIONS, port, "200"], timeout=60)
    assert held.exit_code == 0, held.stderr
    assert int(held.stdout) == MAX_CONNECTIONS
    assert peak.added_fds <= MAX_CONNECTIONS + 8  # this process serves the gateway stand-in
    assert sandbox.exec(["curl", "-sS", "-o", "/dev/null", f"{sandbox.model_url}/"], timeout=30).exit_code == 0
