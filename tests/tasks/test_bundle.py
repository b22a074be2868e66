"""The agent bundle on the real engine: made once per agent image, and what it carries (the agent, a python
that runs the relay, a git) works as the agent's user in images that have neither python nor git."""

from __future__ import annotations

import docker
import docker.errors
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.errors import AgentError
from agentbake.tasks import bundle as bundle_module
from agentbake.tasks.bundle import BUNDLE_GIT, BUNDLE_MOUNT, BUNDLE_PYTHON, ensure_bundle
from tests.conftest import VERSION_FLAG
from tests.tasks.conftest import BOOKWORM, TRIXIE, unique

pytestmark = pytest.mark.docker

# A loopback server and client through the bundled python, as the relay uses it (socket, threading).
PYTHON_CHECK = """
import socket, sys, threading
server = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=lambda: server.accept()[0].sendall(b"relayed"), daemon=True).start()
print(socket.create_connection(server.getsockname()).recv(7).decode(), sys.version_info[:2] >= (3, 11))
"""
GIT_CHECK = f"""set -e
cd /tmp && mkdir w && cd w && echo a > f
{BUNDLE_GIT} init -q && {BUNDLE_GIT} add -A && {BUNDLE_GIT} -c user.name=t -c user.email=t@t commit -qm start
echo b >> f && {BUNDLE_GIT} diff --no-color | tail -1
"""


def _run(engine: docker.DockerClient, image: str, volume: str, command: list[str]) -> str:
    return engine.containers.run(
        image,
        command,
        user="1000",
        environment={"HOME": "/tmp"},
        volumes={volume: {"bind": BUNDLE_MOUNT, "mode": "ro"}},
        network_mode="none",
        remove=True,
        stderr=True,
    ).decode()


@pytest.mark.parametrize(
    "agent", ["claude-code", "codex", "gemini-cli", "mini-swe-agent", "opencode", "pi", "qwen-code"]
)
def test_bundle_runs_in_images_without_python_or_git(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], agent: str
) -> None:
    first = ensure_bundle(engine, built_images[agent].tag)
    again = ensure_bundle(engine, built_images[agent].tag)
    assert again.volume == first.volume and not again.created and again.agent_image_id == built_images[agent].id
    for base in (BOOKWORM, TRIXIE):  # neither has python3 nor git
        assert "python3" not in _run(engine, base, first.volume, ["sh", "-c", "command -v python3 git || echo none"])
        assert _run(engine, base, first.volume, [BUNDLE_PYTHON, "-I", "-S", "-c", PYTHON_CHECK]).split() == [
            "relayed",
            "True",
        ]
        assert _run(engine, base, first.volume, ["sh", "-c", GIT_CHECK]).strip() == "+b"
        # A task image's LD_PRELOAD (made for its own glibc) never reaches the bundle's binaries.
        preload = ["env", "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libc.so.6", BUNDLE_PYTHON, "-I", "-S", "-c"]
        assert (
            _run(engine, base, first.volume, [*preload, "import os; print(os.environ.get('LD_PRELOAD'))"]) == "None\n"
        )
        labels = engine.api.inspect_image(built_images[agent].id)["Config"]["Labels"]
        command = labels["dev.agentbake.agent.command"]
        # Gemini CLI re-spawns its node by process.execPath: the bundle's wrapper, not its glibc loader.
        flag = VERSION_FLAG.get(agent, "--version")
        version = _run(engine, base, first.volume, [f"{BUNDLE_MOUNT}/bin/{command}", flag])
        # Pi, Gemini CLI, Qwen Code run on the bundle's node; mini-swe-agent on its python, with the venv's packages.
        assert labels["dev.agentbake.agent.version"] in version


def test_a_failed_fill_is_removed_and_redone(engine: docker.DockerClient, built_images: dict[str, BuildResult]) -> None:
    """What a killed or failed fill leaves (its container exited non-zero, its volume) counts as no bundle."""
    name = f"agentbake-bundle-test-{unique('x')}"
    engine.volumes.create(name)
    container = engine.containers.create(built_images["claude-code"].tag, ["sh", "-c", "exit 7"], name=name)
    container.start()
    container.wait()
    assert not bundle_module._ready(engine, name)
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(name)
    with pytest.raises(docker.errors.NotFound):
        engine.volumes.get(name)


def test_only_agent_images_are_bundled(engine: docker.DockerClient, built_images: dict[str, BuildResult]) -> None:
    with pytest.raises(AgentError, match="only a catalog agent image"):
        ensure_bundle(engine, BOOKWORM)
    with pytest.raises(AgentError, match="is not on this engine"):
        ensure_bundle(engine, "agentbake-test/never-built:1")
