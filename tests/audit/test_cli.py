"""`agentbake audit`'s bad input (exit 2, the task loader's message, before any image or sandbox) and its
report, without an engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from agentbake.audit.audit import Finding, TaskAudit
from agentbake.audit.cli import _print_report
from agentbake.audit.exploits import BY_NAME
from agentbake.cli import main
from tests.audit.tasks import reading_task


def audit(*args: str):
    return CliRunner().invoke(main, ["audit", *args])


def test_a_folder_that_is_no_task_is_refused_with_the_loaders_message(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = audit(str(tmp_path / "empty"))
    assert result.exit_code == 2
    assert f"{tmp_path / 'empty'}: neither a task (no instruction.md) nor a folder of tasks" in result.stderr


def test_a_task_whose_toml_is_broken_is_refused_naming_the_file(tmp_path: Path) -> None:
    task = reading_task(tmp_path)
    (task / "task.toml").write_text("[agent]\ntimeout_sec = -1\n")
    result = audit(str(task))
    assert result.exit_code == 2
    assert str(task / "task.toml") in result.stderr and "timeout_sec" in result.stderr


def test_a_task_without_its_verifier_is_refused(tmp_path: Path) -> None:
    task = reading_task(tmp_path)
    (task / "tests" / "test.sh").unlink()
    result = audit(str(task))
    assert result.exit_code == 2 and "tests/test.sh: missing" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/no/such/task"], "'/no/such/task' does not exist"),
        (["--exploit", "no-such-exploit", "."], "'no-such-exploit' is not one of"),
        ([], "Missing argument 'TASK...'"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    result = audit(*args)
    assert result.exit_code == 2 and message in result.stderr


def test_an_out_folder_in_use_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "kept.txt").write_text("mine\n")
    result = audit(str(reading_task(tmp_path)), "-o", str(tmp_path / "out"))
    assert result.exit_code == 2 and "not empty" in result.stderr
    assert (tmp_path / "out" / "kept.txt").read_text() == "mine\n"


def test_the_report_names_each_forgery_with_its_hint(capsys: pytest.CaptureFixture[str]) -> None:
    hint = BY_NAME["import-exit"].hint
    findings = [
        Finding("t", "nothing", baseline=True, forged=False, reward=0.0, status="ok"),
        Finding("t", "import-exit", baseline=False, forged=True, reward=1.0, status="ok", hint=hint),
        Finding("t", "symlinks", baseline=False, forged=False, reward=0.0, status="verifier_error", error="x"),
    ]
    _print_report([TaskAudit("t", 0.0, findings)], 2, kept=None)
    out = capsys.readouterr().out
    for word in ("nothing", "baseline", "import-exit", "FORGED", "symlinks", "verifier_error"):
        assert word in out
    assert "forged t / import-exit: the agent's code, run by the verifier" in " ".join(out.split())
    assert "1 forged rewards in 1 of 1 tasks" in out
