"""The rollout's gateway on the host: a unix socket in a folder of its own, bound to one rollout.

The gateway tags every record with the rollout's id, accepts only its random client token, and writes its own trace. The
upstream key is read here, on the host; the sandbox reaches only the socket.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentbake.errors import ConfigError

if TYPE_CHECKING:  # imported by the function that serves one: an oracle run has no gateway
    from agentbake.gateway.config import GatewayConfig

GATEWAY_DIR_PREFIX = "agentbake-gw-"
GATEWAY_SOCKET = "gateway.sock"
_STALE_AFTER_S = 60  # a folder younger than this may belong to a gateway still starting
ROLLOUT_TRACE_MAX_BYTES = 256 * 1024 * 1024
"""A rollout's trace stops taking calls past this (`GatewayConfig.max_trace_bytes`): the agent cannot fill the
host's disk with recorded requests, and the runner reads the trace back into memory."""


def start_host_gateway(shared: GatewayConfig, *, rollout_id: str, token: str, trace: Path) -> tuple[Path, Any, Any]:
    """Serve a gateway for one rollout on a socket in `<temp>/agentbake-gw-<rollout>-*/`.

    The temp dir's filesystem lets the Docker backend hard-link it. Returns the folder, server and app."""
    from agentbake.gateway import create_app
    from agentbake.gateway.config import GatewayConfig
    from agentbake.serve import serve_in_thread

    runtime_dir = Path(tempfile.mkdtemp(prefix=f"{GATEWAY_DIR_PREFIX}{rollout_id[:40]}-"))
    try:
        uds = runtime_dir / GATEWAY_SOCKET
        per_rollout = {
            "uds": uds,
            "rollout_id": rollout_id,
            "client_token": token,
            "trace": trace,
            "max_trace_bytes": shared.max_trace_bytes or ROLLOUT_TRACE_MAX_BYTES,
        }
        config = GatewayConfig.model_validate({**shared.model_dump(), **per_rollout})  # validates the token too
        app = create_app(config)
        return runtime_dir, serve_in_thread(app, uds=uds, limits=config.connection_limits), app
    except BaseException:
        shutil.rmtree(runtime_dir, ignore_errors=True)
        raise


def remove_stale_gateways(prefix: str = GATEWAY_DIR_PREFIX, socket_name: str = GATEWAY_SOCKET) -> list[Path]:
    """Remove gateway folders a killed runner left, those whose socket no server answers on, and return them.

    The egress proxies' folders go likewise, by their `prefix` and `socket_name`."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            info = folder.stat()
        except OSError:
            continue
        if not folder.is_dir() or info.st_uid != os.getuid() or time.time() - info.st_mtime < _STALE_AFTER_S:
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(folder / socket_name))
                continue  # a live server
            except OSError:
                pass
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def served_model(upstream: str, api_key_env: str) -> str:
    """The first model id an OpenAI-compatible server lists at `<upstream>/models` (vLLM serves one)."""
    try:
        return str(list_models(upstream, api_key_env)[0]["id"])
    except (OSError, ValueError, LookupError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"model {upstream}: could not read the served model's name from {upstream}/models ({exc}); "
            "pass --model (RunnerConfig.model_name)"
        ) from None


def list_models(upstream: str, api_key_env: str, timeout_s: float = 30) -> list:
    """What `<upstream>/models` lists (`data`), with the key from `api_key_env`; OSError or ValueError when it
    does not answer so."""
    request = urllib.request.Request(f"{upstream}/models")
    key = os.environ.get(api_key_env)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        return json.load(answer).get("data") or []
