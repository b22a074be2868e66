"""What `agentbake run` and `agentbake rollout` print: warnings, build progress, results, live progress, summaries.

Tables go to stdout, the rest to stderr. rich is imported only when something is printed.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from agentbake.runner.result import RolloutResult, summarize_results

if TYPE_CHECKING:
    from rich.console import Console

    from agentbake.buildkit.progress import ConsoleProgress


@functools.cache
def err() -> Console:
    """The console on stderr (stdout stays the `--json` output), made on first use."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def warn(warnings: tuple[str, ...]) -> None:
    for warning in warnings:
        err().print(f"[yellow]warning:[/] {warning}", markup=True)


def build_progress(what: str) -> ConsoleProgress:
    """A build's progress on stderr (stdout stays the `--json` output)."""
    from agentbake.buildkit.progress import ConsoleProgress

    err().print(f"building {what} (missing on this engine)")
    return ConsoleProgress(what, err())


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_result(result: RolloutResult) -> None:
    """The rollout's status (coloured on a terminal), its error, phases and files, on stderr."""
    head = f"reward {result.reward:g}  {result.rollout_id}  ({result.agent})"
    phases = "  ".join(f"{name} {seconds:.2f}s" for name, seconds in result.timings.items())
    lines = [
        *([f"  {result.error}"] if result.error else []),
        f"  {phases}",
        f"  turns {result.turns}, tokens captured {result.tokens}; files in {result.out_dir}",
    ]
    if _plain_stderr():
        text = "".join(f"{line}\n" for line in [f"{result.status.value} {head}", *lines])
        sys.stderr.write(text.translate(_RICH_DROPS))
        return
    colour = "green" if result.ok else "red"
    err().print(f"[{colour}]{result.status.value}[/] {head}")
    for line in lines:
        err().print(line, markup=False)


# What rich drops from text it prints (BEL, BS, VT, FF, CR): the plain lines drop them too.
_RICH_DROPS = str.maketrans("", "", "\a\b\v\f\r")


def _plain_stderr() -> bool:
    """Whether stderr is no terminal and no colour is forced, so lines go out plain without importing rich."""
    return not sys.stderr.isatty() and not os.environ.get("FORCE_COLOR")


class BatchDisplay:
    """Done / running / failed, mean reward and ETA, live on stderr (a line per rollout when not a terminal)."""

    def __init__(self, total: int) -> None:
        self.total, self.started = total, time.monotonic()
        from rich.live import Live

        live = err().is_terminal
        self.live = Live(self._render(0, 0, 0, None), console=err(), refresh_per_second=4) if live else None
        self._printed = 0

    def __enter__(self) -> BatchDisplay:
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.stop()

    def _render(self, done: int, running: int, failed: int, mean: float | None) -> str:
        elapsed = time.monotonic() - self.started
        eta = "-" if not done else f"{elapsed / done * (self.total - done):.0f}s"
        reward = "-" if mean is None else f"{mean:.3f}"
        return (
            f"rollouts {done}/{self.total} done, {running} running, {failed} failed | "
            f"mean reward {reward} | {elapsed:.0f}s elapsed, ETA {eta}"
        )

    def update(self, progress: Any) -> None:
        text = self._render(progress.done, progress.running, progress.failed, progress.mean_reward)
        if self.live:
            self.live.update(text)
            return
        for result in progress.results[self._printed :]:
            err().print(f"{result.status.value} reward {result.reward:g} {result.rollout_id} | {text}", markup=False)
        self._printed = len(progress.results)


def print_summary(results: list[RolloutResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    summary = summarize_results(results)
    table = Table("rollouts", "reward mean", "statuses", "turns", "tokens captured", "calls without ids")
    statuses = ", ".join(f"{name} {count}" for name, count in summary.statuses.items())
    mean = "-" if summary.reward_mean is None else f"{summary.reward_mean:.3f}"
    table.add_row(
        str(summary.rollouts),
        mean,
        statuses,
        str(summary.turns),
        str(summary.tokens),
        str(summary.calls_without_token_ids),
    )
    phases = Table("phase", "p50 (s)", "p95 (s)")
    for name, stats in summary.phases.items():
        phases.add_row(name, _seconds(stats["p50"]), _seconds(stats["p95"]))
    console = Console()
    console.print(table)
    console.print(phases)
