"""Hostile tasks through the real engine (issue 15): `--oracle` runs solve.sh as the agent, and solve.sh is the
attack. Each attack ends with its reward and status while the runner's memory, its descriptors, the host's disk
and the rest of the batch stay unharmed. Every group runs as one batch beside a healthy task."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox.copyout import CopyBudget
from agentbake.tasks import load_task
from tests.resources import Peak
from tests.runner.rollouts import copy_example, leftovers, write_task

pytestmark = pytest.mark.docker

MiB = 1024 * 1024
LOGS = '"$HOME/logs/agent"'  # the claude-code image's agent-log dir (label dev.agentbake.dir.logs_agent)
NOT_SOLVED = "[ -f solved.txt ]\n"


@pytest.fixture(scope="module")
def runner(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    backend = DockerBackend(DockerConfig(memory_mb=512, cpus=1, pids_limit=256))
    out = tmp_path_factory.mktemp("out")
    with Runner(RunnerConfig(image=image, oracle=True, out_dir=out), backend) as runner:
        yield runner
    backend.close()


def run_beside_a_healthy_task(runner: Runner, root: Path, hostile: dict[str, str]) -> dict[str, RolloutResult]:
    """The hostile solve.sh scripts (name -> script, judged by NOT_SOLVED) and the write-file example in one batch;
    the example must end ok with reward 1."""
    tasks = [load_task(write_task(root, name, solve=solve, test=NOT_SOLVED)) for name, solve in hostile.items()]
    tasks.append(load_task(copy_example(root, "write-file", "healthy")))
    results = {r.task: r for r in runner.run_batch(tasks, concurrency=len(tasks))}
    assert (results["healthy"].status, results["healthy"].reward) == (Status.OK, 1.0), results["healthy"].error
    return results


def disk_use(folder: Path) -> int:
    """Bytes the files under `folder` occupy on the host's disk (allocated blocks, so a sparse file counts what
    it uses)."""
    return sum(path.lstat().st_blocks * 512 for path in folder.rglob("*"))


COPY_OUT = {
    # A 2 GiB sparse file: once 4 GiB on the host and 4.15 GB of runner memory (the archive held whole).
    "sparse-log": f"mkdir -p {LOGS} && truncate -s 2G {LOGS}/sparse.bin && echo kept > {LOGS}/small.txt\n",
    # 200k small files: once 200k inodes in out/.
    "many-logs": f"mkdir -p {LOGS}/many && cd {LOGS}/many && seq 200000 | xargs touch\n",
    # Links in the log dir: once the whole collection stopped there (status ok, log lost).
    "linked-logs": (
        f"mkdir -p {LOGS}/sub && ln -s /etc/shadow {LOGS}/shadow && ln -s / {LOGS}/root && "
        f"ln -s /nowhere {LOGS}/dangling && ln {LOGS}/oracle.log {LOGS}/hard 2>/dev/null; "
        f"mkfifo {LOGS}/fifo && echo real > {LOGS}/sub/real.txt\n"
    ),
    # 1 GiB on stdout: once 3.1 GB of runner memory.
    "loud-agent": "head -c 1073741824 /dev/zero | tr '\\0' 'y'\n",
}


def test_copy_out_attacks_are_cut_with_notes_and_cost_the_host_little(
    runner: Runner, engine: docker.DockerClient, tmp_path: Path
) -> None:
    with Peak() as peak:
        results = run_beside_a_healthy_task(runner, tmp_path, COPY_OUT)
    print(f"\ncopy-out attacks: +{peak.added_mib:.0f} MiB resident (peak), +{peak.added_fds} descriptors (peak)")
    budget = CopyBudget()
    for name in COPY_OUT:
        result = results[name]
        assert (result.status, result.reward) == (Status.OK, 0.0), (name, result.error)
        assert disk_use(result.out_dir) < budget.bytes + 16 * MiB, name
    assert peak.added_mib < 600  # the 2 GiB, 1 GiB and 200k-file streams are never held whole

    sparse = results["sparse-log"]
    agent = sparse.out_dir / "agent"
    assert (agent / "small.txt").read_text() == "kept\n"
    assert (agent / "sparse.bin").stat().st_size == budget.file_bytes
    assert f"/home/agent/logs/agent/sparse.bin: {2048 * MiB} bytes, cut at {budget.file_bytes}" in "\n".join(
        sparse.notes
    )

    many = results["many-logs"]
    assert sum(1 for _ in (many.out_dir / "agent").rglob("*")) <= budget.files
    assert any("copy stopped at the most files a rollout may collect" in note for note in many.notes)

    linked = results["linked-logs"]
    agent = linked.out_dir / "agent"
    assert (agent / "sub" / "real.txt").read_text() == "real\n" and (agent / "oracle.log").is_file()
    assert not any(path.is_symlink() for path in agent.rglob("*"))
    notes = "\n".join(linked.notes)
    for line in ("shadow: a symlink to '/etc/shadow'", "root: a symlink to '/'", "fifo: a device, FIFO"):
        assert line in notes
    assert (linked.out_dir / "verifier" / "stdout.txt").exists()

    loud = results["loud-agent"]
    log = (loud.out_dir / "agent" / "oracle.log").stat().st_size
    assert log == budget.file_bytes  # the tee'd copy in the agent-log dir, cut at the per-file cap
    assert any("oracle.log: 1073741824 bytes, cut at" in note for note in loud.notes)
    assert all(not leftovers(engine, name) for name in COPY_OUT)
