"""A download that is not what the lock pinned fails the build with a message naming the package.

Each test builds a tiny derived spec (`extends = "pi"`, in a user catalog) whose lock has one hash changed:
every step before the checked download comes from the build cache, so a cold run costs one small download."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import BuildResult, build
from agentbake.buildkit.catalog import Catalog
from agentbake.errors import BuildError
from tests.conftest import plan_default, write_spec

pytestmark = pytest.mark.docker


def tampered_spec(catalog: Catalog, user_catalog: Path, name: str, change: Callable[[dict], None]):
    lock = json.loads(catalog.load("pi").lock_path.read_text())
    change(lock)
    write_spec(user_catalog, name, 'extends = "pi"\n')
    (user_catalog / name / "lock.json").write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    return Catalog.discover(user_catalog).load(name), lock


def flip(hex_digest: str) -> str:
    return ("1" if hex_digest[0] == "0" else "0") + hex_digest[1:]


def test_a_wrong_sha512_in_the_lock_fails_naming_the_package(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog, user_catalog: Path
) -> None:
    def wrong_npm_sha512(lock: dict) -> None:
        lock["npm"]["sha512"] = flip(lock["npm"]["sha512"])

    spec, lock = tampered_spec(catalog, user_catalog, "bad-sha512", wrong_npm_sha512)
    with pytest.raises(BuildError) as info:
        build(engine, plan_default(engine, spec, catalog))
    message = str(info.value)
    npm = lock["npm"]
    assert f"npm@{npm['version']} ({npm['tarball']}) does not match its sha512 in {spec.lock_path}" in message
    assert "agentbake lock bad-sha512" in message
    assert "/tmp/npm.tgz: FAILED" in info.value.output_tail  # sha512sum itself refused it
    assert not engine.images.list(name="agentbake/bad-sha512")


def test_a_wheel_whose_hash_differs_fails_naming_the_package(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog, user_catalog: Path
) -> None:
    def wrong_wheel_hash(lock: dict) -> None:
        first = lock["python"]["packages"][0]
        first["hashes"] = [f"sha256:{flip(h.removeprefix('sha256:'))}" for h in first["hashes"]]

    spec, lock = tampered_spec(catalog, user_catalog, "bad-wheel", wrong_wheel_hash)
    with pytest.raises(BuildError) as info:
        build(engine, plan_default(engine, spec, catalog))
    package = lock["python"]["packages"][0]
    assert f"the wheel of {package['name']}=={package['version']} (https://" in str(info.value)
    assert f"does not match its sha256 in {spec.lock_path} (python.packages)" in str(info.value)
    assert not engine.images.list(name="agentbake/bad-wheel")


def test_any_other_failure_keeps_the_builders_message(
    engine: docker.DockerClient, built_images: dict[str, BuildResult], catalog: Catalog, user_catalog: Path
) -> None:
    write_spec(
        user_catalog,
        "fails",
        'extends = "pi"\nrun = ["echo \'/tmp/npm.tgz: fine\'; exit 4"]\n',
        lock_from=catalog.load("pi").lock_path,
    )
    with pytest.raises(BuildError, match="returned a non-zero code: 4") as info:
        build(engine, plan_default(engine, Catalog.discover(user_catalog).load("fails"), catalog))
    assert str(info.value).startswith("building agentbake/fails:") and "does not match" not in str(info.value)
