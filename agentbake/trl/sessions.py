"""TRL's AsyncGRPOTrainer: an OpenEnv-style session factory for its harness rollout worker.

The worker's session factory `create(prompt, ...)` starts one rollout, then the worker calls `wait_for_completion()`,
`fetch_training_trace()`, `verify(transcript)` and `close()`. `RunnerSessions` backs that with agentbake's Runner, in
the worker's own process; `session_factory(runner, tasks)` does the same on a runner of this process.

Every agent sequence of a rollout's export is a row, each call trained once. Untrainable rollouts and infrastructure
failures verify to `env_reward=None`, never 0.0. The returned objects mirror OpenEnv's classes, so agentbake needs no
OpenEnv install (TRL's worker does).
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbake.errors import ConfigError
from agentbake.gateway.settings import SAMPLING_FIELDS
from agentbake.gateway.trace import TraceRecord
from agentbake.runner.result import RolloutResult
from agentbake.runner.rollout import SEQUENCES_FILE, new_rollout_id
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import SCRIPTED, RunnerConfig
from agentbake.tasks import Task
from agentbake.trl.rollout import RolloutFunction, check_logprobs, check_sampling, unscored_reason


@dataclass
class TrainingTurn:
    """One model call as TRL trains it (OpenEnv's `TrainingTurn`): `loss_mask` covers prompt + completion."""

    node_id: str
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    per_token_logps: list[float]
    loss_mask: list[int]
    request: dict[str, Any] = field(default_factory=dict)
    response: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainingTrace:
    """A rollout's agent calls, sequence after sequence (OpenEnv's `TrainingTrace`)."""

    turns: list[TrainingTurn]
    schema_version: int = 1

    def to_trace_entries(self) -> list[dict[str, Any]]:
        """Diagnostic records for TRL's reward functions and trace viewers, as OpenEnv gives them."""
        entries = []
        for turn in self.turns:
            entry = asdict(turn)
            node_id = entry.pop("node_id")
            entries.append({**entry, "metadata": {**turn.metadata, "node_id": node_id}})
        return entries


@dataclass
class VerifyResult:
    """The verifier's outcome (OpenEnv's `VerifyResult`): `env_reward` None when the rollout is unscorable."""

    env_reward: float | None = None
    done: bool = True
    metrics: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)


def training_trace(document: dict, *, trainable: bool, records: Sequence[TraceRecord] = ()) -> TrainingTrace:
    """The turns of an export document's agent sequences; every loss mask is 0 unless `trainable`.

    `records`, the rollout's gateway records, give each turn its request and response."""
    by_turn: dict[int, TraceRecord] = {}
    for record in records:
        by_turn.setdefault(record.turn, record)
    turns: list[TrainingTurn] = []
    trained: set[int] = set()
    calls = {call["index"]: call for call in document["calls"]}
    for sequence in (s for s in document["sequences"] if s["role"] == "agent"):
        ids, logprobs = sequence["input_ids"], sequence["logprobs"]
        end = sequence["prompt_len"]
        for call, length in zip(sequence["calls"], sequence["turn_lengths"], strict=True):
            end += length
            sampled = calls[call]["completion_len"]
            start = end - sampled
            train = trainable and call not in trained
            trained.add(call)
            record = by_turn.get(calls[call]["turn"])
            turns.append(
                TrainingTurn(
                    node_id=f"{document['rollout_id']}:{call}:{len(turns)}",
                    prompt_token_ids=ids[:start],
                    completion_token_ids=ids[start:end],
                    per_token_logps=[lp if lp is not None else 0.0 for lp in logprobs[start:end]],
                    loss_mask=[0] * start + [int(train)] * sampled,
                    request=record.request if record else {},
                    response=(record.response or {}) if record else {},
                    metadata={
                        "rollout_id": document["rollout_id"],
                        "call": call,
                        "turn": calls[call]["turn"],
                        "worker": calls[call].get("worker"),
                        "policy_version": calls[call].get("policy_version"),
                    },
                )
            )
    return TrainingTrace(turns)


class Session:
    """One rollout, started when created (in a thread: the worker calls the session from its pool)."""

    def __init__(self, runner: Runner, task: Task, rollout_id: str) -> None:
        self.task = task
        self.rollout_id = rollout_id
        self.result: RolloutResult | None = None
        self._runner = runner
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"session-{rollout_id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self._runner.run(self.task, rollout_id=self.rollout_id)
        except BaseException as exc:  # handed to the worker's thread by wait_for_completion
            self._error = exc

    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        """Wait for the rollout (agent, verifier, teardown); the agent's exit code (-1 when it never exited).
        TimeoutError when `timeout_s` passes first."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"rollout {self.rollout_id} still running after {timeout_s} s")
        if self._error is not None:
            raise self._error
        assert self.result is not None
        return -1 if self.result.exit_code is None else self.result.exit_code

    def _finished(self) -> RolloutResult:
        self.wait_for_completion()
        assert self.result is not None
        return self.result

    def fetch_training_trace(self) -> TrainingTrace:
        result = self._finished()
        document_file = (result.out_dir or Path()) / SEQUENCES_FILE
        if not document_file.exists():
            return TrainingTrace([])
        document = json.loads(document_file.read_text())
        return training_trace(document, trainable=unscored_reason(result) is None, records=result.trace)

    def fetch_proxy_trace(self) -> list[dict[str, Any]]:
        """The same turns as OpenEnv's `TraceEntry` dicts (its `LoopOwningSession` protocol)."""
        return self.fetch_training_trace().to_trace_entries()

    def verify(self, transcript: list[dict[str, Any]] | None = None, final_state: Any = None) -> VerifyResult:
        """The verifier's reward; None, with the reason in `metrics["unscored"]`, when the rollout is unscored."""
        result = self._finished()
        reason = unscored_reason(result)
        metrics = {"status": result.status.value, "turns": result.turns, "tokens": result.tokens}
        metrics |= {"worker": result.worker, "rollout_id": result.rollout_id, "unscored": reason}
        return VerifyResult(env_reward=result.reward if reason is None else None, metrics=metrics)

    def close(self) -> None:
        """Stop the rollout if it still runs (its sandbox and gateway removed: it ends as `sandbox_error`), and
        wait for its end. TRL's worker calls it after each rollout and on every live one when it stops."""
        if self._thread.is_alive():
            self._runner.cancel(self.rollout_id, "closed by its session (the trainer's rollout worker stopped)")
        self._thread.join()


