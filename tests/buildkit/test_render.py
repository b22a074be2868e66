"""Rendering: shared partials, strict templates, CA handling, and what other builders accept."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from e2b import Template

from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.render import CA_CONTEXT_PATH, image_labels, render
from agentbake.errors import SpecError, TemplateError
from tests.conftest import write_spec

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.fixture(scope="module")
def rendered(catalog: Catalog):
    return {spec.name: render(spec, catalog.templates_dir) for spec in catalog.load_all()}


def test_single_stage_without_buildkit_only_syntax(rendered) -> None:
    for name, image in rendered.items():
        lines = image.dockerfile.splitlines()
        assert sum(line.startswith("FROM ") for line in lines) == 1, name
        assert "--mount" not in image.dockerfile and "# syntax" not in image.dockerfile
        assert lines[-1] == "WORKDIR /home/agent/workdir" and "USER agent" in lines


def test_images_share_their_steps_from_partials(rendered) -> None:
    shared = "useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash agent"
    assert all(shared in image.dockerfile for image in rendered.values())
    assert "sha512sum -c" in rendered["claude-code"].dockerfile
    assert "npm-cli.js ci" in rendered["pi"].dockerfile and "nodejs" in rendered["pi"].dockerfile
    assert "nodejs" not in rendered["claude-code"].dockerfile  # native binary: no Node at run time
    assert set(rendered["pi"].files) == {
        "requirements.txt",
        "dpkg-slim.cfg",
        "agent/package.json",
        "agent/package-lock.json",
    }
    # A Python CLI: its hashed wheels in a venv of its own, beside (not in) the gateway's, and no Node.
    mini = rendered["mini-swe-agent"]
    assert set(mini.files) == {"requirements.txt", "dpkg-slim.cfg", "agent/requirements.txt"}
    agent_requirements = mini.files["agent/requirements.txt"].decode().splitlines()
    assert any(line.startswith("mini-swe-agent==2.4.6 --hash=sha256:") for line in agent_requirements)
    assert all("--hash=sha256:" in line for line in agent_requirements)
    assert "python3 -m venv /opt/agentbake/agent" in mini.dockerfile and "--require-hashes" in mini.dockerfile
    assert "ln -s /opt/agentbake/agent/bin/mini /usr/local/bin/mini" in mini.dockerfile
    assert "nodejs" not in mini.dockerfile


def test_e2b_accepts_every_dockerfile_without_warnings(rendered, capsys) -> None:
    for name, image in rendered.items():
        Template().from_dockerfile(image.dockerfile)
        printed = capsys.readouterr()
        assert printed.out == "" and printed.err == "", f"{name}: E2B printed {printed}"


def test_labels_hold_every_harness_path(rendered) -> None:
    dockerfile = rendered["opencode"].dockerfile
    for key in ("dir.workdir", "dir.task", "dir.logs_agent", "dir.logs_verifier", "home", "uid", "user"):
        assert f"dev.agentbake.{key}=" in dockerfile
    labels = image_labels(rendered["opencode"].spec, rendered["opencode"].lock)
    assert not [key for key in labels if re.search("created|date|time", key)]
    assert not [value for value in labels.values() if re.search(r"\d{4}-\d{2}-\d{2}", value)]


def test_render_is_deterministic(catalog: Catalog) -> None:
    spec = catalog.load("pi")
    first, second = render(spec, catalog.templates_dir), render(spec, catalog.templates_dir)
    assert first.context_files() == second.context_files()


def test_ca_cert_is_copied_and_trusted(catalog: Catalog, tmp_path: Path) -> None:
    ca = tmp_path / "corp.pem"
    ca.write_text(PEM)
    image = render(catalog.load("claude-code"), catalog.templates_dir, ca_cert=ca)
    assert image.files[CA_CONTEXT_PATH] == PEM.encode()
    assert f"COPY {CA_CONTEXT_PATH} /usr/local/share/ca-certificates/" in image.dockerfile
    assert "update-ca-certificates" in image.dockerfile and "NODE_EXTRA_CA_CERTS" in image.dockerfile
    assert b"Acquire::https::CAInfo" in image.files["ca/apt.conf"]
    assert "COPY ca/apt.conf /etc/apt/apt.conf.d/" in image.dockerfile


def test_ca_cert_that_is_not_pem(catalog: Catalog, tmp_path: Path) -> None:
    bad = tmp_path / "ca.txt"
    bad.write_text("not a cert")
    with pytest.raises(SpecError, match=r"--ca-cert .*ca.txt: no PEM certificate"):
        render(catalog.load("claude-code"), catalog.templates_dir, ca_cert=bad)
    with pytest.raises(SpecError, match=r"--ca-cert .*absent.pem: cannot read it"):
        render(catalog.load("claude-code"), catalog.templates_dir, ca_cert=tmp_path / "absent.pem")


def test_base_image_override(catalog: Catalog) -> None:
    image = render(catalog.load("claude-code"), catalog.templates_dir, base_image="registry.local/debian:12")
    assert image.dockerfile.count("FROM registry.local/debian:12\n") == 1


def test_env_and_run_from_a_user_spec(catalog: Catalog, user_catalog: Path) -> None:
    lock = catalog.load("claude-code").lock_path
    write_spec(
        user_catalog,
        "custom",
        'extends = "claude-code"\nrun = ["pip --version"]\n'
        'env = { PATH = "/opt/x/bin:$PATH", QUOTE = "say \\"hi\\"" }\n',
        lock_from=lock,
    )
    image = render(Catalog.discover(user_catalog).load("custom"), catalog.templates_dir)
    assert 'PATH="/opt/x/bin:$PATH"' in image.dockerfile
    assert 'QUOTE="say \\"hi\\""' in image.dockerfile
    assert "\nRUN pip --version\n" in image.dockerfile


@pytest.fixture
def broken_templates(catalog: Catalog, tmp_path: Path) -> Path:
    copy = tmp_path / "templates"
    shutil.copytree(catalog.templates_dir, copy)
    return copy


def test_undefined_variable_names_template_and_line(catalog: Catalog, broken_templates: Path) -> None:
    partial = broken_templates / "partials" / "user.j2"
    partial.write_text(partial.read_text() + "RUN echo {{ image.no_such_field }}\n")
    line = len(partial.read_text().splitlines())
    with pytest.raises(TemplateError) as info:
        render(catalog.load("opencode"), broken_templates)
    assert f"partials/user.j2:{line}" in str(info.value) and "no_such_field" in str(info.value)


def test_syntax_error_names_template_and_line(catalog: Catalog, broken_templates: Path) -> None:
    (broken_templates / "partials" / "python.j2").write_text("RUN true\n{% if %}\n")
    with pytest.raises(TemplateError, match=r"partials/python.j2:2: template syntax error"):
        render(catalog.load("opencode"), broken_templates)


def test_missing_template(catalog: Catalog, broken_templates: Path) -> None:
    (broken_templates / "partials" / "labels.j2").unlink()
    with pytest.raises(TemplateError, match=r"template 'partials/labels\.j2' not found"):
        render(catalog.load("opencode"), broken_templates)
