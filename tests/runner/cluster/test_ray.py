"""Rollouts on a local three-node Ray cluster (`conftest.py`) and the real engine: a batch spread over the nodes
into one job directory, the gateway on the node with the trace streamed back, a worker node SIGKILLed mid-batch
(its rollouts `node_lost`, the batch goes on, `--resume` runs them again)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import docker
import pytest

from agentbake.errors import ConfigError
from agentbake.runner import Runner, RunnerConfig, Status, discover_tasks
from agentbake.runner.cluster.node import SCRATCH_PREFIX, prepare_image
from agentbake.runner.cluster.ray_config import RayConfig
from agentbake.runner.cluster.ray_executor import RayExecutor
from agentbake.runner.docker import labels
from tests.runner.cluster.conftest import NODES, LocalCluster
from tests.runner.rollouts import EXAMPLES, write_task

pytestmark = pytest.mark.docker

AGENTBAKE = [sys.executable, "-c", "from agentbake.cli import main; main()"]


def results(job: Path) -> dict[str, dict]:
    return {path.parent.name: json.loads(path.read_text()) for path in sorted(job.glob("*/result.json"))}


def test_scripted_batch_runs_its_gateways_on_the_nodes(cluster: LocalCluster, image: str, tmp_path: Path) -> None:
    tasks = discover_tasks([EXAMPLES / "write-file"])
    config = RunnerConfig(image=image, model="scripted", out_dir=tmp_path)
    with RayExecutor(RayConfig(address=cluster.address)) as executor:
        with Runner(config, executor=executor) as runner:
            runner.start_scripted(tasks)
            done = runner.run_batch(tasks, repeats=2, concurrency=2)
        with Runner(RunnerConfig(image=image, oracle=True, out_dir=tmp_path), executor=executor) as runner:
            assert runner.run(tasks[0]).status is Status.OK  # a closed runner leaves its executor serving
    assert [r.status for r in done] == [Status.OK] * 2, [r.error for r in done]
    assert len({r.node for r in done}) == 2 and {r.node for r in done} <= set(NODES)  # the most free node first
    for result in done:
        assert result.reward == 1.0 and result.turns > 0 and result.trace  # the node's gateway, its trace back here
        assert result.trace[0].completion_token_ids
        assert result.out_dir is not None and result.out_dir.parent == tmp_path
        written = json.loads((result.out_dir / "result.json").read_text())
        assert (written["node"], written["out_dir"]) == (result.node, str(result.out_dir))
        assert (result.out_dir / "trace.jsonl").is_file() and (result.out_dir / "sequences.json").is_file()


def test_a_node_lacking_the_image_loads_the_one_the_driver_shipped(
    cluster: LocalCluster, engine: docker.DockerClient
) -> None:
    import ray

    tag = f"agentbake-test/shipped:{secrets.token_hex(4)}"
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"hi\n"))
    engine.api.import_image_from_data(layer.getvalue(), repository=tag.split(":")[0], tag=tag.split(":")[1])
    try:
        saved = b"".join(engine.api.get_image(tag))
        engine.images.remove(tag)
        with RayExecutor(RayConfig(address=cluster.address)):
            prepare = ray.remote(num_cpus=0, resources={"node:w2": 0.01})(prepare_image)
            assert ray.get(prepare.remote(tag, [ray.put(saved)])) == "loaded"
        assert engine.images.get(tag).tags == [tag]
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            engine.images.remove(tag)


def test_a_resource_no_node_advertises_is_refused(cluster: LocalCluster) -> None:
    with pytest.raises(ConfigError, match=r"no live node of the cluster advertises the resource 'gpu_docker'"):
        RayExecutor(RayConfig(address=cluster.address, resource="gpu_docker"))


def _kill_when_running(
    cluster: LocalCluster, label: str, engine: docker.DockerClient, batch: subprocess.Popen
) -> tuple[str, int]:
    """SIGKILL node `label`'s raylet once a sandbox of one of its workers runs; the rollout and that worker."""
    raylet = cluster.raylet(label)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and batch.poll() is None:
        for container in engine.containers.list(filters={"label": labels.ROLLOUT}, ignore_removed=True):
            owner_pid = int(container.labels.get(labels.OWNER, "-:0:-").split(":")[1])
            try:
                parent = int(Path(f"/proc/{owner_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if parent == raylet:
                os.kill(raylet, signal.SIGKILL)
                return container.labels[labels.ROLLOUT], owner_pid
        time.sleep(0.2)
    raise AssertionError(f"no rollout ran on node {label}: {batch.communicate()}")


def test_a_batch_goes_on_past_a_killed_node_and_resume_runs_its_rollouts(
    cluster: LocalCluster, image: str, engine: docker.DockerClient, tmp_path: Path
) -> None:
    for name in ("slow-a", "slow-b", "slow-c"):  # the agent's phase long enough to kill a node under it
        write_task(
            tmp_path / "tasks",
            name,
            solve="sleep 4\necho done > out.txt\n",
            test="echo 1 > /logs/verifier/reward.txt\n",
        )
    job = tmp_path / "job"
    args = [*AGENTBAKE, "rollout", image, "--path", str(tmp_path / "tasks"), "--oracle", "-n", "3"]
    batch = subprocess.Popen(  # the most free node first: one rollout each
        [*args, "--ray", cluster.address, "--jobs-dir", str(tmp_path), "--job-name", "job"],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed, worker = _kill_when_running(cluster, "w1", engine, batch)
    _out, err = batch.communicate(timeout=300)
    assert batch.returncode == 0, err
    found = results(job)
    assert len(found) == 3 and {r["node"] for r in found.values()} == set(NODES)
    lost = {folder: r for folder, r in found.items() if r["node"] == "w1"}
    assert killed in {r["rollout_id"] for r in lost.values()}
    for result in lost.values():
        assert (result["status"], result["reward"]) == ("node_lost", 0.0)
        assert result["error"].startswith("node lost:") and "w1" in result["error"]
    assert [r["status"] for f, r in found.items() if f not in lost] == ["ok"] * (3 - len(lost))
    summary = json.loads((job / "summary.json").read_text())
    assert (summary["complete"], summary["finished"]) == (False, 3 - len(lost))
    # What the killed node's runner left on the engine (there `agentbake gc` removes it: its owner is gone).
    for container in engine.containers.list(all=True, filters={"label": labels.ROLLOUT}, ignore_removed=True):
        if container.labels[labels.ROLLOUT] in {r["rollout_id"] for r in lost.values()}:
            container.remove(force=True)

    resumed = subprocess.run(
        [*AGENTBAKE, "rollout", "--resume", str(job), "--ray", cluster.address, "--json"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"{3 - len(lost)} rollouts finished, {len(lost)} to run" in resumed.stderr
    again = results(job)
    assert all(r["status"] == "ok" for r in again.values()), again
    assert {again[folder]["node"] for folder in lost} <= {"w0", "w2"}  # the dead node gets none
    assert {folder: r["rollout_id"] for folder, r in again.items() if folder not in lost} == {
        folder: r["rollout_id"] for folder, r in found.items() if folder not in lost
    }
    assert json.loads(resumed.stdout.splitlines()[-1])["complete"] is True
    # The killed node's worker left its scratch folder; the next worker on this host removed it.
    assert not list(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}{worker}-*"))
