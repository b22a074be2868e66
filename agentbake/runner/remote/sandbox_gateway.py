"""`--gateway sandbox`: the rollout's gateway runs inside its remote sandbox, from the image's baked venv.

It suits trainers whose model server the sandboxes reach but whose own machine they do not. The gateway runs as root on
the sandbox's loopback. The upstream key goes in that one command's environment, never argv, so the agent cannot read
it. Its trace is fetched while the rollout runs, into `out/<rollout_id>/trace.jsonl`.
"""

from __future__ import annotations

import io
import logging
import os
import secrets
import shlex
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import agentbake
from agentbake.errors import SandboxError
from agentbake.gateway.model_settings import ModelSettings
from agentbake.runner.model.host_gateway import ROLLOUT_TRACE_MAX_BYTES
from agentbake.runner.sandbox import SandboxHandle

logger = logging.getLogger("agentbake.runner")

FETCH_INTERVAL_S = 1.0
"""How often the trace is fetched from the sandbox while the rollout runs."""
_READY_PROBE = "for i in $(seq 150); do curl -fsS {url}/healthz >/dev/null 2>&1 && exit 0; sleep 0.2; done; exit 1"


@dataclass(frozen=True)
class SandboxGateway:
    """What the in-sandbox gateway needs: the upstream it calls and the key, and where its trace goes."""

    upstream: str
    """The model server's base URL with its `/v1`, as reachable from inside the sandbox."""
    rollout_id: str
    trace: Path
    """The trainer's `out/<rollout_id>/trace.jsonl`."""
    api_key_env: str = "AGENTBAKE_UPSTREAM_API_KEY"
    api_key: str | None = field(default=None, repr=False)
    model_override: str | None = None
    logprobs_mode: str | None = None
    """What the server's logprobs are ("raw" or "processed"), stamped on every record; None: unknown."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Chat-template quirks and sampling the gateway sets on every call (`RunnerConfig.model_settings`)."""


def gateway_sources() -> bytes:
    """A tar of the modules the gateway imports (the package's top level and `agentbake/gateway/`)."""
    package = Path(agentbake.__file__).parent
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted([*package.glob("*.py"), *package.glob("gateway/*.py")]):
            info = tarfile.TarInfo(f"agentbake/{path.relative_to(package).as_posix()}")
            data = path.read_bytes()
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def settings_argv(settings: ModelSettings) -> list[str]:
    """`agentbake gateway` options giving `settings` (its options are named after the fields)."""
    argv: list[str] = []
    for name, value in settings.model_dump(exclude_defaults=True).items():
        option = "--" + name.replace("_", "-")
        argv += [option] if value is True else [f"--no-{option[2:]}"] if value is False else [option, str(value)]
    return argv


def start_sandbox_gateway(handle: SandboxHandle, python: str, spec: SandboxGateway) -> TraceFetcher:
    """Start the gateway in `handle` with the image's baked `python`, point `handle.model_url` at it, fetch its trace.

    The handle's backend must have `Capabilities.gateway_in_sandbox`."""
    made = handle.exec("umask 077 && mktemp -d", user="root", timeout=30)
    if made.exit_code != 0:
        raise SandboxError(f"sandbox {handle.sandbox_id}: cannot make the gateway's directory: {made.stderr.strip()}")
    folder = made.stdout.strip()
    handle.write_bytes(f"{folder}/gateway.tar", gateway_sources(), mode=0o600, user="root")
    unpacked = handle.exec(f"tar -x -f {folder}/gateway.tar -C {folder}", user="root", timeout=60)
    if unpacked.exit_code != 0:
        raise SandboxError(f"sandbox {handle.sandbox_id}: cannot unpack the gateway: {unpacked.stderr.strip()}")
    port = 20000 + secrets.randbelow(40000)  # sandboxes sharing a network (tests) must not collide
    argv = [python, "-m", "agentbake.gateway", "--upstream", spec.upstream, "--port", str(port)]
    argv += ["--rollout-id", spec.rollout_id, "--trace", f"{folder}/trace.jsonl", "--api-key-env", spec.api_key_env]
    argv += ["--max-trace-bytes", str(ROLLOUT_TRACE_MAX_BYTES)]  # the trace is fetched to this host's disk
    if spec.model_override:
        argv += ["--model-override", spec.model_override]
    if spec.logprobs_mode:
        argv += ["--logprobs-mode", spec.logprobs_mode]
    argv += settings_argv(spec.settings)
    envs = {spec.api_key_env: spec.api_key} if spec.api_key else {}
    job = handle.start_bg(f"cd {folder} && exec {shlex.join(argv)}", envs=envs, cwd=folder, user="root")
    url = f"http://127.0.0.1:{port}"
    if handle.exec(_READY_PROBE.format(url=url), user="root", timeout=60).exit_code != 0:
        job.kill()
        raise SandboxError(f"sandbox {handle.sandbox_id}: the in-sandbox gateway did not answer on {url}/healthz")
    handle.model_url = url
    fetcher = TraceFetcher(handle, f"{folder}/trace.jsonl", spec.trace)
    try:
        handle.before_kill(fetcher.finish)
    except SandboxError:  # a backend without Capabilities.gateway_in_sandbox (the Runner checks it first)
        fetcher.finish()
        raise
    return fetcher


class TraceFetcher:
    """Copies the complete lines of the sandbox's trace file to the trainer's, as they are written."""

    def __init__(self, handle: SandboxHandle, remote: str, local: Path, interval_s: float = FETCH_INTERVAL_S) -> None:
        self.handle, self.remote, self.local, self.interval_s = handle, remote, local, interval_s
        self.offset = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        local.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name=f"trace-{handle.sandbox_id}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.fetch()
            except Exception as exc:  # the sandbox is gone: what was fetched stays
                logger.warning("sandbox %s: trace fetch stopped: %s", self.handle.sandbox_id, exc)
                return

    def fetch(self) -> int:
        """Append what the sandbox's trace gained since the last fetch; returns the bytes appended."""
        with self._lock:
            read = self.handle.exec(
                f"[ -e {self.remote} ] && tail -c +{self.offset + 1} {self.remote} || true", user="root", timeout=60
            )
            complete = read.stdout[: read.stdout.rfind("\n") + 1]
            if complete:
                data = complete.encode()
                with open(self.local, "ab") as trace:
                    trace.write(data)
                    trace.flush()
                    os.fsync(trace.fileno())
                self.offset += len(data)
            return len(complete)

    def finish(self) -> None:
        """Stop the loop after one last fetch (best effort: a dead sandbox keeps what was fetched)."""
        self._stop.set()
        self._thread.join(self.interval_s + 65)
        try:
            self.fetch()
        except Exception as exc:
            logger.warning("sandbox %s: last trace fetch failed: %s", self.handle.sandbox_id, exc)
