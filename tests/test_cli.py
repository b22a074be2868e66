"""The top-level command: every subcommand is reachable, and each loads only its own package."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from agentbake.cli import COMMANDS, main


def test_every_command_loads_and_has_help() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output
        assert CliRunner().invoke(main, [name, "--help"]).exit_code == 0, name


def _imported(argv: list[str], modules: tuple[str, ...]) -> list[str]:
    """Which of `modules` `agentbake ARGV` has imported by the time it exits (in a fresh interpreter)."""
    probe = (
        "import json, sys\nfrom agentbake.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps(sorted(m for m in {modules!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_help_lists_every_command_with_its_summary_and_imports_none() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    listed = dict(line.split(maxsplit=1) for line in result.output.split("Commands:\n")[1].splitlines())
    assert listed == {name: summary for name, (_, summary) in COMMANDS.items()}
    heavy = ("docker", "pydantic", "jinja2", "rich", *(target.split(":")[0] for target, _ in COMMANDS.values()))
    assert _imported(["--help"], heavy) == []


def test_h_is_help_everywhere() -> None:
    for argv in ([], ["run"], ["trace"], ["trace", "summary"]):
        short, long = (CliRunner().invoke(main, [*argv, option]) for option in ("-h", "--help"))
        assert short.exit_code == long.exit_code == 0, argv
        assert short.output == long.output and "-h, --help" in short.output, argv


def test_gateway_does_not_import_the_build_kit() -> None:
    assert _imported(["gateway", "--help"], ("docker", "rich", "agentbake.buildkit")) == []


# What `run`/`rollout` need only once they run: the engine's SDK, the backends, the gateway's server, the build
# kit, rich, the runner itself, the export, pydantic and the config models. Their --help (and a usage error)
# must not pay for them: the options' choices, defaults and help come from plain modules.
RUNTIME_ONLY = (
    "asyncio",
    "pydantic",
    "agentbake.gateway.config",
    "agentbake.runner.runner_config",
    "agentbake.runner.docker.config",
    "agentbake.runner.remote.relay_config",
    "docker",
    "rich",
    "httpx",
    "uvicorn",
    "starlette",
    "agentbake.buildkit",
    "agentbake.gateway.app",
    "agentbake.export",
    "agentbake.runner.runner",
    "agentbake.runner.rollout",
    "agentbake.runner.docker.backend",
    "agentbake.runner.remote.e2b",
    "agentbake.runner.remote.hf",
    "agentbake.tasks",
)


def test_run_rollout_and_audit_help_import_only_their_options() -> None:
    assert _imported(["run", "--help"], RUNTIME_ONLY) == []
    assert _imported(["rollout", "--help"], RUNTIME_ONLY) == []
    assert _imported(["audit", "--help"], RUNTIME_ONLY) == []


def test_unknown_command() -> None:
    result = CliRunner().invoke(main, ["bulid"])
    assert result.exit_code == 2 and "No such command 'bulid'" in result.output
