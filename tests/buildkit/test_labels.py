"""ImageLabels: the `dev.agentbake.*` labels written by render.py and read back by the runner, one model."""

from __future__ import annotations

import re

import pytest

from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.labels import ImageLabels
from agentbake.buildkit.render import image_labels
from agentbake.errors import AgentError

IMAGE = "agentbake/pi:0123456789ab"


@pytest.fixture(scope="module")
def written(catalog: Catalog) -> dict[str, str]:
    """The labels render.py writes on the pi image."""
    spec = catalog.load("pi")
    return image_labels(spec, {"agent": {"version": "9.9.9"}})


def test_what_is_written_reads_back_field_by_field(written: dict[str, str], catalog: Catalog) -> None:
    spec = catalog.load("pi")
    labels = ImageLabels.from_labels(IMAGE, {**written, "dev.agentbake.base.suite": "trixie", "other": "x"})
    assert (labels.agent_name, labels.agent_package, labels.agent_version) == ("Pi", spec.agent.package, "9.9.9")
    assert (labels.spec_hash, labels.user, labels.uid) == (spec.spec_hash, spec.user.name, spec.user.uid)
    assert labels.paths == {
        "workdir": labels.home + "/workdir",
        "task": labels.home + "/task",
        "logs_agent": labels.home + "/logs/agent",
        "logs_verifier": labels.home + "/logs/verifier",
    }
    ours = {key: value for key, value in written.items() if key.startswith("dev.agentbake.")}
    assert labels.to_labels() == ours
    assert ImageLabels.key("agent_package") == "dev.agentbake.agent.package"
    assert ImageLabels.path_keys()["logs_agent"] == "dev.agentbake.dir.logs_agent"


def test_missing_labels_name_the_image_and_each_label(written: dict[str, str]) -> None:
    labels = {k: v for k, v in written.items() if k not in ("dev.agentbake.dir.logs_agent", "dev.agentbake.python")}
    message = f"image '{IMAGE}' lacks the label(s) dev.agentbake.python, dev.agentbake.dir.logs_agent: it was not built"
    with pytest.raises(AgentError, match=re.escape(message) + ".*agentbake build"):
        ImageLabels.from_labels(IMAGE, labels)
    with pytest.raises(AgentError, match=r"lacks the label.*dev\.agentbake\.agent\.package"):
        ImageLabels.from_labels(IMAGE, {})


def test_a_malformed_label_is_named(written: dict[str, str]) -> None:
    with pytest.raises(AgentError, match=rf"image '{re.escape(IMAGE)}' has malformed label\(s\): dev\.agentbake\.uid:"):
        ImageLabels.from_labels(IMAGE, {**written, "dev.agentbake.uid": "agent"})
