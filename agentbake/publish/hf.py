"""Hugging Face: a sandbox pulls an image by reference, so we check the image can boot there.

The sandbox's bootstrap needs `/bin/sh`, `curl` or `wget`, and `sha256sum` in the image. `--hf-space NS/NAME` also
uploads the rendered Dockerfile and context to a Docker Space (`HF_TOKEN`, `HF_ENDPOINT`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import docker
from docker.errors import DockerException

from agentbake.buildkit.render import Rendered
from agentbake.errors import PublishError

# Printed by the probe for each requirement found; the image's own shell runs it.
_PROBE = (
    "test -x /bin/sh && echo sh; "
    "(command -v curl || command -v wget) >/dev/null && echo fetch; "
    "command -v sha256sum >/dev/null && echo sha256sum; true"
)
_NEEDS = {"sh": "/bin/sh", "fetch": "curl or wget", "sha256sum": "sha256sum"}
SPACE_README = """---
title: {name}
sdk: docker
app_port: 7860
---

agentbake image `{name}` (content hash {tag}): the rendered Dockerfile and its build context.
A Hugging Face sandbox runs it as `image="hf.co/spaces/{space}"`.
"""


def check_boot(client: docker.DockerClient, image: str) -> None:
    """Run the image once (no network, no caps) and fail naming every boot requirement it lacks."""
    try:
        container = client.containers.create(
            image,
            ["/bin/sh", "-c", _PROBE],
            entrypoint=[],
            user="0",
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
        )
    except DockerException as exc:
        raise PublishError(
            f"{image}: could not create a container to check the Hugging Face boot needs ({exc})"
        ) from None
    try:  # created, then started apart: a start that fails (no /bin/sh) must still remove the container
        container.start()
        container.wait(timeout=60)
        output = container.logs().decode()
    except DockerException as exc:
        if "/bin/sh" not in str(exc):
            raise PublishError(f"{image}: could not run it to check the Hugging Face boot needs ({exc})") from None
        output = ""
    finally:
        container.remove(force=True)
    missing = [need for key, need in _NEEDS.items() if key not in output.split()]
    if missing:
        raise PublishError(
            f"{image} cannot boot in a Hugging Face sandbox: it lacks {', '.join(missing)}; "
            "add them to the spec's `packages` (Debian: curl, coreutils)"
        )


def publish_space(rendered: Rendered, tag: str, space: str) -> str:
    """Create (or update) the Docker Space `space` with the rendered Dockerfile and context; its image ref."""
    if space.count("/") != 1 or not all(space.split("/")):
        raise PublishError(f"--hf-space {space!r}: expected NAMESPACE/NAME, e.g. my-org/claude-code")
    try:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError:
        raise PublishError("huggingface_hub is not installed; pip install 'agentbake[hf]'") from None
    # HF_ENDPOINT is read here, not when huggingface_hub was first imported.
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
    try:
        api.create_repo(space, repo_type="space", space_sdk="docker", exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="agentbake-space-") as folder:
            rendered.write(Path(folder))
            readme = SPACE_README.format(name=rendered.spec.name, tag=tag, space=space)
            Path(folder, "README.md").write_text(readme, encoding="utf-8")
            api.upload_folder(
                folder_path=folder,
                repo_id=space,
                repo_type="space",
                commit_message=f"agentbake {rendered.spec.name} {tag}",
            )
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        hint = " (check HF_TOKEN: it needs write access)" if status in (401, 403) else ""
        raise PublishError(f"Hugging Face Space {space}: HTTP {status}{hint}: {str(exc).splitlines()[0]}") from None
    return f"hf.co/spaces/{space}"
