"""Two real jobs, made once for the report's tests by `agentbake rollout` on the Docker engine: A runs Claude Code
against the scripted model, two attempts of an example task and of a task whose setup fails; B runs the
reference solutions once each."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.runner.cli.test_commands import agentbake
from tests.runner.rollouts import EXAMPLES, write_task

SETUP_FAILURE = "setup failed: the fixture database is missing"


@pytest.fixture(scope="session")
def report_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tasks = tmp_path_factory.mktemp("report-tasks")
    shutil.copytree(EXAMPLES / "write-file", tasks / "write-file")
    write_task(
        tasks,
        "broken-setup",
        solve="echo done > out.txt\n",
        test="echo 1 > /logs/verifier/reward.txt\n",
        setup=f"echo '{SETUP_FAILURE}' >&2; exit 3\n",
    )
    return tasks


@pytest.fixture(scope="session")
def job_a(built_images: dict, report_tasks: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The scripted job's directory and what `agentbake rollout` printed on stderr."""
    jobs = tmp_path_factory.mktemp("report-jobs")
    done = agentbake(
        "rollout", "claude-code", "--path", str(report_tasks), "--upstream", "scripted", "-k", "2", "-n", "4",
        "--jobs-dir", str(jobs), "--job-name", "scripted",
    )  # fmt: skip
    job = jobs / "scripted"
    assert done.returncode == 0, done.stderr
    return job, done.stderr


@pytest.fixture(scope="session")
def job_b(built_images: dict, report_tasks: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    jobs = tmp_path_factory.mktemp("report-jobs")
    done = agentbake(
        "rollout", "claude-code", "--path", str(report_tasks), "--oracle", "-n", "2", "--jobs-dir", str(jobs),
        "--job-name", "oracle",
    )  # fmt: skip
    job = jobs / "oracle"
    assert done.returncode == 0, done.stderr
    return job
