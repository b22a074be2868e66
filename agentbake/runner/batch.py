"""A batch of rollouts on a thread pool: results as they end, progress after every change.

Every live sandbox and gateway is removed when the batch fails.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from agentbake.runner.result import RolloutResult
from agentbake.tasks import Task

Rollout = tuple[Task, Path | None]
"""A task and the folder its rollout writes (None: `RunnerConfig.out_dir/<rollout_id>`)."""


@dataclass
class BatchProgress:
    """Counts a progress display shows; passed to `on_progress` after every change."""

    total: int
    running: int = 0
    done: int = 0
    failed: int = 0
    """Finished with a status other than `ok`."""
    reward_sum: float = 0.0
    results: list[RolloutResult] = field(default_factory=list)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.done if self.done else None


def repeated(tasks: list[Task], repeats: int) -> list[Rollout]:
    """Every task `repeats` times, attempt by attempt, each into its default folder."""
    return [(task, None) for _ in range(repeats) for task in tasks]


def run_rollouts(
    rollouts: list[Rollout],
    run: Callable[[Task, Path | None], RolloutResult],
    abort: Callable[[], None],
    *,
    concurrency: int,
    on_progress: Callable[[BatchProgress], None] | None,
) -> Iterator[tuple[int, RolloutResult]]:
    """(index in `rollouts`, result) as each `run` ends, `concurrency` at once.

    Leaving the loop early cancels the rollouts not yet started and waits for the running ones. Any exception cancels
    them, calls `abort` and propagates."""
    progress = BatchProgress(total=len(rollouts))
    lock = threading.Lock()

    def notify() -> None:
        if on_progress is not None:
            on_progress(progress)

    def job(index: int) -> RolloutResult:
        with lock:
            progress.running += 1
        notify()
        task, out_dir = rollouts[index]
        return run(task, out_dir)

    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="rollout") as pool:
        pending: dict[Future[RolloutResult], int] = {pool.submit(job, i): i for i in range(len(rollouts))}
        try:
            while pending:
                finished, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in finished:
                    index = pending.pop(future)
                    result = future.result()
                    with lock:
                        progress.running -= 1
                        progress.done += 1
                        progress.failed += not result.ok
                        progress.reward_sum += result.reward
                        progress.results.append(result)
                    notify()
                    yield index, result
        except GeneratorExit:  # the caller stopped iterating: no new rollouts, the running ones finish
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            abort()
            raise
