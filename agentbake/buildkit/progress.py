"""A build's progress on stderr, for `agentbake build` and commands that build on demand."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import Progress as RichProgressBar
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

from agentbake.buildkit.builders import Progress


class ConsoleProgress(Progress):
    """The current step and a live elapsed-time clock on stderr; step lines alone when not on a terminal.
    Call close() when the build ends (it stops the live display)."""

    def __init__(self, image: str, console: Console | None = None) -> None:
        self.image, self.started = image, time.monotonic()
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        columns = (SpinnerColumn(), TimeElapsedColumn(), TextColumn("{task.description}"))
        self.live = RichProgressBar(*columns, console=self.console) if self.console.is_terminal else None
        if self.live:
            self.task = self.live.add_task(f"{image}: starting")
            self.live.start()

    def step(self, index: int, total: int, instruction: str) -> None:
        text = f"{self.image} step {index}/{total}: {_one_line(instruction)}"
        if self.live:
            self.live.update(self.task, description=text)
        self.console.print(f"[{time.monotonic() - self.started:6.1f}s] {text}", markup=False)

    def output(self, line: str) -> None:
        if self.live:
            self.live.update(self.task, description=f"{self.image}: {_one_line(line)}")

    def close(self) -> None:
        if self.live:
            self.live.stop()


def _one_line(text: str, width: int = 100) -> str:
    """`text` with its whitespace collapsed, cut to `width` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
