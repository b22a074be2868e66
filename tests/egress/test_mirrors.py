"""The mirror routes with real pip and npm against fake registries over TLS on loopback (the proxy trusts their
self-signed certificate as it trusts SSL_CERT_FILE): files cached against the registries' own digests."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from agentbake.egress import EgressConfig, Policy, sandbox_env
from tests.egress.clients import clean_env, fetch, raw
from tests.egress.conftest import FakeUpstream, Sandboxed, loopback_policy

WHEEL_PATH = "/packages/ab/cd/ef/demo_pkg-1.0-py3-none-any.whl"


METADATA = b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n"


def make_wheel() -> bytes:
    info = "demo_pkg-1.0.dist-info"
    files = {
        "demo_pkg/__init__.py": "VALUE = 1\n",
        f"{info}/METADATA": METADATA.decode(),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return out.getvalue()


def pypi_page(fake: FakeUpstream, wheel: bytes) -> bytes:
    file = {
        "filename": "demo_pkg-1.0-py3-none-any.whl",
        "url": fake.url + WHEEL_PATH,
        "hashes": {"sha256": hashlib.sha256(wheel).hexdigest()},
        "requires-python": ">=3.8",
        "core-metadata": {"sha256": hashlib.sha256(METADATA).hexdigest()},
    }
    return json.dumps(
        {"meta": {"api-version": "1.1"}, "name": "demo-pkg", "files": [file], "versions": ["1.0"]}
    ).encode()


@pytest.fixture
def pypi(tls_upstream: FakeUpstream) -> tuple[FakeUpstream, bytes]:
    wheel = make_wheel()
    tls_upstream.put(
        "/simple/demo-pkg/", pypi_page(tls_upstream, wheel), **{"Content-Type": "application/vnd.pypi.simple.v1+json"}
    )
    tls_upstream.put(WHEEL_PATH, wheel)
    tls_upstream.put(WHEEL_PATH + ".metadata", METADATA)
    return tls_upstream, wheel


def mirror_box(
    sandbox: Callable[..., Sandboxed], fake: FakeUpstream, cert: Path, policy: Policy | None = None
) -> Sandboxed:
    return sandbox(
        policy or loopback_policy(),
        ca_file=cert,
        pypi_index=fake.url + "/simple",
        pypi_files=fake.url,
        npm_registry=fake.url,
    )


def pip_download(box: Sandboxed, dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
         "--retries", "0", "--index-url", f"{box.url}/pypi/simple/", "-d", str(dest), "demo_pkg==1.0"],
        capture_output=True, text=True, env=clean_env(PIP_CONFIG_FILE="/dev/null"), timeout=120,
    )  # fmt: skip


def test_pip_downloads_through_the_mirror_once(
    sandbox: Callable[..., Sandboxed], pypi: tuple[FakeUpstream, bytes], tls_cert: tuple[Path, Path], tmp_path: Path
) -> None:
    fake, wheel = pypi
    box = mirror_box(sandbox, fake, tls_cert[0])
    for run in ("first", "second"):
        done = pip_download(box, tmp_path / run)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (tmp_path / run / "demo_pkg-1.0-py3-none-any.whl").read_bytes() == wheel
    # the index, the wheel's metadata file (PEP 658, checked against core-metadata) and the wheel: once each
    assert (fake.hits["/simple/demo-pkg/"], fake.hits[WHEEL_PATH + ".metadata"], fake.hits[WHEEL_PATH]) == (1, 1, 1)
    assert fake.seen[0][2]["Accept"] == "application/vnd.pypi.simple.v1+json"


def test_html_form_for_clients_that_do_not_ask_for_json(
    sandbox: Callable[..., Sandboxed], pypi: tuple[FakeUpstream, bytes], tls_cert: tuple[Path, Path]
) -> None:
    fake, wheel = pypi
    box = mirror_box(sandbox, fake, tls_cert[0])
    page = fetch(box.url, box.url + "/pypi/simple/Demo_Pkg/").body.decode()
    digest = hashlib.sha256(wheel).hexdigest()
    assert f'href="/pypi/files{WHEEL_PATH}#sha256={digest}"' in page and 'data-requires-python="&gt;=3.8"' in page


def test_a_file_that_misses_its_published_digest_is_refused(
    sandbox: Callable[..., Sandboxed], pypi: tuple[FakeUpstream, bytes], tls_cert: tuple[Path, Path]
) -> None:
    fake, wheel = pypi
    fake.put(WHEEL_PATH, wheel[:-1] + b"X")
    box = mirror_box(sandbox, fake, tls_cert[0])
    fetch(box.url, box.url + "/pypi/simple/demo-pkg/", {"Accept": "application/vnd.pypi.simple.v1+json"})
    for _ in range(2):
        bad = fetch(box.url, box.url + "/pypi/files" + WHEEL_PATH)
        assert bad.status == 502 and b"does not match its published digest" in bad.body
    fake.put(WHEEL_PATH, wheel)
    assert fetch(box.url, box.url + "/pypi/files" + WHEEL_PATH).body == wheel
    assert fetch(box.url, box.url + "/pypi/files" + WHEEL_PATH).headers["X-Agentbake-Cache"] == "hit"
    assert fake.hits[WHEEL_PATH] == 3  # the tampered bodies were not kept


def test_files_without_a_known_digest_and_crafted_paths(
    sandbox: Callable[..., Sandboxed], pypi: tuple[FakeUpstream, bytes], tls_cert: tuple[Path, Path]
) -> None:
    fake, _ = pypi
    fake.put("/packages/zz/unindexed.whl", b"not listed by any index")
    box = mirror_box(sandbox, fake, tls_cert[0])
    for _ in range(2):
        assert fetch(box.url, box.url + "/pypi/files/packages/zz/unindexed.whl").body == b"not listed by any index"
    assert fake.hits["/packages/zz/unindexed.whl"] == 2  # served, never cached
    for path in (
        "/pypi/files/packages/../simple/demo-pkg/",
        "/pypi/files/packages/%2e%2e/simple/demo-pkg/",
        "/pypi/files/packages%2f..%2fsimple",
        "/pypi/simple/../../etc/passwd",
        "/pypi/simple/demo%2fpkg/",
    ):
        answer = raw(box.port, f"GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 404"), path
    assert sum(fake.hits.values()) == 2


def test_mirror_needs_its_upstreams_allowed(
    sandbox: Callable[..., Sandboxed], pypi: tuple[FakeUpstream, bytes], tls_cert: tuple[Path, Path]
) -> None:
    fake, _ = pypi
    box = mirror_box(sandbox, fake, tls_cert[0], Policy.build("allowlist", "agent", ["pypi.org"]))
    got = fetch(box.url, box.url + "/pypi/simple/demo-pkg/")
    assert got.status == 403 and b"127.0.0.1 refused in the agent phase" in got.body
    assert sum(fake.hits.values()) == 0


def test_sandbox_env_points_clients_at_the_relay_and_the_allowed_mirrors() -> None:
    config = EgressConfig(ca_file=None)
    both = sandbox_env(7000, Policy.build("allowlist", "verifier", ["pypi.org", "files.pythonhosted.org"]), config)
    assert both["https_proxy"] == both["HTTP_PROXY"] == both["ALL_PROXY"] == "http://127.0.0.1:7000"
    assert "127.0.0.1" in both["no_proxy"].split(",")
    assert both["PIP_INDEX_URL"] == both["UV_DEFAULT_INDEX"] == "http://127.0.0.1:7000/pypi/simple/"
    assert "npm_config_registry" not in both
    assert "PIP_INDEX_URL" not in sandbox_env(7000, Policy.build("allowlist", "verifier", ["pypi.org"]), config)
    public = sandbox_env(7000, Policy.build("public", "verifier"), config)
    assert public["npm_config_registry"] == "http://127.0.0.1:7000/npm/" and "PIP_INDEX_URL" in public
    assert "PIP_INDEX_URL" not in sandbox_env(7000, Policy.build("no-network", "agent"), config)


def make_tarball() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        data = json.dumps({"name": "demo-lib", "version": "1.0.0"}).encode()
        info = tarfile.TarInfo("package/package.json")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def packument(fake: FakeUpstream, name: str, tarball: bytes, *, integrity_of: bytes | None = None) -> bytes:
    base = name.rsplit("/", 1)[-1]
    digest = base64.b64encode(hashlib.sha512(integrity_of or tarball).digest()).decode()
    dist = {"tarball": f"{fake.url}/{name}/-/{base}-1.0.0.tgz", "integrity": f"sha512-{digest}"}
    version = {"name": name, "version": "1.0.0", "dist": dist}
    return json.dumps({"name": name, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}).encode()


def npm_pack(box: Sandboxed, workdir: Path) -> subprocess.CompletedProcess[str]:
    workdir.mkdir()
    return subprocess.run(
        ["npm", "pack", "demo-lib@1.0.0", "--registry", f"{box.url}/npm/", "--cache", str(workdir / "cache"),
         "--userconfig", "/dev/null", "--no-audit", "--no-fund", "--loglevel", "error"],
        cwd=workdir, capture_output=True, text=True, env=clean_env(HOME=str(workdir)), timeout=120,
    )  # fmt: skip


def test_npm_packs_through_the_mirror_once(
    sandbox: Callable[..., Sandboxed], tls_upstream: FakeUpstream, tls_cert: tuple[Path, Path], tmp_path: Path
) -> None:
    tarball = make_tarball()
    tls_upstream.put("/demo-lib", packument(tls_upstream, "demo-lib", tarball), **{"Content-Type": "application/json"})
    tls_upstream.put("/demo-lib/-/demo-lib-1.0.0.tgz", tarball)
    box = mirror_box(sandbox, tls_upstream, tls_cert[0])
    for run in ("first", "second"):
        done = npm_pack(box, tmp_path / run)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (tmp_path / run / "demo-lib-1.0.0.tgz").read_bytes() == tarball
    assert (tls_upstream.hits["/demo-lib"], tls_upstream.hits["/demo-lib/-/demo-lib-1.0.0.tgz"]) == (1, 1)


def test_npm_scoped_names_and_integrity(
    sandbox: Callable[..., Sandboxed], tls_upstream: FakeUpstream, tls_cert: tuple[Path, Path]
) -> None:
    tarball = make_tarball()
    document = packument(tls_upstream, "@scope/lib", tarball, integrity_of=b"something else")
    tls_upstream.put("/@scope%2flib", document, **{"Content-Type": "application/json"})
    tls_upstream.put("/@scope/lib/-/lib-1.0.0.tgz", tarball)
    box = mirror_box(sandbox, tls_upstream, tls_cert[0])
    page = json.loads(fetch(box.url, box.url + "/npm/@scope%2flib").body)
    link = page["versions"]["1.0.0"]["dist"]["tarball"]
    assert link == f"{box.url}/npm/@scope/lib/-/lib-1.0.0.tgz"
    assert fetch(box.url, box.url + "/npm/@scope/lib").body == fetch(box.url, box.url + "/npm/@scope%2flib").body
    assert tls_upstream.hits["/@scope%2flib"] == 1
    bad = fetch(box.url, link)
    assert bad.status == 502 and b"does not match its published digest" in bad.body


def test_uv_installs_through_the_mirror_from_its_default_index_variable(
    sandbox: Callable[..., Sandboxed], pypi: tuple[FakeUpstream, bytes], tls_cert: tuple[Path, Path], tmp_path: Path
) -> None:
    fake, _ = pypi
    box = mirror_box(sandbox, fake, tls_cert[0])
    config = EgressConfig(ca_file=None, pypi_index=fake.url + "/simple", pypi_files=fake.url, npm_registry=fake.url)
    env = sandbox_env(box.port, box.proxy.policy, config)
    uv = Path(sys.executable).with_name("uv")
    for run in ("first", "second"):
        done = subprocess.run(
            [str(uv), "pip", "install", "--no-deps", "--no-cache", "--python", sys.executable,
             "--target", str(tmp_path / run), "demo_pkg==1.0"],
            capture_output=True, text=True, timeout=120,
            env=clean_env(UV_DEFAULT_INDEX=env["UV_DEFAULT_INDEX"], no_proxy=env["no_proxy"]),
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert (tmp_path / run / "demo_pkg" / "__init__.py").read_text() == "VALUE = 1\n"
    assert fake.hits[WHEEL_PATH] == 1
