"""A batch as a job directory, laid out as Harbor lays out its jobs, so an interrupted batch can go on:

    DIR/config.json            the run's settings (JobConfig): image tag, model, tasks with their digests, -k, ...
    DIR/<task>__<attempt>/     one folder per rollout (attempt 0..k-1): result.json, trace.jsonl, agent/, ...
    DIR/summary.json           the totals and every finished rollout, sorted by task and attempt

A rollout is finished when its folder holds a result.json whose status is not `node_lost`. `agentbake rollout --resume
DIR` empties and runs the others, and refuses settings other than the job's own.

    job = Job.start(Path("jobs/run-1"), config)         # or Job.open(path), then job.check(requested)
    for result in runner.iter_rollouts(job.pending(tasks), concurrency=config.n_concurrent): ...
    job.write_summary()
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agentbake.errors import JobError
from agentbake.runner.backend_registry import BACKENDS, DEFAULT_BACKEND
from agentbake.runner.result import RESULT_FILE, RolloutResult, Status, summarize_results
from agentbake.runner.runner_config import RunnerConfig
from agentbake.tasks import Task, load_task

CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"
RUNTIME_SETTINGS = frozenset(
    {
        "n_concurrent",
        "runner.out_dir",
        "backend.config.runtime_dir",
        "backend.config.warm",
        "backend.config.relay.listen_host",
        "backend.config.relay.listen_port",
        "backend.config.relay.public_url",
    }
)
"""Settings a resume may change: how fast and from where the job runs, not what it runs."""


class JobTask(BaseModel):
    """A task of the job, as it was when the job started."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """The task directory's name; its rollouts' folders are `<name>__<attempt>`."""
    path: Path
    """The task directory (absolute)."""
    digest: str
    """sha256 over the task's files (`Task.digest`): a task edited since the job started is refused."""

    @classmethod
    def of(cls, task: Task) -> JobTask:
        return cls(name=task.name, path=task.path, digest=task.digest)


class JobBackend(BaseModel):
    """Where the job's sandboxes run: the backend by name and that backend's own config, which the Runner builds
    it from. Reading it imports the named backend's config type only (a Docker job loads no remote one's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = DEFAULT_BACKEND
    """The backend (`--backend`): a name of `backend_registry.BACKENDS`."""
    config: SerializeAsAny[BaseModel]
    """Its config (`DockerConfig`, `E2BConfig`, `HFConfig`), every field written out."""

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in BACKENDS:
            raise ValueError(f"{name!r} is no sandbox backend; expected one of {', '.join(BACKENDS)}")
        return name

    @field_validator("config", mode="before")
    @classmethod
    def _of_the_named_backend(cls, config: Any, info: ValidationInfo) -> Any:
        if "name" not in info.data:
            return config  # the name's own error says what is wrong
        kind = BACKENDS[info.data["name"]]
        if isinstance(config, BaseModel) and not isinstance(config, kind.config):
            raise ValueError(
                f"{type(config).__name__} is not the {kind.name} backend's config ({kind.config.__name__})"
            )
        return kind.config.model_validate(config)


class JobConfig(BaseModel):
    """Everything a job runs with; `config.json` holds it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    """The layout of config.json."""
    runner: RunnerConfig
    """The runner's settings: the image's content tag, model, key variable, oracle, preflight, logprobs
    modes; `out_dir` is the job directory."""
    backend: JobBackend
    """Where sandboxes run (`--backend`, with `--manifest`, the relay's address, `--warm`); `--gateway` is
    `runner.gateway`."""
    tasks: tuple[JobTask, ...]
    """Every task, in the order its rollouts start."""
    n_attempts: int = Field(ge=1)
    """Rollouts per task (`-k`), attempts 0 to n_attempts - 1."""
    n_concurrent: int = Field(ge=1)
    """Rollouts at once (`-n`)."""

    @model_validator(mode="before")
    @classmethod
    def _backend_by_name_and_config(cls, data: Any) -> Any:
        """Read a config.json whose `backend` holds the CLI's options (`name`, `manifest`, `relay_*`, `warm`).

        Such a file may also keep the warm pool as `runner.warm`."""
        if not isinstance(data, dict) or not isinstance(data.get("backend"), dict) or "config" in data["backend"]:
            return data
        from agentbake.runner.remote.relay_config import RelayConfig

        options, runner = dict(data["backend"]), data.get("runner")
        if isinstance(runner, dict) and "warm" in runner:
            options.setdefault("warm", runner["warm"])
            data = {**data, "runner": {key: value for key, value in runner.items() if key != "warm"}}
        options.pop("gateway", None)  # always runner.gateway's value
        name, warm = options.pop("name", DEFAULT_BACKEND), options.pop("warm", 0)
        listen, url = options.pop("relay_listen", "127.0.0.1:0"), options.pop("relay_url", None)
        config: dict[str, Any] = {"warm": warm} if name == "docker" or warm else {}
        if name != "docker":
            try:
                relay = RelayConfig.listening_at(listen, url)
            except ValueError as exc:
                raise ValueError(f"backend.relay_listen: {exc}") from None
            config.update(manifest=options.pop("manifest", None), relay=relay)
        options.pop("manifest", None)
        if options:
            raise ValueError(f"unknown backend options {', '.join(sorted(options))}")
        return {**data, "backend": {"name": name, "config": config}}


def rollout_folder(task: str, attempt: int) -> str:
    """The folder of attempt `attempt` (from 0) of task `task` in a job directory."""
    return f"{task}__{attempt}"


