"""TRL's AsyncGRPOTrainer: an OpenEnv-style session factory for its harness rollout worker.

TRL's `HarnessRolloutWorker` (trl.experimental.async_grpo) drives a loop-owning agent through a session
factory: `harness_session_factory(sampling=...)` gives a factory whose `create(prompt, seed=, episode_id=)`
starts one rollout; the worker then calls `wait_for_completion()`, `fetch_training_trace()` (the captured
turns, each with a loss mask over prompt + completion), `verify(transcript)` (its `env_reward`) and `close()`.
`session_factory(runner, tasks)` is that callable, backed by agentbake's Runner: the agent CLI in its
sandbox, the gateway's captured ids, the verifier's reward.

Unlike `GRPOTrainer`'s one row per rollout, the worker trains several rows per rollout: every agent sequence
of the export (a subagent, the continuation after a compaction) goes out, each call once; a call shared by
two sequences is trained in the first and is context in the second. Infrastructure failures and rollouts
that are not trainable verify to `env_reward=None` (unscored, never 0.0) with no trained token. The returned
objects mirror OpenEnv's `TrainingTrace`/`TrainingTurn`/`VerifyResult` (the fields TRL reads), so agentbake
needs no OpenEnv install; TRL's worker itself does (`pip install openenv`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentbake.gateway.trace import TraceRecord
from agentbake.runner.result import RolloutResult
from agentbake.runner.runner import SEQUENCES_FILE, Runner, new_rollout_id
from agentbake.tasks import Task
from agentbake.trl.rollout import INFRASTRUCTURE_FAILURES, RolloutFunction, check_logprobs, check_sampling


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
    """The turns of an export document's agent sequences (see the module docstring); every loss mask is 0 when
    the rollout is not `trainable`. `records`, the rollout's gateway records, give each turn its request and
    response (what TRL's worker counts tool calls from)."""
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
                    metadata={"rollout_id": document["rollout_id"], "call": call, "turn": calls[call]["turn"]},
                )
            )
    return TrainingTrace(turns)


class Session:
    """One rollout, started when created (in a thread: the worker calls the session from its pool)."""

    def __init__(self, runner: Runner, task: Task, rollout_id: str) -> None:
        self.task = task
        self.rollout_id = rollout_id
        self.result: RolloutResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(runner,), name=f"session-{rollout_id}", daemon=True)
        self._thread.start()

    def _run(self, runner: Runner) -> None:
        try:
            self.result = runner.run(self.task, rollout_id=self.rollout_id)
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

    def _scorable(self, result: RolloutResult) -> bool:
        return result.status not in INFRASTRUCTURE_FAILURES and bool(result.trainable)

    def fetch_training_trace(self) -> TrainingTrace:
        result = self._finished()
        document_file = (result.out_dir or Path()) / SEQUENCES_FILE
        if not document_file.exists():
            return TrainingTrace([])
        document = json.loads(document_file.read_text())
        return training_trace(document, trainable=self._scorable(result), records=result.trace)

    def fetch_proxy_trace(self) -> list[dict[str, Any]]:
        """The same turns as OpenEnv's `TraceEntry` dicts (its `LoopOwningSession` protocol)."""
        return self.fetch_training_trace().to_trace_entries()

    def verify(self, transcript: list[dict[str, Any]] | None = None, final_state: Any = None) -> VerifyResult:
        """The verifier's reward (it ran in the sandbox after the agent; `transcript` is not needed)."""
        result = self._finished()
        scorable = self._scorable(result)
        metrics = {"status": result.status.value, "turns": result.turns, "tokens": result.tokens}
        return VerifyResult(env_reward=result.reward if scorable else None, metrics=metrics)

    def close(self) -> None:
        """The runner removes the sandbox and gateway when the rollout ends; wait for that."""
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


def session_factory(runner: Runner, tasks: Any) -> Any:
    """`HarnessRolloutWorker(harness_session_factory=session_factory(runner, tasks), ...)`: a callable taking
    the worker's `sampling` (its training policy) and returning a `SessionFactory`. The runner's gateway must
    set that sampling on every call (RunnerConfig.model_settings) and stamp processed logprobs: refused
    otherwise (ConfigError)."""
    prompts = RolloutFunction(runner, tasks)

    def make(sampling: dict[str, Any] | None = None) -> SessionFactory:
        check_logprobs(runner)
        check_sampling(runner, sampling or {}, "worker")
        return SessionFactory(prompts)

    return make
