"""Each phase's network through the real engine: the task's policy (or the run's override) enforced by the
rollout's egress proxy, seen from inside the sandbox; refusals and upstream failures as result notes; a verifier
that could not fetch its tools is a `verifier_error`; a test.sh installing from a (fake) PyPI through the proxy's
cached mirror."""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from agentbake.egress import EgressConfig, EgressService
from agentbake.errors import TaskError
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.network import PhaseNetworks
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.tasks import Task, load_task
from agentbake.tasks.task_network import NetworkPolicy
from tests.egress.conftest import FakeUpstream, refusing_port, serve_fake
from tests.egress.test_mirrors import METADATA, WHEEL_PATH, make_wheel, pypi_page
from tests.runner.rollouts import reward_if, write_task


def networks(toml: str, tmp_path: Path, **settings: object) -> tuple[Task, PhaseNetworks]:
    task = load_task(write_task(tmp_path, "t", solve="true\n", test="true\n", toml=toml))
    return task, PhaseNetworks.of(task, RunnerConfig(image="x:1", oracle=True, **settings))


def test_a_task_that_says_nothing_is_public_in_both_phases_and_an_override_replaces_it(tmp_path: Path) -> None:
    _, tb2 = networks("", tmp_path)
    assert (tb2.agent.mode, tb2.verifier.mode, tb2.bridge, tb2.needs_proxy) == ("public", "public", False, True)
    _, off = networks("", tmp_path / "off", agent_network="none", verifier_network="none")
    assert (off.agent.mode, off.verifier.mode, off.needs_proxy) == ("no-network", "no-network", False)
    _, listed = networks("", tmp_path / "l", verifier_network="allowlist", allowed_hosts=("PyPI.org.",))
    assert (listed.agent, listed.verifier) == (NetworkPolicy("public"), NetworkPolicy("allowlist", ("pypi.org",)))
    # the legacy bridge: only for a public verifier, which then needs no proxy of its own
    _, bridged = networks("", tmp_path / "b", agent_network="none", verifier_network="bridge")
    assert (bridged.bridge, bridged.needs_proxy) == (True, False)
    _, closed = networks('[verifier]\nnetwork_mode = "no-network"\n', tmp_path / "c", verifier_network="bridge")
    assert (closed.bridge, closed.verifier.mode) == (False, "no-network")


def test_a_remote_backend_refuses_a_policy_it_cannot_enforce(tmp_path: Path) -> None:
    task, strict = networks('[agent]\nnetwork_mode = "no-network"\n', tmp_path)
    with pytest.raises(TaskError, match="the agent phase's network is 'no-network', which the hf backend cannot"):
        strict.check_remote(task, "hf")
    _, accepted = networks('[agent]\nnetwork_mode = "no-network"\n', tmp_path / "p", agent_network="public")
    accepted.check_remote(task, "hf")  # the run accepts the cloud's network
    strict.check_remote(task, "e2b", rules=True)  # egress rules say it
    with pytest.raises(TaskError, match="the gateway runs in the sandbox, which then cannot reach the model server"):
        strict.check_remote(task, "e2b", rules=True, gateway_in_sandbox=True)


# Prints `<status> <url>` for each URL, through the proxy variables as any client reads them.
PROBE = r"""python3 - "$@" <<'EOF'
import sys, urllib.error, urllib.request
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=20) as answer:
            print(answer.status, url, answer.read().decode().strip())
    except urllib.error.HTTPError as error:
        print(error.code, url)
    except OSError as error:
        print("unreachable", url)
EOF
"""


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    """Two fake hosts on the host's loopback, outside the sandbox's `no_proxy`: one listed, one not."""
    with serve_fake(host="127.0.0.2") as listed, serve_fake(host="127.0.0.3") as other:
        listed.put("/ok", b"listed")
        other.put("/ok", b"other")
        yield listed, other


@pytest.fixture
def egress(tmp_path: Path) -> Iterator[EgressService]:
    service = EgressService(EgressConfig(cache_dir=tmp_path / "cache", ca_file=None))
    yield service
    service.close()