@dataclass(frozen=True)
class Job:
    """A job directory and the settings it was started with."""

    dir: Path
    config: JobConfig

    @classmethod
    def start(cls, directory: Path, config: JobConfig) -> Job:
        """A new job in `directory` (created; refused when it holds anything): writes config.json."""
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            if (directory / CONFIG_FILE).is_file():
                raise JobError(f"{directory}: holds a job already; `--resume {directory}` continues it")
            raise JobError(f"{directory}: not an empty folder; a job writes into a folder of its own")
        directory.mkdir(parents=True, exist_ok=True)
        _write_json(directory / CONFIG_FILE, config.model_dump(mode="json"))
        return cls(directory, config)

    @classmethod
    def open(cls, directory: Path) -> Job:
        """The job `directory` holds, from its config.json."""
        path = directory / CONFIG_FILE
        if not path.is_file():
            raise JobError(f"{path}: missing; --resume takes the folder of a job `agentbake rollout` started")
        try:
            return cls(directory, JobConfig.model_validate_json(path.read_text()))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
            raise JobError(f"{path}: not a job's config.json ({problems})") from None

    def check(self, requested: JobConfig) -> None:
        """Refuse to resume with settings other than the job's own (RUNTIME_SETTINGS may differ)."""
        old, new = _flatten(self.config.model_dump(mode="json")), _flatten(requested.model_dump(mode="json"))
        # A task of one side only is named by `tasks` (the lists of names) alone, not by each of its keys; another
        # backend by `backend.name` alone, not by each key of its config.
        keys = sorted(key for key in set(old) | set(new) if (key in old and key in new) or not key.startswith("tasks."))
        if old["backend.name"] != new["backend.name"]:
            keys = [key for key in keys if not key.startswith("backend.config.")]
        differ = [key for key in keys if key not in RUNTIME_SETTINGS and old.get(key) != new.get(key)]
        if differ:
            changes = "; ".join(f"{key}: {_show(old.get(key))} -> {_show(new.get(key))}" for key in differ)
            raise JobError(
                f"{self.dir / CONFIG_FILE}: the job was started with other settings ({changes}); resume it with "
                f"its own (`agentbake rollout --resume {self.dir}` alone takes them from config.json), or start a "
                "new job under another --job-name"
            )

    def load_tasks(self) -> list[Task]:
        """The job's tasks from their directories, each refused when it changed since the job started."""
        tasks = [load_task(job_task.path) for job_task in self.config.tasks]
        for task, job_task in zip(tasks, self.config.tasks, strict=True):
            if task.digest != job_task.digest:
                raise JobError(
                    f"{task.path}: changed since the job {self.dir} started (its files' digest differs); restore "
                    "it, or start a new job under another --job-name"
                )
        return tasks

    def rollouts(self) -> list[tuple[str, int, Path]]:
        """(task, attempt, folder) of every rollout, in the order they start: attempt by attempt, as
        `Runner.run_batch` orders a batch."""
        return [
            (task.name, attempt, self.dir / rollout_folder(task.name, attempt))
            for attempt in range(self.config.n_attempts)
            for task in self.config.tasks
        ]

    def pending(self, tasks: list[Task]) -> list[tuple[Task, Path]]:
        """The rollouts not finished, with their folders emptied of what an unfinished run left."""
        by_name = {task.name: task for task in tasks}
        pending = []
        for name, _, folder in self.rollouts():
            if _finished(folder):
                continue
            if folder.exists():
                shutil.rmtree(folder)
            pending.append((by_name[name], folder))
        return pending

    def results(self) -> list[tuple[str, int, RolloutResult]]:
        """(task, attempt, result) of every finished rollout, sorted by task and attempt."""
        found = [
            (name, attempt, RolloutResult.read(folder))
            for name, attempt, folder in self.rollouts()
            if (folder / RESULT_FILE).is_file()
        ]
        return sorted(found, key=lambda item: (item[0], item[1]))

    def write_summary(self) -> dict[str, Any]:
        """Write summary.json and return it: totals over the rollouts with a result, then each of them.

        `finished` leaves out those of a lost node."""
        finished = self.results()
        total = len(self.config.tasks) * self.config.n_attempts
        done = sum(result.status is not Status.NODE_LOST for _, _, result in finished)
        summary = {
            "complete": done == total,
            "finished": done,
            "total": total,
            "summary": summarize_results([result for _, _, result in finished]).as_dict(),
            "rollouts": [
                {
                    "task": name,
                    "attempt": attempt,
                    "folder": rollout_folder(name, attempt),
                    "rollout_id": result.rollout_id,
                    "status": result.status.value,
                    "reward": result.reward,
                }
                for name, attempt, result in finished
            ],
        }
        _write_json(self.dir / SUMMARY_FILE, summary)
        return summary


def _finished(folder: Path) -> bool:
    """The rollout in `folder` finished: its result.json is there, and not of a lost node (a resume runs that
    one again)."""
    if not (folder / RESULT_FILE).is_file():
        return False
    return RolloutResult.read(folder).status is not Status.NODE_LOST


def _write_json(path: Path, data: Any) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    partial.replace(path)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values. The task list becomes `tasks` (the names, in order) and `tasks.<name>.<key>`
    for each, so a difference names the task."""
    if prefix == "tasks." and isinstance(data, list):
        flat: dict[str, Any] = {"tasks": [task["name"] for task in data]}
        for task in data:
            flat.update(_flatten({k: v for k, v in task.items() if k != "name"}, f"tasks.{task['name']}."))
        return flat
    if isinstance(data, dict):
        flat = {}
        for key, value in data.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): data}


def _show(value: Any) -> str:
    return "(none)" if value is None else repr(value)
