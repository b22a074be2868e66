"""Real builds on the engine: the three catalog images, their contents, caching and failures."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import docker
import pytest

import agentbake
from agentbake.buildkit.build import (
    REVISION_LABEL,
    SOURCE_LABEL,
    BuildResult,
    build,
    context_tar,
    provenance_labels,
)
from agentbake.buildkit.builders import Progress, run_build
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.lock import read_lock
from agentbake.errors import BuildError
from tests.conftest import VERSION_FLAG, plan_default, write_spec

pytestmark = pytest.mark.docker


def normalize(distribution: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def run_in(engine: docker.DockerClient, tag: str, command: str) -> str:
    """Run a shell command in a throwaway container as the image's own (non-root) user."""
    output = engine.containers.run(tag, ["sh", "-c", command], remove=True, stderr=True, network_mode="none")
    return output.decode()


@pytest.mark.parametrize(
    "name", ["claude-code", "codex", "gemini-cli", "mini-swe-agent", "opencode", "pi", "qwen-code"]
)
def test_agent_runs_as_the_non_root_user(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog, name: str
) -> None:
    spec = catalog.load(name)
    flag = VERSION_FLAG.get(name, "--version")
    output = run_in(engine, built_images[name].tag, f"id -u; id -un; pwd; {spec.agent.command} {flag} 2>&1")
    uid, user, cwd, version = output.splitlines()[:4]
    assert (uid, user, cwd) == ("1000", "agent", "/home/agent/workdir")
    assert spec.agent.version in version


@pytest.mark.parametrize(
    "name", ["claude-code", "codex", "gemini-cli", "mini-swe-agent", "opencode", "pi", "qwen-code"]
)
def test_image_carries_what_sandboxes_need(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog, name: str
) -> None:
    image = engine.images.get(built_images[name].tag)
    labels = image.labels
    dirs = [labels[f"dev.agentbake.dir.{key}"] for key in ("workdir", "task", "logs_agent", "logs_verifier")]
    python = labels["dev.agentbake.python"]
    output = run_in(
        engine,
        built_images[name].tag,
        f"stat -c '%u %n' {' '.join(dirs)}; for c in sh curl sha256sum git; do command -v $c; done; "
        f"{python} -c 'import importlib.metadata as m; print(*sorted(d.name.lower() for d in m.distributions()))'",
    )
    locked = sorted(normalize(pkg["name"]) for pkg in read_lock(catalog.load(name))["python"]["packages"])
    assert [line.split()[0] for line in output.splitlines()[:4]] == ["1000"] * 4
    assert "/usr/bin/sha256sum" in output and "/usr/bin/curl" in output
    installed = sorted(normalize(dist) for dist in output.splitlines()[-1].split())
    assert installed == locked  # exactly the locked gateway dependencies, no pip
    assert labels["dev.agentbake.spec-hash"] and labels["org.opencontainers.image.revision"]
    assert image.attrs["Config"]["User"] == "agent"


# Codex ships its code-mode host beside the CLI in the same platform package.
@pytest.mark.parametrize(("name", "binaries"), [("claude-code", 1), ("codex", 2), ("opencode", 1)])
def test_native_images_carry_their_binaries_and_no_node(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], name: str, binaries: int
) -> None:
    output = run_in(
        engine,
        built_images[name].tag,
        "command -v node || command -v npm || echo no-node; find /opt/agentbake/agent -type f -size +50M | wc -l",
    )
    assert output.split() == ["no-node", str(binaries)]


def test_a_pip_image_carries_exactly_its_locked_wheels_and_no_node(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog
) -> None:
    output = run_in(
        engine,
        built_images["mini-swe-agent"].tag,
        "command -v node npm pip || echo none; readlink -f /usr/local/bin/mini; /opt/agentbake/agent/bin/python -c "
        "'import importlib.metadata as m; print(*sorted(d.name.lower() for d in m.distributions()))'",
    )
    none, command, distributions = output.splitlines()
    assert (none, command) == ("none", "/opt/agentbake/agent/bin/mini")
    locked = read_lock(catalog.load("mini-swe-agent"))["agent_python"]["packages"]
    assert sorted(normalize(d) for d in distributions.split()) == sorted(normalize(p["name"]) for p in locked)


def test_second_build_is_cached_without_calling_the_builder(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog, monkeypatch
) -> None:
    def builder_called(*args, **kwargs):
        raise AssertionError("the builder must not be called for an unchanged image")

    monkeypatch.setattr(engine.api, "build", builder_called)
    for spec in catalog.load_all():
        result = build(engine, plan_default(engine, spec, catalog))
        assert result.cached and result.tag == built_images[spec.name].tag
        assert result.id == built_images[spec.name].id
        assert engine.images.get(f"agentbake/{spec.name}:latest").id == result.id


def test_ca_cert_and_base_override_change_the_tag(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog, tmp_path: Path
) -> None:
    spec = catalog.load("claude-code")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    tags = {
        plan_default(engine, spec, catalog, ca_cert=None).tag,
        plan_default(engine, spec, catalog, ca_cert=ca).tag,
        plan_default(engine, spec, catalog, base_image="debian:trixie-slim").tag,
    }
    assert len(tags) == 3


