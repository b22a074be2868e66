"""`agentbake prune`: stale tags of catalog images go, the current ones and everything else stay."""

from __future__ import annotations

import json

import docker
import pytest
from click.testing import CliRunner

from agentbake.buildkit.build import BuildResult, context_tar
from agentbake.cli import main

pytestmark = pytest.mark.docker


def test_prune_removes_only_stale_catalog_tags(
    engine: docker.DockerClient, built_images: dict[str, BuildResult]
) -> None:
    current = engine.images.get(built_images["opencode"].tag)
    current.tag("agentbake/opencode", "000000000000")  # an old tag of the same image
    engine.api.import_image_from_data(context_tar({"old": b"x"}), repository="agentbake/pi:111111111111")
    engine.api.import_image_from_data(context_tar({"other": b"x"}), repository="agentbake-test/unrelated:1")
    try:
        dry = CliRunner().invoke(main, ["prune", "--dry-run", "--json"])
        assert dry.exit_code == 0, dry.output
        listed = {r["tag"]: r for r in map(json.loads, dry.stdout.splitlines())}
        assert {"agentbake/opencode:000000000000", "agentbake/pi:111111111111"} <= set(listed)
        assert not any(r["removed"] for r in listed.values())
        assert engine.images.get("agentbake/pi:111111111111")  # a dry run removes nothing

        result = CliRunner().invoke(main, ["prune", "--json"])
        removed = {r["tag"] for r in map(json.loads, result.stdout.splitlines()) if r["removed"]}
        assert {"agentbake/opencode:000000000000", "agentbake/pi:111111111111"} <= removed
        for name, built in built_images.items():
            assert engine.images.get(built.tag).id == built.id
            assert engine.images.get(f"agentbake/{name}:latest").id == built.id
        assert engine.images.get("agentbake-test/unrelated:1")  # not a catalog repository
    finally:
        engine.images.remove("agentbake-test/unrelated:1", force=True)
