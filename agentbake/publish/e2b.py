"""E2B templates through the official `e2b` SDK, from the pushed registry image or the rendered Dockerfile.

The template is named after the image and tagged with the content hash and `latest`. `E2B_API_KEY` (and `E2B_API_URL` /
`E2B_DOMAIN`) configure the SDK, never argv.

A template is ready when a build its tag names is `ready`, not when its name exists. A build of the same name in
progress is waited for rather than duplicated; if it fails, this publisher builds.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbake.buildkit.render import Rendered, harness_paths
from agentbake.errors import PublishError
from agentbake.publish.registry import Credentials

API_KEY_ENV = "E2B_API_KEY"
_NAME = re.compile(r"[^a-z0-9-]+")


WAIT_TIMEOUT_S = 3600.0
"""How long to wait for another publisher's build of the same template."""
POLL_S = 2.0
_BUSY = ("waiting", "building")


@dataclass(frozen=True)
class TemplatePublish:
    """The template `name:tag` and what this call did: `pushed` (built it), `waited` (another publisher's build
    became ready), `skipped` (ready already)."""

    template: str
    action: str
    build_id: str | None


@dataclass(frozen=True)
class _State:
    """What E2B holds under a template name: the build its tag names when ready, else one in progress."""

    template_id: str | None
    ready: str | None
    building: str | None


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
    Template = _sdk()
    spec = rendered.spec
    paths = harness_paths(spec)

    def define(context: str) -> Any:
        if image_reference is None:
            rendered.write(Path(context))
            return Template(file_context_path=context).from_dockerfile(rendered.dockerfile)
        return _from_image(Template, context, image_reference, credentials, spec.user.name, paths["workdir"])

    name = template_name(spec.name)
    made = ensure_template(
        name,
        tag,
        define,
        tags=[tag, "latest"] if latest else [tag],
        cpus=spec.resources.cpus,
        memory_mb=spec.resources.memory_mb,
        log=log,
    )
    if latest and made.action != "pushed":
        existing = _existing_tags(Template, name)
        if existing.get("latest") != existing.get(tag):
            _call(Template.assign_tags, made.template, ["latest"], what=f"tagging {name}:latest")
    return made


def environment_template(environment: str) -> str:
    """The E2B template of a task environment, `agentbake-env-<hash12>:<hash12>`.

    Its name is its own, so a build in progress under it is this environment's."""
    return f"agentbake-env-{environment[:12]}:{environment[:12]}"


def publish_environment(
    image_reference: str,
    environment: str,
    *,
    user: str,
    workdir: str,
    credentials: Credentials | None = None,
    cpus: int = 2,
    memory_mb: int = 2048,
    log: Callable[[str], None] = lambda line: None,
    poll_s: float = POLL_S,
    wait_timeout_s: float = WAIT_TIMEOUT_S,
) -> TemplatePublish:
    """The template of a task environment, built from its pushed layered image unless ready or being built."""
    Template = _sdk()
    name, _, tag = environment_template(environment).partition(":")
    return ensure_template(
        name,
        tag,
        lambda context: _from_image(Template, context, image_reference, credentials, user, workdir),
        cpus=cpus,
        memory_mb=memory_mb,
        log=log,
        poll_s=poll_s,
        wait_timeout_s=wait_timeout_s,
    )


