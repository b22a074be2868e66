"""Leftovers: a runner killed with SIGKILL, then `agentbake gc`; SIGTERM / Ctrl-C tear a batch down."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.runner.docker import labels
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.docker.gc import collect
from agentbake.runner.sandbox import SandboxRequest

# A batch runner in miniature: one sandbox inside teardown_on_signals, then it waits to be stopped.
RUNNER = """
import sys, time
from pathlib import Path
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.cli.teardown import teardown_on_signals
from agentbake.runner.sandbox import SandboxRequest

backend = DockerBackend(DockerConfig(runtime_dir=Path(sys.argv[3])))
with teardown_on_signals(backend):
    sandbox = backend.create(SandboxRequest(image=sys.argv[1], rollout_id=sys.argv[2]))
    print(sandbox.sandbox_id, sandbox.name, flush=True)
    time.sleep(120)
"""

RUN = secrets.token_hex(3)  # rollout ids unique per session: other sessions share the engine


@pytest.fixture
def runtime_dir(tmp_path: Path) -> Path:
    return tmp_path / "sandboxes"


@pytest.fixture
def backend(runtime_dir: Path) -> Iterator[DockerBackend]:
    backend = DockerBackend(DockerConfig(runtime_dir=runtime_dir, memory_mb=256, cpus=0.5))
    yield backend
    backend.close()


def start_runner(image: str, rollout_id: str, runtime_dir: Path) -> tuple[subprocess.Popen[str], str, str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, image, rollout_id, str(runtime_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert runner.stdout is not None
    container_id, name = runner.stdout.readline().split()
    return runner, container_id, name


def ours(engine: docker.DockerClient, rollout_id: str) -> list[str]:
    return [c.id for c in engine.containers.list(all=True, filters={"label": f"{labels.ROLLOUT}={rollout_id}"})]


def test_gc_after_kill_9_removes_the_dead_runners_sandbox_only(
    image: str, runtime_dir: Path, backend: DockerBackend, engine: docker.DockerClient
) -> None:
    alive = backend.create(SandboxRequest(image=image, rollout_id=f"test-gc-alive-{RUN}"))
    runner, container_id, name = start_runner(image, f"test-gc-killed-{RUN}", runtime_dir)
    runner.kill()
    runner.wait()
    assert ours(engine, f"test-gc-killed-{RUN}") == [container_id]  # SIGKILL: nothing could clean up

    listed = [x for x in collect(engine.api, dry_run=True, runtime_dir=runtime_dir) if x.rollout.endswith(RUN)]
    assert [(x.kind, x.name, x.reason, x.removed) for x in listed] == [("container", name, "owner gone", False)]
    assert ours(engine, f"test-gc-killed-{RUN}") == [container_id]

    removed = [x for x in collect(engine.api, runtime_dir=runtime_dir) if x.rollout.endswith(RUN)]
    assert [(x.kind, x.name, x.removed) for x in removed] == [("container", name, True)]
    assert ours(engine, f"test-gc-killed-{RUN}") == []
    assert not (runtime_dir / name).exists()
    assert ours(engine, f"test-gc-alive-{RUN}") == [alive.sandbox_id]  # its owner (this process) lives
    assert (runtime_dir / alive.name).is_dir()


def test_gc_removes_expired_sandboxes_and_orphan_folders(
    image: str, runtime_dir: Path, engine: docker.DockerClient
) -> None:
    backend = DockerBackend(DockerConfig(runtime_dir=runtime_dir, ttl_s=0.001, memory_mb=256, cpus=0.5))
    expired = backend.create(SandboxRequest(image=image, rollout_id=f"test-gc-expired-{RUN}"))
    orphan = runtime_dir / "agentbake-test-gc-orphan-0000"
    orphan.mkdir()
    os.utime(orphan, (time.time() - 3600, time.time() - 3600))

    cli = CliRunner().invoke(main, ["gc", "--dry-run", "--json", "--runtime-dir", str(runtime_dir)])
    assert cli.exit_code == 0, cli.output
    report = json.loads(cli.stdout)
    assert report["dry_run"] is True
    mine = {
        (x["kind"], x["name"], x["reason"])
        for x in report["leftovers"]
        if RUN in x["name"] or "test-gc-orphan" in x["name"]
    }
    assert mine == {("container", expired.name, "expired"), ("folder", str(orphan), "no container")}
    assert ours(engine, f"test-gc-expired-{RUN}") == [expired.sandbox_id]

    cli = CliRunner().invoke(main, ["gc", "--runtime-dir", str(runtime_dir)])
    assert cli.exit_code == 0, cli.output
    assert f"removed container {expired.name}" in cli.stderr
    assert ours(engine, f"test-gc-expired-{RUN}") == [] and not orphan.exists()
    expired.kill()  # already gone: a no-op


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_ctrl_c_tear_the_batch_down(
    image: str, runtime_dir: Path, engine: docker.DockerClient, signum: signal.Signals
) -> None:
    rollout_id = f"test-gc-{signum.name.lower()}-{RUN}"
    runner, container_id, name = start_runner(image, rollout_id, runtime_dir)
    assert ours(engine, rollout_id) == [container_id]
    runner.send_signal(signum)
    assert runner.wait(30) == (143 if signum == signal.SIGTERM else -signal.SIGINT)  # SystemExit / KeyboardInterrupt
    assert ours(engine, rollout_id) == []
    assert not (runtime_dir / name).exists()


def test_an_owner_is_its_process_not_just_its_pid() -> None:
    host, pid, start = labels.this_process().split(":")
    assert labels.owner_alive(labels.this_process()) is True
    assert labels.owner_alive(f"{host}:{pid}:{int(start) + 1}") is False  # same pid, later process: not us
    assert labels.owner_alive(f"{host}:999999999:1") is False
    assert labels.owner_alive(f"other-{host}:{pid}:{start}") is None  # another host: only expiry counts
    assert labels.owner_alive("garbage") is False


def test_gc_removes_a_labelled_network_whose_owner_is_gone(engine: docker.DockerClient, runtime_dir: Path) -> None:
    host, pid, start = labels.this_process().split(":")
    network = engine.networks.create(
        f"agentbake-test-gc-{RUN}",
        internal=True,
        labels={labels.ROLLOUT: f"test-gc-net-{RUN}", labels.OWNER: f"{host}:{pid}:{int(start) + 1}"},
    )
    try:
        removed = [x for x in collect(engine.api, runtime_dir=runtime_dir) if x.rollout.endswith(RUN)]
        assert [(x.kind, x.name, x.reason, x.removed) for x in removed] == [
            ("network", network.name, "owner gone", True)
        ]
        assert engine.networks.list(names=[network.name]) == []
    finally:
        if engine.networks.list(names=[network.name]):
            network.remove()