@pytest.fixture
def neighbour(engine: docker.DockerClient, backend: DockerBackend, image: str) -> Iterator[tuple[str, str]]:
    """Another container of this project, serving HTTP on a bridge network: (its address, the bridge's own address
    on the host)."""
    network = backend.engine.verifier_network()
    container = engine.containers.run(
        image,
        ["python3", "-m", "http.server", "8000"],
        detach=True,
        network=network,
        labels={"dev.agentbake.test": "network"},
    )
    try:
        container.reload()
        address = container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
        gateway = engine.networks.get(network).attrs["IPAM"]["Config"][0]["Gateway"]
        yield address, gateway
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True)


def probe_task(root: Path, name: str, toml: str, agent_urls: list[str], verifier_urls: list[str]) -> Path:
    urls = " ".join(agent_urls)
    return write_task(
        root,
        name,
        solve=f"probe() {{\n{PROBE}}}\nprobe {urls} > agent-probe.txt\n",
        test=f"probe() {{\n{PROBE}}}\nprobe {' '.join(verifier_urls)}\necho 1 > /logs/verifier/reward.txt\n",
        toml=toml,
    )


def probed(result: RolloutResult) -> dict[str, str]:
    """What the agent's probe saw, from the workdir diff: url -> status."""
    lines = [line[1:].split() for line in (result.out_dir / "workdir.diff").read_text().splitlines()]
    return {words[1]: words[0] for words in lines if len(words) >= 2 and words[1].startswith("http")}


def verifier_probed(result: RolloutResult) -> dict[str, str]:
    lines = (result.out_dir / "verifier" / "stdout.txt").read_text().splitlines()
    return {words[1]: words[0] for words in map(str.split, lines) if len(words) >= 2 and words[1].startswith("http")}


@pytest.mark.docker
def test_each_phase_reaches_only_what_its_policy_allows(
    image: str,
    backend: DockerBackend,
    egress: EgressService,
    upstreams: tuple[FakeUpstream, FakeUpstream],
    neighbour: tuple[str, str],
    tmp_path: Path,
) -> None:
    listed, other = upstreams
    ok, refused = listed.url + "/ok", other.url + "/ok"
    peer, host = f"http://{neighbour[0]}:8000/", f"http://{neighbour[1]}:{listed.url.rsplit(':', 1)[1]}/ok"
    every = [ok, refused, peer, host]
    tasks = {
        # agent: allowlist, verifier: public (only public hosts: loopback, the bridge, its containers refused)
        "list-then-public": '[agent]\nallowed_hosts = ["127.0.0.2"]\n',
        # agent: no network, verifier: allowlist
        "none-then-list": '[agent]\nnetwork_mode = "no-network"\n[verifier]\nallowed_hosts = ["127.0.0.2"]\n',
        # agent: public, verifier: no network
        "public-then-none": '[verifier]\nnetwork_mode = "no-network"\n',
    }
    with refusing_port("127.0.0.2") as port:
        down = f"http://127.0.0.2:{port}/"  # allowed to none-then-list's verifier, and down
        loaded = [
            load_task(probe_task(tmp_path, name, toml, every, every + [down] * (name == "none-then-list")))
            for name, toml in tasks.items()
        ]
        config = RunnerConfig(image=image, oracle=True, out_dir=tmp_path / "out")
        with Runner(config, backend, egress=egress) as runner:
            results = {r.task: r for r in runner.run_batch(loaded, concurrency=3)}
    for result in results.values():
        assert result.status is Status.OK and result.reward == 1.0, (result.task, result.error)

    everything_refused = dict.fromkeys(every, "403")
    first = results["list-then-public"]
    assert probed(first) == {**everything_refused, ok: "200"}
    assert verifier_probed(first) == everything_refused  # public: never loopback, the bridge or a container
    assert probed(results["none-then-list"]) == everything_refused
    assert verifier_probed(results["none-then-list"]) == {**everything_refused, ok: "200", down: "502"}
    assert probed(results["public-then-none"]) == everything_refused
    assert verifier_probed(results["public-then-none"]) == everything_refused
    assert listed.hits["/ok"] == 2 and other.hits["/ok"] == 0

    notes = first.notes
    assert (
        "network: 127.0.0.3 refused once in the agent phase (127.0.0.3 is not in the agent phase's allowed_hosts)"
        in notes
    )
    assert any(n.startswith(f"network: {neighbour[0]} refused once in the verifier phase (") for n in notes), notes
    assert (first.out_dir / "egress.jsonl").read_text().count('"phase": "verifier"') == 4
    # an allowed host that is down: a note, the reward (1.0 above) as Harbor gives it
    assert results["none-then-list"].notes[-2:] == [
        "network: 127.0.0.2 failed once in the verifier phase (connection refused)",
        "network: the verifier phase could not reach 127.0.0.2: its reward may be the network's, not the agent's",
    ]


