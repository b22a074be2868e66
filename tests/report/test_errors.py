"""`agentbake report` on what is not a job: one clear error naming the file and what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbake.cli import main


def report(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(main, ["report", *args])
    return done.exit_code, done.output


def job_dir(tmp_path: Path, summary: object, config: object = None) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "summary.json").write_text(summary if isinstance(summary, str) else json.dumps(summary))
    (job / "config.json").write_text(json.dumps(config if config is not None else {"tasks": [], "n_attempts": 1}))
    return job


def test_a_folder_without_summary_is_named(tmp_path: Path) -> None:
    code, output = report(str(tmp_path))
    assert code == 1
    assert f"{tmp_path / 'summary.json'}: missing; expected a job directory" in output


@pytest.mark.parametrize(
    ("summary", "message"),
    [
        ("{not json", "summary.json: unreadable"),
        ([1, 2], "summary.json: expected a JSON object"),
        ({"rollouts": []}, "expected a job's summary (keys `summary` and `rollouts`)"),
    ],
)
def test_an_unreadable_summary_is_named(tmp_path: Path, summary: object, message: str) -> None:
    code, output = report(str(job_dir(tmp_path, summary)))
    assert code == 1 and message in output


def test_a_rollout_without_its_result_is_named(tmp_path: Path) -> None:
    summary = {"summary": {}, "rollouts": [{"folder": "t__0", "task": "t", "attempt": 0}]}
    code, output = report(str(job_dir(tmp_path, summary)))
    assert code == 1 and f"{tmp_path / 'job' / 't__0' / 'result.json'}: not a rollout's result" in output


def test_more_than_two_jobs_is_a_usage_error(tmp_path: Path) -> None:
    code, output = report(str(tmp_path), str(tmp_path), str(tmp_path))
    assert code == 2 and "give one job directory, or two to compare them" in output


def test_an_unwritable_output_is_named(tmp_path: Path) -> None:
    job = job_dir(tmp_path, {"summary": {}, "rollouts": []})
    code, output = report(str(job), "-o", str(tmp_path / "missing" / "r.html"))
    assert code == 1 and "r.html: cannot write the report" in output and "-o" in output