class SessionFactory:
    """Creates a `Session` per rollout (OpenEnv's `ResourceSessionFactory` protocol)."""

    def __init__(self, prompts: RolloutFunction) -> None:
        self.prompts = prompts

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> Session:
        """Start the rollout of the task `task` (a prompt: the task's instruction) names."""
        found = self.prompts.task_for(task)
        rollout_id = new_rollout_id(found) if episode_id is None else f"{found.name[:60]}-{episode_id[:12]}"
        return Session(self.prompts.runner, found, rollout_id)


class RunnerSessions:
    """`HarnessRolloutWorker(harness_session_factory=RunnerSessions(config, tasks), ...)`.

    TRL pickles this factory into its worker's process, so it holds only the runner's settings and the tasks. It starts
    its `Runner` in the process that first calls it, and `close()` stops it. Each call checks the worker's `sampling`
    against `config.model_settings` and returns a `SessionFactory`."""

    def __init__(self, config: RunnerConfig, tasks: Iterable[Task | str | Path], *, backend: Any = None) -> None:
        self.config = config
        self.tasks = list(tasks)
        self.backend = backend
        self._runner: Runner | None = None
        self._prompts: RolloutFunction | None = None
        self._given = False  # the runner is the caller's (`session_factory`): never pickled, never closed here

    @classmethod
    def of_runner(cls, runner: Runner, tasks: Iterable[Task | str | Path]) -> RunnerSessions:
        """Sessions on a started runner of this process (a worker that runs in it: not picklable)."""
        sessions = cls(runner.config, tasks)
        sessions._runner, sessions._given = runner, True
        sessions._prompts = RolloutFunction(runner, sessions.tasks)
        return sessions

    def __getstate__(self) -> dict[str, Any]:
        if self._given:
            raise TypeError(
                "these sessions use a Runner started in this process, which cannot move to TRL's worker process: "
                "pass RunnerSessions(runner_config, tasks) instead, which starts its runner there"
            )
        return {"config": self.config, "tasks": self.tasks, "backend": self.backend}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"], state["tasks"], backend=state["backend"])

    @property
    def runner(self) -> Runner:
        """The runner the sessions run on, started on first use."""
        if self._runner is None:
            runner = Runner(self.config, self.backend)
            try:
                prompts = RolloutFunction(runner, self.tasks)
                if self.config.model == SCRIPTED:
                    runner.start_scripted(prompts.tasks.values())
            except BaseException:
                runner.close()
                raise
            self._runner, self._prompts = runner, prompts
            atexit.register(self.close)
        return self._runner

    def __call__(self, sampling: dict[str, Any] | None = None) -> SessionFactory:
        runner = self.runner
        check_logprobs(runner)
        check_worker_sampling(runner, sampling or {})
        assert self._prompts is not None
        return SessionFactory(self._prompts)

    def close(self) -> None:
        """Stop the runner started here (its live rollouts end); the caller's runner is left alone."""
        runner, self._runner = self._runner, None
        if runner is not None and not self._given:
            runner.close()


def session_factory(runner: Runner, tasks: Any) -> RunnerSessions:
    """Sessions on a started runner of this process, for a worker running in it.

    A worker in a process of its own needs `RunnerSessions(config, tasks)`."""
    return RunnerSessions.of_runner(runner, tasks)


def check_worker_sampling(runner: Runner, sampling: dict[str, Any]) -> None:
    """Check that the worker's training policy is the one the gateway samples; ConfigError otherwise.

    The fields the gateway sets must match (`check_sampling`), and frequency and presence penalties must be 0."""
    check_sampling(runner, sampling, "worker")
    unset = {name: value for name, value in sampling.items() if name not in SAMPLING_FIELDS}
    wrong = [f"{name}={value!r}" for name, value in unset.items() if _NEUTRAL.get(name, object()) != value]
    if wrong:
        raise ConfigError(
            f"the worker's sampling sets {', '.join(wrong)}, which agentbake's gateway does not apply to the agent's "
            f"calls ({', '.join(SAMPLING_FIELDS)} only): train with "
            + ", ".join(f"{name}={value}" for name, value in _NEUTRAL.items())
        )


_NEUTRAL = {"frequency_penalty": 0.0, "presence_penalty": 0.0}
