"""Run a real agent CLI in its real image against a real gateway in front of a scripted upstream.

The container runs as the image's non-root user with every capability dropped and no-new-privileges;
it shares the host's network namespace only so that the gateway and the upstream stay on loopback.
The gateway runs in per-rollout mode (its own rollout id, the token as its client credential: 401
without it); a recorder in front of it keeps each request's headers, to show which header carried it.
"""

from __future__ import annotations

import io
import secrets
import socket
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.buildkit.labels import ImageLabels
from agentbake.gateway import GatewayConfig, TraceRecord, create_app, read_trace
from agentbake.runner.agents import Agent, AgentImage, AgentLaunch, ModelAccess, get_agent
from agentbake.scripted import Reply, Script, ScriptedModel
from agentbake.scripted.policy import find_shell_tool
from agentbake.serve import serve_in_thread

UPSTREAM_KEY_ENV = "AGENTBAKE_TEST_AGENTS_UPSTREAM_KEY"
# Reads outside the workdir too: OpenCode asks (and, headless, silently gives up) for paths outside it
# unless its permissions allow everything.
PROOF_COMMAND = "id -u > proof.txt && cat /etc/hostname > /dev/null && echo proof-written"


class HeaderRecorder:
    """ASGI middleware keeping (path, headers) of every HTTP request before passing it on."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[tuple[str, dict[str, str]]] = []

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http":
            self.requests.append((scope["path"], {k.decode(): v.decode() for k, v in scope["headers"]}))
        await self.app(scope, receive, send)


def shell_then_finish(shell_tool: str) -> Callable[[dict], Reply]:
    """The scripted model: one call of the agent's shell tool, then a final answer once a tool result is back."""

    def respond(request: dict) -> Reply:
        if any(message["role"] == "tool" for message in request["messages"]):
            return Reply(text="All done.")
        tool = find_shell_tool(request.get("tools"))
        if tool is None or tool.name != shell_tool:
            offered = sorted(t["function"]["name"] for t in request.get("tools") or [])
            return Reply(text=f"no {shell_tool} tool offered, only {offered}")
        return Reply(text="Running it.", tool_calls=[(shell_tool, {tool.command_key: PROOF_COMMAND})])

    return respond


@dataclass
class AgentRun:
    """What one headless agent run left behind, for the assertions."""

    agent: Agent
    image: AgentImage
    labels: Mapping[str, str]
    launch: AgentLaunch
    token: str
    upstream_key: str
    exit_code: int
    stdout: str
    stderr: str
    workdir_files: dict[str, str]
    """Path relative to the workdir -> content, after the run."""
    logs: dict[str, str]
    """Absolute path -> content of every file under the launch's log paths."""
    upstream: ScriptedModel
    gateway_requests: list[tuple[str, dict[str, str]]]
    trace: list[TraceRecord] = field(default_factory=list)


def _archive(files: Mapping[str, str], uid: int) -> bytes:
    """A tar of `files` (relative paths) owned by `uid`, mode 0600, with their parent directories."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        directories = sorted({str(parent) for name in files for parent in Path(name).parents if str(parent) != "."})
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, uid, uid
            tar.addfile(info)
        for name, content in files.items():
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o600, uid, uid
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _read_tree(container: Any, path: str) -> dict[str, str]:
    """Every regular file under `path` in the container (path -> text); empty when it does not exist."""
    try:
        chunks, _ = container.get_archive(path)
    except docker.errors.NotFound:
        return {}
    parent = str(Path(path).parent)
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        return {
            f"{parent}/{member.name}": tar.extractfile(member).read().decode(errors="replace")
            for member in tar.getmembers()
            if member.isfile()
        }


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_agent(
    engine: docker.DockerClient,
    built_images: dict[str, BuildResult],
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    model_url: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    responder: Callable[[dict], Script] | None = None,
) -> AgentRun:
    """Run agent `name` once on the proof task; `model_url` replaces the gateway's URL (to point nowhere),
    `responder` the scripted model (default: one shell call, then the final answer)."""
    agent = get_agent(name)
    upstream_key = "sk-upstream-" + secrets.token_hex(16)
    token = "rollout-token-" + secrets.token_hex(16)
    monkeypatch.setenv(UPSTREAM_KEY_ENV, upstream_key)
    fake = ScriptedModel()
    fake.responder = responder or shell_then_finish(agent.shell_tool)
    tag = built_images[name].tag
    labels = engine.images.get(tag).labels
    image = AgentImage.from_labels(ImageLabels.from_labels(tag, labels))
    with serve_in_thread(fake, log_level="critical") as upstream:
        config = GatewayConfig(
            upstream=upstream.url + "/v1",
            trace=tmp_path / f"{name}-trace.jsonl",
            api_key_env=UPSTREAM_KEY_ENV,
            model_override="fake-model",
            read_timeout_s=60.0,
            rollout_id=f"agents-{name}",
            client_token=token,
        )
        recorder = HeaderRecorder(create_app(config))
        with serve_in_thread(recorder, log_level="critical") as gateway:
            model = ModelAccess(model_url=model_url or gateway.url, token=token, model_name="test-model")
            launch = agent.launch(image, model, "Record your uid in proof.txt using your shell tool.")
            container = engine.containers.run(
                tag,
                ["sleep", "300"],
                detach=True,
                network_mode="host",
                user=labels["dev.agentbake.uid"],
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                mem_limit="2g",
                pids_limit=512,
                labels={"dev.agentbake.test": "runner-agents"},
            )
            try:
                container.put_archive(image.home, _archive(launch.files, int(labels["dev.agentbake.uid"])))
                exit_code, (stdout, stderr) = container.exec_run(
                    launch.argv, environment={**launch.env, **(extra_env or {})}, demux=True
                )
                workdir = {
                    path.removeprefix(image.workdir + "/"): text
                    for path, text in _read_tree(container, image.workdir).items()
                }
                logs = {path: text for root in launch.log_paths for path, text in _read_tree(container, root).items()}
            finally:
                container.remove(force=True)
    return AgentRun(
        agent=agent,
        image=image,
        labels=labels,
        launch=launch,
        token=token,
        upstream_key=upstream_key,
        exit_code=exit_code,
        stdout=(stdout or b"").decode(errors="replace"),
        stderr=(stderr or b"").decode(errors="replace"),
        workdir_files=workdir,
        logs=logs,
        upstream=fake,
        gateway_requests=recorder.requests,
        trace=read_trace(config.trace) if config.trace.exists() else [],
    )


@pytest.fixture(scope="module", params=["claude-code", "codex", "gemini-cli", "opencode", "pi", "qwen-code"])
def agent_run(
    request: pytest.FixtureRequest,
    engine: docker.DockerClient,
    built_images: dict[str, BuildResult],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AgentRun]:
    """One successful run per agent, shared by the assertions on it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield run_agent(engine, built_images, request.param, tmp_path_factory.mktemp(request.param), monkeypatch)
