"""The driver's side of a Ray run without a cluster: node names, slots over the live nodes, the folders shipped
both ways, and the options refused before connecting."""

from __future__ import annotations

import io
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from agentbake.cli import main
from agentbake.errors import ConfigError, SandboxError
from agentbake.runner.cluster.folders import pack_folder, unpack_folder
from agentbake.runner.cluster.node import SCRATCH_PREFIX, prepare_image, remove_stale_scratch
from agentbake.runner.cluster.nodes import NodeSlots, NoNodeError, node_name
from agentbake.runner.cluster.ray_config import RayConfig
from agentbake.runner.cluster.ray_executor import RayExecutor
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.labels import this_process
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.tasks import discover_tasks
from tests.runner.rollouts import EXAMPLES


def _node(node_id: str, label: str | None, slots: int, alive: bool = True) -> dict:
    resources = {"CPU": 1.0, "node:10.0.0.7": 1.0, "agentbake_docker": float(slots)}
    if label:
        resources[f"node:{label}"] = 1.0
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": "10.0.0.7", "Resources": resources}


def test_a_node_is_named_by_its_label_else_its_address_and_id() -> None:
    assert node_name(_node("ab" * 28, "gpu-3", 2)) == "gpu-3"
    head = _node("cd" * 28, None, 2)
    head["Resources"]["node:__internal_head__"] = 1.0
    assert node_name(head) == "10.0.0.7/cdcdcdcd"


def test_slots_go_to_the_most_free_live_node_and_never_to_a_lost_one() -> None:
    listed = [_node("a" * 56, "w0", 2), _node("b" * 56, "w1", 1), _node("c" * 56, None, 0)]
    slots = NodeSlots("agentbake_docker", 60.0, lambda: listed)
    aborted = threading.Event()
    assert slots.count() == 2  # a node without the resource runs no rollout
    first, second, third = (slots.acquire(aborted) for _ in range(3))
    assert [first.name, second.name, third.name] == ["w0", "w0", "w1"] and first is second
    freed = threading.Timer(0.2, slots.release, [third])
    freed.start()
    assert slots.acquire(aborted) is third  # waits for a free slot
    slots.lost(first)
    for node in (first, second, third):
        slots.release(node)
    assert slots.acquire(aborted) is third  # w0 has both slots free, and is lost
    slots.lost(third)
    with pytest.raises(NoNodeError, match="no live Ray node advertises the resource 'agentbake_docker'"):
        slots.acquire(aborted)


def test_a_folder_goes_over_and_back_and_a_hostile_archive_is_refused(tmp_path: Path) -> None:
    (tmp_path / "src" / "agent").mkdir(parents=True)
    (tmp_path / "src" / "agent" / "log.txt").write_text("hello\n")
    (tmp_path / "src" / "result.json").write_text("{}\n")
    unpack_folder(pack_folder(tmp_path / "src"), tmp_path / "dst")
    assert (tmp_path / "dst" / "agent" / "log.txt").read_text() == "hello\n"
    assert pack_folder(tmp_path / "src") == pack_folder(tmp_path / "dst")

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        escape = tarfile.TarInfo("../escaped.txt")
        escape.size = 2
        tar.addfile(escape, io.BytesIO(b"x\n"))
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack_folder(buffer.getvalue(), tmp_path / "evil")
    assert not (tmp_path / "escaped.txt").exists()


def test_bad_ray_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="address"):
        RayConfig(address="")
    with pytest.raises(ValidationError, match="extra"):
        RayConfig(address="auto", resources="x")
    with socket.socket() as unused:  # bound, never listening: refused at once
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
        with pytest.raises(ConfigError, match=rf"--ray {address}: no Ray cluster answers there .*ray start --head"):
            RayExecutor(RayConfig(address=address))
    args = ["rollout", "claude-code", "--path", str(tmp_path), "--oracle", "--ray", "auto", "--ray-resource", ""]
    done = CliRunner().invoke(main, [*args, "--jobs-dir", str(tmp_path), "--job-name", "job"])
    assert done.exit_code == 2 and "Invalid value for --ray-resource" in done.output, done.output
    assert not (tmp_path / "job").exists()


@pytest.mark.docker
def test_an_executor_takes_a_backends_config_not_a_built_backend(
    image: str, backend: DockerBackend, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="pass its config"):
        Runner(RunnerConfig(image=image, oracle=True), backend, executor=object())  # type: ignore[arg-type]
    task = discover_tasks([EXAMPLES / "write-file"])[0]
    config = RunnerConfig(image=image, model="scripted", out_dir=tmp_path)
    with Runner(config, executor=object()) as runner:  # type: ignore[arg-type]
        result = runner.run(task)  # no start_scripted: refused here, before the executor is asked
    assert (result.status, result.node) == (Status.SANDBOX_ERROR, None)
    assert "start_scripted" in (result.error or "")
    assert RolloutResult.read(tmp_path / result.rollout_id).status is Status.SANDBOX_ERROR


def test_ray_with_another_backend_or_a_warm_pool_is_a_usage_error(tmp_path: Path) -> None:
    args = ["rollout", "claude-code", "--path", str(tmp_path), "--oracle", "--backend", "e2b", "--ray", "auto"]
    done = CliRunner().invoke(main, [*args, "--jobs-dir", str(tmp_path), "--job-name", "job"])
    assert done.exit_code == 2 and "--ray runs rollouts on the nodes' Docker engines: drop --backend e2b" in done.output
    done = CliRunner().invoke(
        main, [*args[:-4], "--warm", "2", "--ray", "auto", "--jobs-dir", str(tmp_path), "--job-name", "job"]
    )
    assert done.exit_code == 2 and "as the rollout needs it: drop --warm" in done.output
    assert not (tmp_path / "job").exists()  # refused before the job starts


@pytest.mark.docker
def test_an_image_a_node_cannot_make_is_refused_naming_why(image: str) -> None:
    with pytest.raises(SandboxError, match=r"no catalog image to build here; ship it from the driver"):
        prepare_image("example.org/not-here:1", [])
    assert prepare_image(image, []) == "present"
    stale = image.rsplit(":", 1)[0] + ":000000000000"  # another agentbake's catalog made this tag
    with pytest.raises(SandboxError, match=rf"this node's catalog builds '{image}' for 'claude-code', the run uses"):
        prepare_image(stale, [])


def test_the_scratch_of_a_worker_that_died_is_removed(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])  # a pid that no longer runs
    gone.wait()
    _, pid, start = this_process().rsplit(":", 2)
    stale = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{gone.pid}-1-"))
    live = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{pid}-{start}-"))
    try:
        assert stale in remove_stale_scratch()
        assert not stale.exists() and live.is_dir()
    finally:
        shutil.rmtree(live, ignore_errors=True)
