"""E2B templates through the official `e2b` SDK: from the pushed registry image, or from the rendered Dockerfile.

The template is named after the image (`claude-code`) and tagged with the content hash and `latest`;
a name whose hash tag exists is not built again. `E2B_API_KEY` (and `E2B_API_URL` / `E2B_DOMAIN`)
configure the SDK, never argv.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbake.buildkit.render import Rendered, harness_paths
from agentbake.errors import PublishError
from agentbake.publish.registry import Credentials

API_KEY_ENV = "E2B_API_KEY"
_NAME = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class TemplatePublish:
    """The template `name:tag` and whether this call built it."""

    template: str
    action: str
    build_id: str | None


def template_name(image: str) -> str:
    """E2B template names are lowercase letters, digits and dashes: `claude-code`, `my.image` -> `my-image`."""
    return _NAME.sub("-", image.lower()).strip("-")


def publish_template(
    rendered: Rendered,
    tag: str,
    *,
    image_reference: str | None,
    credentials: Credentials | None = None,
    latest: bool = True,
    log: Callable[[str], None] = lambda line: None,
) -> TemplatePublish:
    """Build the E2B template `name:tag` from `image_reference` (or, when None, from the rendered Dockerfile)."""
    if not os.environ.get(API_KEY_ENV):
        raise PublishError(f"{API_KEY_ENV} is not set; create a key in the E2B dashboard and export it")
    try:
        from e2b import Template
    except ImportError:
        raise PublishError("the e2b SDK is not installed; pip install 'agentbake[e2b]'") from None
    spec = rendered.spec
    name = template_name(spec.name)
    target = f"{name}:{tag}"
    existing = _existing_tags(Template, name)
    if tag in existing:
        if latest and existing.get("latest") != existing[tag]:
            _call(Template.assign_tags, target, ["latest"], what=f"tagging {name}:latest")
        return TemplatePublish(template=target, action="skipped", build_id=existing[tag])
    with tempfile.TemporaryDirectory(prefix="agentbake-e2b-") as context:
        if image_reference is None:
            rendered.write(Path(context))
            template: Any = Template(file_context_path=context).from_dockerfile(rendered.dockerfile)
        else:
            login = (credentials.username, credentials.password) if credentials else (None, None)
            paths = harness_paths(spec)
            template = (
                Template(file_context_path=context)
                .from_image(image_reference, *login)
                .set_user(spec.user.name)
                .set_workdir(paths["workdir"])
            )
        info = _call(
            Template.build,
            template,
            name,
            tags=[tag, "latest"] if latest else [tag],
            cpu_count=spec.resources.cpus,
            memory_mb=spec.resources.memory_mb,
            on_build_logs=lambda entry: log(f"{entry.level}: {entry.message}"),
            what=f"building template {target}",
        )
    return TemplatePublish(template=target, action="pushed", build_id=info.build_id)


def _existing_tags(template_class: Any, name: str) -> dict[str, str]:
    """Tag -> build id of the template `name`; empty when there is no such template."""
    if not _call(template_class.exists, name, what=f"looking up template {name}"):
        return {}
    tags = _call(template_class.get_tags, name, what=f"listing tags of template {name}")
    return {entry.tag: entry.build_id for entry in tags}


def _call(function: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> Any:
    """Call the SDK; its exceptions become one PublishError that says what we were doing and how to fix it."""
    import httpx
    from e2b.exceptions import AuthenticationException, BuildException, RateLimitException, SandboxException

    try:
        return function(*args, **kwargs)
    except AuthenticationException as exc:
        raise PublishError(f"E2B: {what}: the API key was refused ({exc}); check {API_KEY_ENV}") from None
    except RateLimitException as exc:
        raise PublishError(f"E2B: {what}: rate limited ({exc}); wait and publish again") from None
    except BuildException as exc:
        raise PublishError(f"E2B: {what}: the build failed: {exc}") from None
    except SandboxException as exc:
        raise PublishError(f"E2B: {what}: {exc}") from None
    except (httpx.HTTPError, OSError) as exc:
        raise PublishError(f"E2B: {what}: the API does not answer ({exc})") from None
