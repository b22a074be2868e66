"""Spec + lock -> Dockerfile and build context, through the Jinja templates.

Rendering is pure: the same spec, lock, base reference and CA file always give
the same bytes, which is what the content hash (digest.py) relies on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from agentbake import __version__
from agentbake.buildkit.labels import ImageLabels
from agentbake.buildkit.lock import read_lock, requirements_txt
from agentbake.buildkit.spec import ImageSpec
from agentbake.errors import SpecError, TemplateError

CA_CONTEXT_PATH = "ca/extra-ca.crt"
APT_CA_CONTEXT_PATH = "ca/apt.conf"
APT_CA_CONF = b'Acquire::https::CAInfo "/usr/local/share/ca-certificates/agentbake-extra.crt";\n'
DPKG_SLIM = "dpkg-slim.cfg"  # dpkg path excludes, shared with `agentbake base debian`
PREFIX = "/opt/agentbake"
# What every image carries: the harness (git, curl, python3), a Hugging Face sandbox's boot
# (/bin/sh, curl, sha256sum from coreutils) and the agents' search tool (ripgrep).
COMMON_PACKAGES = (
    "bash",
    "ca-certificates",
    "coreutils",
    "curl",
    "git",
    "python3",
    "python3-venv",
    "ripgrep",
)


@dataclass(frozen=True)
class Rendered:
    """A rendered image: the Dockerfile and every other file of its build context."""

    spec: ImageSpec
    lock: dict[str, Any]
    base_image: str
    dockerfile: str
    files: dict[str, bytes] = field(default_factory=dict)

    def context_files(self) -> dict[str, bytes]:
        """All context files including the Dockerfile, by relative path."""
        return {"Dockerfile": self.dockerfile.encode(), **self.files}

    def write(self, directory: Path) -> None:
        for rel, data in sorted(self.context_files().items()):
            target = directory / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


def harness_paths(spec: ImageSpec) -> dict[str, Any]:
    """Every path the harness needs; published in the image labels so nothing is hard-coded."""
    home = f"/home/{spec.user.name}"
    dirs = {
        "workdir": f"{home}/workdir",
        "task": f"{home}/task",
        "logs_agent": f"{home}/logs/agent",
        "logs_verifier": f"{home}/logs/verifier",
    }
    return {
        "home": home,
        **dirs,
        "harness_dirs": list(dirs.values()),
        "prefix": PREFIX,
        "venv": f"{PREFIX}/venv",
        "agent": f"{PREFIX}/agent",
    }


def image_labels(spec: ImageSpec, lock: dict[str, Any]) -> dict[str, str]:
    """The image's OCI labels and its `dev.agentbake.*` labels (`ImageLabels`, what the runner reads)."""
    paths = harness_paths(spec)
    ours = ImageLabels(
        agent_name=spec.agent.name,
        agent_package=spec.agent.package,
        agent_version=lock["agent"]["version"],
        agent_command=spec.agent.command,
        spec_hash=spec.spec_hash,
        builder_version=__version__,
        user=spec.user.name,
        uid=spec.user.uid,
        home=paths["home"],
        python=f"{paths['venv']}/bin/python",
        dir_workdir=paths["workdir"],
        dir_task=paths["task"],
        dir_logs_agent=paths["logs_agent"],
        dir_logs_verifier=paths["logs_verifier"],
    )
    return {
        "org.opencontainers.image.title": f"agentbake/{spec.name}",
        "org.opencontainers.image.description": spec.description,
        "org.opencontainers.image.version": lock["agent"]["version"],
        **ours.to_labels(),
    }


def _dockerquote(value: object, expand: bool = False) -> str:
    """A double-quoted Dockerfile value; `$` stays literal unless `expand` (ENV may say $PATH)."""
    text = str(value)
    if "\n" in text:
        raise jinja2.TemplateRuntimeError(f"value {text!r} spans lines; Dockerfile values must be one line")
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + (text if expand else text.replace("$", "\\$")) + '"'


def dockerpairs(pairs: dict[str, object], expand: bool = False) -> str:
    """`key="value"` pairs, one per continued line, sorted by key, for LABEL and ENV."""
    return " \\\n    ".join(f"{key}={_dockerquote(value, expand)}" for key, value in sorted(pairs.items()))


def _environment(templates_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["dockerpairs"] = dockerpairs
    return env


def render(
    spec: ImageSpec,
    templates_dir: Path,
    *,
    base_image: str | None = None,
    ca_cert: Path | None = None,
    lock: dict[str, Any] | None = None,
) -> Rendered:
    """Render the spec's Dockerfile and context; the lock is read (and checked) unless given."""
    lock = read_lock(spec) if lock is None else lock
    try:
        dpkg_slim = (templates_dir / DPKG_SLIM).read_bytes()
    except OSError as exc:
        raise TemplateError(
            f"{templates_dir / DPKG_SLIM}: cannot read it ({exc.strerror}); templates need it"
        ) from None
    files: dict[str, bytes] = {"requirements.txt": requirements_txt(lock["python"]).encode(), DPKG_SLIM: dpkg_slim}
    if spec.agent.install == "npm":
        lockfile = lock["npm_lockfile"]
        package_json = {
            "name": lockfile["name"],
            "private": True,
            "dependencies": lockfile["packages"][""]["dependencies"],
        }
        files["agent/package.json"] = (json.dumps(package_json, indent=2, sort_keys=True) + "\n").encode()
        files["agent/package-lock.json"] = (json.dumps(lockfile, indent=2, sort_keys=True) + "\n").encode()
    elif spec.agent.install == "pip":
        files["agent/requirements.txt"] = requirements_txt(lock["agent_python"]).encode()
    if ca_cert is not None:
        try:
            files[CA_CONTEXT_PATH] = ca_cert.read_bytes()
        except OSError as exc:
            raise SpecError(f"--ca-cert {ca_cert}: cannot read it ({exc.strerror}); pass a PEM CA bundle") from None
        if b"-----BEGIN CERTIFICATE-----" not in files[CA_CONTEXT_PATH]:
            raise SpecError(
                f"--ca-cert {ca_cert}: no PEM certificate in it; pass a PEM file (-----BEGIN CERTIFICATE-----)"
            )
        files[APT_CA_CONTEXT_PATH] = APT_CA_CONF
    packages = list(
        dict.fromkeys([*COMMON_PACKAGES, *(["nodejs"] if spec.agent.install == "npm" else []), *spec.packages])
    )
    context = {
        "agentbake_version": __version__,
        "image": spec.model_dump(mode="json"),
        "lock": lock,
        "base_image": base_image or spec.base.image,
        "ca_cert": CA_CONTEXT_PATH if ca_cert is not None else None,
        "apt_ca_conf": APT_CA_CONTEXT_PATH,
        "packages": packages,
        "paths": harness_paths(spec),
        "labels": image_labels(spec, lock),
    }
    try:
        dockerfile = _environment(templates_dir).get_template("Dockerfile.j2").render(context)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"{exc.filename or exc.name}:{exc.lineno}: template syntax error: {exc.message}") from None
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"{templates_dir}: template {exc.name!r} not found (image {spec.name})") from None
    except (jinja2.UndefinedError, jinja2.TemplateRuntimeError) as exc:
        raise TemplateError(f"{_template_location(exc)}: {exc} (rendering image {spec.name})") from None
    return Rendered(spec=spec, lock=lock, base_image=context["base_image"], dockerfile=dockerfile, files=files)


def _template_location(exc: BaseException) -> str:
    """The innermost template frame of a render error, as "file:line"."""
    location = "template"
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.endswith(".j2"):
            location = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return location
