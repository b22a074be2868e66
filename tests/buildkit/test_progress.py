"""ConsoleProgress off a terminal: one timed line per step, output lines kept off stderr."""

from __future__ import annotations

import io

from rich.console import Console

from agentbake.buildkit.progress import ConsoleProgress


def test_steps_are_printed_one_line_each_without_a_live_display() -> None:
    buffer = io.StringIO()
    progress = ConsoleProgress("claude-code", Console(file=buffer, force_terminal=False, width=200))
    assert progress.live is None
    progress.step(2, 5, "RUN  npm ci \\\n   --omit=dev " + "x" * 200)
    progress.output("added 12 packages")
    progress.close()
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 1
    assert "claude-code step 2/5: RUN npm ci \\ --omit=dev" in lines[0]
    assert lines[0].endswith("…")
    assert "added 12 packages" not in buffer.getvalue()
