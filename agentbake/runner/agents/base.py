"""What every agent module describes, and the registry the harness looks agents up in.

An agent module says, as data, how its CLI runs headless in its catalog image. That covers its environment, config
files, launch script, shell tool and logs. The harness applies an `AgentLaunch` through the sandbox protocol; nothing
here talks to a sandbox.
"""

from __future__ import annotations

import abc
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from agentbake.buildkit.labels import ImageLabels
from agentbake.errors import AgentError
from agentbake.runner.harness.listeners import KILL_BUT_SERVICES


@dataclass(frozen=True)
class AgentImage:
    """The facts about a catalog image that an agent's launch depends on (from its `dev.agentbake.*` labels)."""

    command: str
    """The agent's executable on PATH (label `agent.command`), e.g. `claude`."""
    package: str
    """The agent's npm package (label `agent.package`), e.g. `@anthropic-ai/claude-code`: the registry key."""
    home: str
    """The image user's home directory; config file paths are relative to it."""
    workdir: str
    """Directory the agent works in (label `dir.workdir`)."""
    logs_dir: str
    """Directory the agent's logs go to and are collected from (label `dir.logs_agent`)."""

    @classmethod
    def from_labels(cls, labels: ImageLabels, *, home: str | None = None) -> AgentImage:
        """The launch's facts from the image's labels; `home` (the sandbox's home) wins over the `home` label."""
        return cls(
            command=labels.agent_command,
            package=labels.agent_package,
            home=home or labels.home,
            workdir=labels.dir_workdir,
            logs_dir=labels.dir_logs_agent,
        )

    def under_home(self, path: str) -> str:
        """`path` relative to the home directory, for `AgentLaunch.files`; refuses paths outside it."""
        relative = posixpath.relpath(path, self.home)
        if relative == ".." or relative.startswith("../"):
            raise AgentError(f"{path} is outside the sandbox's home {self.home}; the agent's paths must be under it")
        return relative


@dataclass(frozen=True)
class ModelAccess:
    """How the agent reaches its model: the rollout's gateway, never the upstream."""

    model_url: str
    """Gateway base URL as seen from inside the sandbox, without `/v1` (e.g. `http://127.0.0.1:PORT`, or with a
    per-rollout prefix such as `/r/<rollout>`); it serves Anthropic `/v1/messages` and OpenAI
    `/v1/chat/completions`."""
    token: str
    """Per-rollout credential, the only one the agent holds; worthless outside the gateway. Goes in the
    agent's api-key setting (env or a mode-0600 file), never on argv."""
    model_name: str
    """Model name the agent sends; the gateway may override it upstream."""

    @property
    def openai_base_url(self) -> str:
        """Base URL for OpenAI-compatible clients (`.../v1`)."""
        return self.model_url.rstrip("/") + "/v1"


@dataclass(frozen=True)
class AgentLaunch:
    """One headless run of an agent, as the harness applies it: write `files`, then run `argv` with `env`."""

    env: Mapping[str, str]
    """Environment of the agent's process (holds the token for agents that read it from env)."""
    files: Mapping[str, str]
    """Files to write before the run, path relative to the sandbox's home -> content: config files and the
    instruction. Write them as the image's user with mode 0600 (some hold the token)."""
    script: str
    """Bash script: `set -o pipefail`, the agent reading the instruction file on stdin, stdout teed to
    `log_file`, stderr teed to `stderr_file`; its exit status is the agent's."""
    log_file: str
    """Absolute path of the agent's stdout log (its event stream), in the image's agent-log dir."""
    stderr_file: str
    """Absolute path of the agent's stderr (warnings, errors), in the image's agent-log dir."""
    log_paths: tuple[str, ...]
    """Absolute paths (files or directories) recording what the agent did, to collect after the run."""
    instruction_file: str
    """Absolute path the instruction is written to (also a key of `files`, relative to home)."""

    @property
    def argv(self) -> list[str]:
        """The script as a command line for `exec`/`start_bg`: bash, because `sh` is dash on the images and
        older dash has no `pipefail`."""
        return ["bash", "-c", self.script]