def ensure_template(
    name: str,
    tag: str,
    define: Callable[[str], Any],
    *,
    tags: list[str] | None = None,
    cpus: int,
    memory_mb: int,
    log: Callable[[str], None],
    poll_s: float = POLL_S,
    wait_timeout_s: float = WAIT_TIMEOUT_S,
) -> TemplatePublish:
    """Make `name:tag` ready: skip it when it is, wait for another publisher's build, else build it.

    The build uses `define(context_dir)` (a Template) and `tags` (default: `tag`)."""
    Template = _sdk()
    target = f"{name}:{tag}"
    for _ in range(3):  # a build someone else started may fail: then this call builds
        state = _state(name, tag)
        if state.ready:
            return TemplatePublish(template=target, action="skipped", build_id=state.ready)
        if state.building and state.template_id:
            log(f"{target}: build {state.building} (another publisher's) in progress; waiting until it is ready")
            ready = _wait_ready(Template, state.template_id, state.building, target, poll_s, wait_timeout_s)
            if ready and _state(name, tag).ready:
                return TemplatePublish(template=target, action="waited", build_id=state.building)
            continue
        with tempfile.TemporaryDirectory(prefix="agentbake-e2b-") as context:
            info = _call(
                Template.build,
                define(context),
                name,
                tags=tags or [tag],
                cpu_count=cpus,
                memory_mb=memory_mb,
                on_build_logs=lambda entry: log(f"{entry.level}: {entry.message}"),
                what=f"building template {target}",
            )
        return TemplatePublish(template=target, action="pushed", build_id=info.build_id)
    raise PublishError(f"E2B: template {target}: the builds other publishers started failed; publish again")


def _sdk() -> Any:
    if not os.environ.get(API_KEY_ENV):
        raise PublishError(f"{API_KEY_ENV} is not set; create a key in the E2B dashboard and export it")
    try:
        from e2b import Template
    except ImportError:
        raise PublishError("the e2b SDK is not installed; pip install 'agentbake[e2b]'") from None
    return Template


def _from_image(
    template_class: Any, context: str, reference: str, credentials: Credentials | None, user: str, workdir: str
) -> Any:
    login = (credentials.username, credentials.password) if credentials else (None, None)
    return template_class(file_context_path=context).from_image(reference, *login).set_user(user).set_workdir(workdir)


def _state(name: str, tag: str) -> _State:
    """Ask E2B: the template's id, the ready build its tag names, a build in progress."""
    from e2b.api.client.api.templates import get_templates_aliases_alias, get_templates_template_id
    from e2b.api.client_sync import get_api_client
    from e2b.connection_config import ConnectionConfig

    api = get_api_client(ConnectionConfig())
    what = f"looking up template {name}"
    alias = _call(get_templates_aliases_alias.sync_detailed, alias=name, client=api, what=what)
    if alias.status_code == 404:
        return _State(None, None, None)
    _check(alias, what)
    template_id = alias.parsed.template_id
    detail = _call(get_templates_template_id.sync_detailed, template_id=template_id, client=api, what=what)
    _check(detail, what)
    builds = {str(build.build_id): getattr(build.status, "value", build.status) for build in detail.parsed.builds}
    tags = {entry.tag: entry.build_id for entry in _call(_sdk().get_tags, name, what=f"listing tags of {name}")}
    tagged = tags.get(tag)
    ready = tagged if tagged is not None and builds.get(str(tagged), "ready") == "ready" else None
    busy = [build for build, status in builds.items() if status in _BUSY]
    return _State(template_id, ready, busy[0] if busy else None)


def _check(response: Any, what: str) -> None:
    if response.status_code in (401, 403):
        raise PublishError(f"E2B: {what}: the API key was refused (HTTP {response.status_code}); check {API_KEY_ENV}")
    if response.status_code >= 300 or response.parsed is None or not hasattr(response.parsed, "to_dict"):
        raise PublishError(f"E2B: {what}: HTTP {response.status_code}: {response.content[:200]!r}")


def _wait_ready(
    template_class: Any, template_id: str, build_id: str, target: str, poll_s: float, timeout_s: float
) -> bool:
    """Poll the build until it is ready (True) or failed (False); PublishError past `timeout_s`."""
    from e2b.template.types import BuildInfo

    info = BuildInfo(template_id=template_id, build_id=build_id, name=target, alias=target)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = _call(template_class.get_build_status, info, what=f"waiting for build {build_id} of {target}")
        state = getattr(status.status, "value", status.status)
        if state == "ready":
            return True
        if state == "error":
            return False
        time.sleep(poll_s)
    raise PublishError(f"E2B: template {target}: build {build_id} was not ready after {timeout_s:.0f} s")


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
