"""The top-level command: every subcommand is reachable, and each loads only its own package."""

from __future__ import annotations

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


def test_gateway_does_not_import_the_build_kit() -> None:
    probe = (
        "import sys\nfrom agentbake.cli import main\n"
        "try:\n    main(['gateway', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('docker', 'rich', 'agentbake.buildkit') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"


def test_unknown_command() -> None:
    result = CliRunner().invoke(main, ["bulid"])
    assert result.exit_code == 2 and "No such command 'bulid'" in result.output