class Agent(abc.ABC):
    """How one coding agent runs headless in its catalog image."""

    name: ClassVar[str]
    """Catalog name of the agent's image, e.g. `claude-code`."""
    package: ClassVar[str]
    """npm package of the CLI, as in the image's `dev.agentbake.agent.package` label."""
    shell_tool: ClassVar[str]
    """Name of the agent's shell tool in its model requests; for an agent with no tools, its fenced block's info string.
    """

    @abc.abstractmethod
    def env(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        """Environment pointing the agent at the gateway with everything non-essential turned off."""

    @abc.abstractmethod
    def files(self, image: AgentImage, model: ModelAccess) -> dict[str, str]:
        """Config files, path relative to home -> content."""

    @abc.abstractmethod
    def arguments(self, image: AgentImage, model: ModelAccess) -> list[str]:
        """Arguments after the agent's command (never the instruction, never a secret)."""

    def log_paths(self, image: AgentImage) -> list[str]:
        """Paths beyond the agent-log dir where the agent records what it did."""
        return []

    def command(self, image: AgentImage, model: ModelAccess) -> list[str]:
        """The command line run with the instruction on stdin: the agent's command and its arguments."""
        return [image.command, *self.arguments(image, model)]

    def launch(self, image: AgentImage, model: ModelAccess, instruction: str) -> AgentLaunch:
        """Everything the harness needs to run the agent once on `instruction`."""
        return headless_launch(
            image,
            self.name,
            self.command(image, model),
            instruction,
            env=self.env(image, model),
            files=self.files(image, model),
            log_paths=self.log_paths(image),
        )


def headless_launch(
    image: AgentImage,
    name: str,
    command: Sequence[str],
    instruction: str,
    *,
    env: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
    log_paths: Sequence[str] = (),
) -> AgentLaunch:
    """Run `command` in the workdir with `instruction` on stdin, its output teed to `<logs>/<name>.log` and
    `.stderr.log`.

    Run by a user other than root, it then kills every other process of the user and exits with the command's status.
    Every agent's launch is built here, and so is the harness's oracle."""
    log_file = posixpath.join(image.logs_dir, f"{name}.log")
    stderr_file = posixpath.join(image.logs_dir, f"{name}.stderr.log")
    instruction_file = posixpath.join(image.logs_dir, "instruction.md")
    stderr_tee = f">(tee {shlex.quote(stderr_file)} >&2)"
    script = "\n".join(
        [
            "set -o pipefail",
            f"mkdir -p {shlex.quote(image.logs_dir)}",
            f"cd {shlex.quote(image.workdir)}",
            f"{shlex.join(command)} < {shlex.quote(instruction_file)} 2> {stderr_tee} | tee {shlex.quote(log_file)}",
            "status=$?",
            # Let the stderr tee (a process substitution, not part of the pipeline) flush before exiting.
            "wait $!",
            # What the command left behind dies with it, but its services (processes holding a listening
            # socket, which shared-mode tests may query): the harness's stop step then mostly finds none at its
            # first look, one command fewer. That look, not this line, is what the harness trusts. Only when
            # this shell is the sandbox command's own process (its parent outside the sandbox's pid namespace:
            # Docker's exec), so that no wrapper of the same user (a remote backend's) dies with the rest. Never as
            # root: it would reach the sandbox's own processes (the relay); the stop step kills a root agent's
            # leftovers, sparing those.
            f'[ "$PPID" != 0 ] || [ "$EUID" = 0 ] || {{ set -- "$(id -u)"\n{KILL_BUT_SERVICES}}}',
            "exit $status",
        ]
    )
    return AgentLaunch(
        env={"HOME": image.home, **(env or {})},
        files={**(files or {}), image.under_home(instruction_file): instruction},
        script=script,
        log_file=log_file,
        stderr_file=stderr_file,
        log_paths=(image.logs_dir, *log_paths),
        instruction_file=instruction_file,
    )


_REGISTRY: dict[str, Agent] = {}


def register(agent: Agent) -> Agent:
    """Add an agent to the registry (each agent module registers its one instance)."""
    _REGISTRY[agent.name] = agent
    return agent


def agents() -> dict[str, Agent]:
    """Every registered agent by catalog name."""
    return dict(_REGISTRY)


def get_agent(name: str) -> Agent:
    """The agent of a catalog image by its name (`claude-code`, `opencode`, `pi`)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise AgentError(f"unknown agent {name!r}; known agents: {', '.join(sorted(_REGISTRY))}") from None


def agent_for_labels(labels: ImageLabels) -> Agent:
    """The agent of an image by its `dev.agentbake.agent.package` label (works for user catalog images that
    extend a built-in one under another name)."""
    package = labels.agent_package
    for agent in _REGISTRY.values():
        if agent.package == package:
            return agent
    known = ", ".join(sorted(f"{a.package} ({a.name})" for a in _REGISTRY.values()))
    raise AgentError(f"no harness for the agent package {package!r}; agentbake runs: {known}")
