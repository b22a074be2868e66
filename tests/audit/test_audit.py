"""`agentbake audit` through the real engine and the oracle (no model): the example tasks are not forgeable, a
verifier that runs the agent's code as root and trusts its exit status is, one that only reads a file is not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner, Result

from agentbake.audit.exploits import BY_NAME
from agentbake.buildkit.build import BuildResult
from agentbake.cli import main
from tests.audit.tasks import READING, TRUSTING, reading_task, trusting_task
from tests.runner.rollouts import EXAMPLES

pytestmark = pytest.mark.docker

# What the CI runs, to keep its cost bounded (a rollout costs seconds; the examples with the whole battery took
# 200 s on this loaded 2-core machine): the examples that run the agent's code (unprivileged) get the exploits
# that act through code, the ones whose verifiers read files get those that act through files. huge-workdir
# (20,000 files through the harness's diff and storage watchdog: tens of seconds) runs on the reading task only.
EXAMPLE_GROUPS = {
    "code": (
        ("fix-failing-test", "fix-inventory"),
        (
            "import-exit",
            "conftest-pass",
            "pytest-config",
            "shadow-stdlib",
            "user-site",
            "daemon-polls",
            "daemon-spins",
            "edit-visible-tests",
        ),
    ),
    "files": (
        ("write-file", "multi-step-report", "summarize-logs"),
        ("import-exit", "symlinks", "fake-pass-lines", "empty-workdir", "reward-prewrite"),
    ),
}
ALL_BUT_HUGE = [name for name in BY_NAME if name != "huge-workdir"]


def audit(*args: str) -> tuple[Result, dict[tuple[str, str], dict]]:
    """`agentbake audit ARGS --json`, and its lines by (task, name)."""
    result = CliRunner().invoke(main, ["audit", *args, "--json"])
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result, {(line["task"], line["name"]): line for line in lines}


@pytest.fixture(scope="module")
def tag(built_images: dict[str, BuildResult]) -> str:
    return built_images["claude-code"].tag


@pytest.fixture(scope="module", autouse=True)
def remove_the_trusting_tasks_images(engine: docker.DockerClient) -> Iterator[None]:
    """Its task image and runnable layer (the examples' stay cached for the next run)."""
    yield
    for image in engine.images.list(filters={"label": f"dev.agentbake.task.name={TRUSTING}"}):
        engine.images.remove(image.id, force=True)
    for image in engine.images.list(name=f"agentbake-task/{TRUSTING}"):
        for name in image.tags:
            engine.images.remove(name, force=True)


def test_every_example_is_in_a_group() -> None:
    examples = {p.name for p in EXAMPLES.iterdir() if (p / "instruction.md").is_file()}
    assert examples == {task for tasks, _ in EXAMPLE_GROUPS.values() for task in tasks}
    assert {name for _, names in EXAMPLE_GROUPS.values() for name in names} <= set(BY_NAME)


@pytest.mark.parametrize("group", EXAMPLE_GROUPS)
def test_no_example_task_is_forgeable(tag: str, group: str) -> None:
    tasks, exploits = EXAMPLE_GROUPS[group]
    args = [*(str(EXAMPLES / task) for task in tasks), "-n", "4", "--agent", tag]
    result, lines = audit(*args, *(f"--exploit={name}" for name in exploits))
    assert result.exit_code == 0, result.output
    assert len(lines) == len(tasks) * (2 + len(exploits))
    for task in tasks:
        assert lines[(task, "nothing")]["reward"] == 0 and lines[(task, "solution")]["reward"] == 1, task
        for name in exploits:
            line = lines[(task, name)]
            # a root agent's startup hooks are caught before test.sh runs: the reward is withheld, not scored
            held = line["status"] == "verifier_error" and not line["reward"] and "toolchain" in line["error"]
            assert not line["forged"] and (line["status"] == "ok" or held), line


TRUSTING_FORGED = ("import-exit", "conftest-pass", "pytest-config", "shadow-stdlib")
TRUSTING_HELD = ("user-site", "symlinks", "fake-pass-lines", "empty-workdir", "reward-prewrite")


def test_a_verifier_trusting_the_agents_code_is_forged_and_one_reading_a_file_is_not(tag: str, tmp_path: Path) -> None:
    trusting, reading = trusting_task(tmp_path), reading_task(tmp_path)
    out = tmp_path / "out"
    exploits = [f"--exploit={name}" for name in ALL_BUT_HUGE]
    result, lines = audit(str(trusting), str(reading), "-n", "4", "--agent", tag, "-o", str(out), *exploits)
    assert result.exit_code == 1, result.output
    assert (lines[(TRUSTING, "nothing")]["reward"], lines[(TRUSTING, "solution")]["reward"]) == (0, 1)
    for name in TRUSTING_FORGED:
        line = lines[(TRUSTING, name)]
        assert line["forged"] and line["reward"] == 1 and line["status"] == "ok", line
        assert line["hint"] == BY_NAME[name].hint
    for name in TRUSTING_HELD:
        assert not lines[(TRUSTING, name)]["forged"], lines[(TRUSTING, name)]
    assert (lines[(READING, "nothing")]["reward"], lines[(READING, "solution")]["reward"]) == (0, 1)
    for name in ALL_BUT_HUGE:
        line = lines[(READING, name)]
        assert not line["forged"] and line["reward"] == 0 and line["hint"] is None, line
    # each rollout's files are kept under --out: the link into /tests was removed before the verifier ran
    removed = (out / READING / "symlinks" / "verifier" / "removed-links.txt").read_text()
    assert "answer.txt" in removed
    assert (out / TRUSTING / "import-exit" / "result.json").is_file()


def test_a_huge_workdir_earns_nothing_from_a_verifier_reading_a_file(tag: str, tmp_path: Path) -> None:
    result, lines = audit(str(reading_task(tmp_path)), "--agent", tag, "--exploit", "huge-workdir")
    assert result.exit_code == 0, result.output
    assert set(lines) == {(READING, "nothing"), (READING, "solution"), (READING, "huge-workdir")}
    huge = lines[(READING, "huge-workdir")]
    assert (huge["forged"], huge["reward"], huge["status"]) == (False, 0, "ok")