@pytest.mark.docker
def test_a_batch_override_and_a_verifier_refused_its_tools(
    image: str, backend: DockerBackend, egress: EgressService, upstreams: tuple[FakeUpstream, FakeUpstream],
    tmp_path: Path,
) -> None:  # fmt: skip
    _, other = upstreams
    fetch = f"python3 -c \"import urllib.request; urllib.request.urlopen('{other.url}/ok', timeout=20)\""
    tools = write_task(tmp_path, "needs-tools", solve="true\n", test=f"{fetch}\n" + reward_if(fetch))
    answer = write_task(tmp_path, "wrong-answer", solve="true\n", test=reward_if("false"))
    config = RunnerConfig(
        image=image, oracle=True, out_dir=tmp_path / "out", verifier_network="allowlist", allowed_hosts=("127.0.0.2",)
    )
    with Runner(config, backend, egress=egress) as runner:
        results = {r.task: r for r in runner.run_batch([load_task(tools), load_task(answer)], concurrency=2)}
    refused = results["needs-tools"]
    assert refused.status is Status.VERIFIER_ERROR, refused.error
    assert refused.error.startswith("reward 0 not counted: the verifier's network (allowlist) refused 127.0.0.3 and")
    assert any(note.startswith("network: 127.0.0.3 refused 2 times in the verifier phase") for note in refused.notes)
    # a 0 with nothing refused is the answer's
    assert (results["wrong-answer"].status, results["wrong-answer"].reward) == (Status.OK, 0.0)
    assert other.hits["/ok"] == 0


UV = Path(sys.executable).with_name("uv")
"""The uv test.sh runs (the catalog image has python but neither pip nor uv): this venv's."""


@pytest.mark.docker
def test_a_verifier_installs_from_pypi_through_the_cache(
    image: str, backend: DockerBackend, tmp_path: Path, upstreams: tuple[FakeUpstream, FakeUpstream]
) -> None:
    """The mirror route on a fake PyPI: the first rollout fetches the wheel, later ones (two at once) are served
    from the cache."""
    fake, _ = upstreams
    wheel = make_wheel()
    fake.put("/simple/demo-pkg/", pypi_page(fake, wheel), **{"Content-Type": "application/vnd.pypi.simple.v1+json"})
    fake.put(WHEEL_PATH, wheel)
    fake.put(WHEEL_PATH + ".metadata", METADATA)
    install = "/tests/uv pip install --no-cache --python /usr/bin/python3 --target /tmp/site demo_pkg==1.0"
    imports = reward_if("PYTHONPATH=/tmp/site python3 -c 'import demo_pkg'")
    toml = '[verifier]\nallowed_hosts = ["127.0.0.2"]\n'
    task = write_task(tmp_path, "pip-test", solve="true\n", test=f"{install}\n{imports}", toml=toml)
    shutil.copy(UV, task / "tests" / "uv")
    mirror = EgressConfig(
        cache_dir=tmp_path / "cache", ca_file=None, pypi_index=fake.url + "/simple", pypi_files=fake.url
    )
    # The runner starts its own service from the config (and closes it).
    with Runner(RunnerConfig(image=image, oracle=True, out_dir=tmp_path / "out"), backend, egress=mirror) as runner:
        first = runner.run(load_task(task))
        assert (first.status, first.reward) == (Status.OK, 1.0), (first.error, first.notes)
        later = runner.run_batch([load_task(task)], repeats=2, concurrency=2)
    assert [(r.status, r.reward) for r in later] == [(Status.OK, 1.0)] * 2, [r.error for r in later]
    assert fake.hits[WHEEL_PATH] == 1  # the later rollouts' wheel came from the cache
    assert "+ demo-pkg==1.0" in (later[0].out_dir / "verifier" / "stderr.txt").read_text()