def test_failing_step_reports_step_and_output(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog, user_catalog: Path
) -> None:
    write_spec(
        user_catalog,
        "broken",
        'extends = "claude-code"\nrun = ["echo about-to-fail; exit 3"]\n',
        lock_from=catalog.load("claude-code").lock_path,
    )
    spec = Catalog.discover(user_catalog).load("broken")
    with pytest.raises(BuildError) as info:
        build(engine, plan_default(engine, spec, catalog))
    error = info.value
    assert "exit 3" in error.step and "returned a non-zero code: 3" in str(error)
    assert "about-to-fail" in error.output_tail


def test_context_tar_is_byte_stable() -> None:
    files = {"b.txt": b"two", "a/one.txt": b"one"}
    assert context_tar(files) == context_tar(dict(reversed(files.items())))


def test_the_same_dockerfile_builds_with_buildkit(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog
) -> None:
    build_plan = plan_default(engine, catalog.load("opencode"), catalog)
    tag = "agentbake-test/opencode-buildkit:latest"
    steps: list[str] = []

    class Steps(Progress):
        def step(self, index: int, total: int, instruction: str) -> None:
            steps.append(instruction)

    image = run_build(
        engine, context_tar(build_plan.rendered.context_files()), tag, builder="buildkit", progress=Steps()
    )
    try:
        assert "1.18.33" in run_in(engine, tag, "opencode --version")
        assert any(step.startswith("RUN curl") for step in steps)
        # Same labels as the legacy build, but for the provenance ones set at build time.
        content_labels = [
            {k: v for k, v in engine.images.get(ref).labels.items() if k not in (SOURCE_LABEL, REVISION_LABEL)}
            for ref in (tag, build_plan.tag)
        ]
        assert content_labels[0] == content_labels[1]
    finally:
        engine.images.remove(image, force=True)


def test_buildkit_failure_reports_step_and_output(engine: docker.DockerClient, built_images) -> None:
    dockerfile = b"FROM debian:bookworm-slim\nRUN echo buildkit-last-words; exit 7\n"
    with pytest.raises(BuildError) as info:
        run_build(engine, context_tar({"Dockerfile": dockerfile}), "agentbake-test/fail:1", builder="buildkit")
    assert "exit 7" in info.value.step and "buildkit-last-words" in "\n".join(info.value.output_tail)
    assert "exit code: 7" in str(info.value)


def test_apt_trusts_the_ca_cert_before_ca_certificates_is_installed(
    engine: docker.DockerClient, catalog: Catalog
) -> None:
    """Behind an intercepting proxy, an https Debian mirror works from the first apt-get update."""
    ca = detect_ca_bundle()
    if ca is None:
        pytest.skip("no CA bundle named by the environment (no intercepting proxy here)")
    rendered = plan_default(engine, catalog.load("claude-code"), catalog).rendered
    head = rendered.dockerfile.split("# Debian packages")[0]
    dockerfile = head + (
        "RUN ! test -e /usr/sbin/update-ca-certificates"
        " && sed -i 's|http://deb.debian.org|https://deb.debian.org|' /etc/apt/sources.list"
        " && apt-get update --error-on=any -o Acquire::Retries=2\n"
    )
    files = {**rendered.files, "Dockerfile": dockerfile.encode()}
    image = run_build(engine, context_tar(files), "agentbake-test/apt-https:1", no_cache=True)
    engine.images.remove(image, force=True)


@pytest.mark.parametrize("name", ["claude-code", "pi"])
def test_baked_venv_runs_the_gateway(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], name: str
) -> None:
    """The image's venv holds everything the gateway imports: its source alone makes it serve."""
    package = Path(agentbake.__file__).parent
    sources = {f"agentbake/{p.relative_to(package)}": p.read_bytes() for p in package.glob("*.py")}
    sources |= {f"agentbake/{p.relative_to(package)}": p.read_bytes() for p in package.glob("gateway/*.py")}
    container = engine.containers.run(built_images[name].tag, ["sleep", "60"], detach=True, network_mode="none")
    try:
        container.put_archive("/tmp", context_tar(sources))
        python = engine.images.get(built_images[name].tag).labels["dev.agentbake.python"]
        serve = f"cd /tmp && {python} -m agentbake.gateway --upstream http://127.0.0.1:9/v1 --port 8099 &"
        probe = "for i in $(seq 50); do curl -fsS http://127.0.0.1:8099/healthz && exit 0; sleep 0.2; done; exit 1"
        exit_code, output = container.exec_run(["sh", "-c", f"{serve} {probe}"])
        assert exit_code == 0, output.decode()
        assert b'"ok"' in output
    finally:
        container.remove(force=True)


def test_provenance_labels_name_a_real_source_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    monkeypatch.delenv("GITHUB_SHA", raising=False)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", "/some/local/clone"], check=True)
    assert provenance_labels(tmp_path) == {}  # no commit yet, and a local path is no source URL
    subprocess.run(
        ["git", "-C", str(tmp_path), "remote", "set-url", "origin", "https://example.org/a/b.git"], check=True
    )
    assert provenance_labels(tmp_path) == {SOURCE_LABEL: "https://example.org/a/b.git"}
    monkeypatch.setenv("GITHUB_REPOSITORY", "org/repo")
    monkeypatch.setenv("GITHUB_SHA", "abc123")
    assert provenance_labels(tmp_path) == {SOURCE_LABEL: "https://github.com/org/repo", REVISION_LABEL: "abc123"}
