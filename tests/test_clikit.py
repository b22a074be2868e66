"""Options shared across commands: one meaning per name, and old spellings that still parse with a warning."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from agentbake.cli import COMMANDS, main
from agentbake.clikit import rename_options
from agentbake.runner.cli.run_options import RENAMED


def _commands() -> dict[str, click.Command]:
    """Every command by its path (`trace export`, `base create`, ...)."""
    found: dict[str, click.Command] = {}
    ctx = click.Context(main)
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None
        found[name] = command
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                found[f"{name} {sub.name}"] = sub
    return found


def test_each_short_option_means_one_thing_across_commands() -> None:
    """Harbor's short names where they fit: -p a task path, -n concurrency, -k attempts, -m a model name, -a an
    agent, -o where output goes."""
    meanings = {"-p": {"--path"}, "-n": {"--n-concurrent"}, "-k": {"--n-attempts"}, "-m": {"--model"}}
    meanings |= {"-a": {"--agent"}, "-o": {"--rollouts-dir", "--jobs-dir", "--output"}}
    for path, command in _commands().items():
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            shorts = [o for o in param.opts if not o.startswith("--")]
            longs = {o for o in param.opts if o.startswith("--")}
            for short in shorts:
                assert longs <= meanings[short], f"agentbake {path}: {short} is {longs}"


def test_old_spellings_are_gone_from_help() -> None:
    for path, command in _commands().items():
        names = {o for p in command.params for o in p.opts}
        gone = {"--task", "--tasks", "--out"} | ({"--model-name"} if path in ("run", "rollout") else set())
        assert not names & gone, f"agentbake {path}"
        if path in ("run", "rollout"):
            assert {"--upstream", "--model", "--path"} <= names


@pytest.mark.parametrize(
    ("args", "expected", "warning"),
    [
        (
            ["--model", "http://h/v1"],
            ["--upstream", "http://h/v1"],
            "--model http://h/v1 is deprecated; use --upstream",
        ),
        (["--model=scripted"], ["--upstream", "scripted"], "use --upstream"),
        (["--model", "Qwen/Qwen3-8B"], ["--model", "Qwen/Qwen3-8B"], ""),
        (["--model-name=Q", "-k", "2"], ["--model=Q", "-k", "2"], "--model-name is deprecated; use --model"),
        (["--", "--model-name"], ["--", "--model-name"], ""),
    ],
)
def test_rename_options_rewrites_old_spellings_and_warns(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: list[str], warning: str
) -> None:
    assert rename_options(args, RENAMED) == expected
    err = capsys.readouterr().err
    assert (warning in err) if warning else err == ""


def test_an_old_spelling_still_runs_the_command(tmp_path: Path) -> None:
    old = CliRunner().invoke(main, ["scripted-llm", "--tasks", str(tmp_path)])
    assert old.exit_code == 1 and "neither a task (no instruction.md) nor a folder of tasks" in old.output
    assert "warning: --tasks is deprecated; use --path" in old.output
