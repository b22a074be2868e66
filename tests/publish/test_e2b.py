"""E2B templates through the real `e2b` SDK against a loopback fake control plane."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.render import Rendered, render
from agentbake.errors import PublishError
from agentbake.publish.e2b import environment_template, publish_environment, publish_template, template_name
from agentbake.publish.registry import Credentials
from tests.publish.fake_e2b import FakeE2B, FakeE2BServer

IMAGE_REF = "127.0.0.1:5000/agentbake/claude-code:abc123def456"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeE2B]:
    with FakeE2BServer() as state:
        monkeypatch.setenv("E2B_API_URL", state.url)
        monkeypatch.setenv("E2B_API_KEY", "e2b_test_key")
        yield state


@pytest.fixture(scope="module")
def rendered(catalog: Catalog) -> Rendered:
    return render(catalog.load("claude-code"), catalog.templates_dir)


def test_from_image_sends_the_reference_credentials_name_tags_and_resources(fake: FakeE2B, rendered) -> None:
    logs: list[str] = []
    made = publish_template(
        rendered, "abc123def456", image_reference=IMAGE_REF, credentials=Credentials("bot", "s3cret"), log=logs.append
    )
    assert (made.template, made.action) == ("claude-code:abc123def456", "pushed")
    [create] = fake.bodies("POST", "/v3/templates")
    assert create == {"name": "claude-code", "tags": ["abc123def456", "latest"], "cpuCount": 2, "memoryMB": 2048}
    [trigger] = fake.bodies("POST", "/v2/templates/")
    assert trigger["fromImage"] == IMAGE_REF
    assert trigger["fromImageRegistry"] == {"type": "registry", "username": "bot", "password": "s3cret"}
    steps = [(step["type"], step["args"]) for step in trigger["steps"]]
    assert ("USER", ["agent"]) in steps and ("WORKDIR", ["/home/agent/workdir"]) in steps
    assert all(r.headers.get("x-api-key") == "e2b_test_key" for r in fake.requests if not r.path.startswith("/upload"))
    assert any("pulling image" in line for line in logs)  # build logs streamed
    assert not any("s3cret" in line for line in logs)
    assert fake.templates["claude-code"]["latest"] == fake.templates["claude-code"]["abc123def456"]


def test_an_existing_name_and_tag_is_skipped_and_latest_moved_to_it(fake: FakeE2B, rendered) -> None:
    fake.templates["claude-code"] = {
        "abc123def456": "11111111-1111-1111-1111-111111111111",
        "latest": "00000000-0000-0000-0000-000000000000",
    }
    made = publish_template(rendered, "abc123def456", image_reference=IMAGE_REF)
    assert made.action == "skipped"
    assert fake.bodies("POST", "/v3/templates") == []
    assert fake.bodies("POST", "/templates/tags") == [{"target": "claude-code:abc123def456", "tags": ["latest"]}]


def test_from_dockerfile_uploads_the_context_and_sends_the_dockerfiles_steps(fake: FakeE2B, rendered) -> None:
    made = publish_template(rendered, "abc123def456", image_reference=None)
    assert made.action == "pushed"
    [trigger] = fake.bodies("POST", "/v2/templates/")
    assert trigger["fromImage"] == rendered.base_image and "fromImageRegistry" not in trigger
    types = [step["type"] for step in trigger["steps"]]
    assert "RUN" in types and "COPY" in types and types.count("USER") >= 1
    copies = [step for step in trigger["steps"] if step["type"] == "COPY"]
    assert fake.uploads and len(fake.bodies("GET", "/templates/claude-code/files/")) == len(copies)


@pytest.mark.parametrize(
    ("call", "status", "message"),
    [
        ("POST /v3/templates", 401, "the API key was refused"),
        ("GET /templates/aliases", 401, "the API key was refused"),
        ("POST /v2/templates/", 404, "building template claude-code:abc123def456"),
        ("POST /v3/templates", 409, "scripted 409"),
        ("POST /v3/templates", 429, "rate limited"),
        ("GET /templates/claude-code/builds/", 500, "building template claude-code:abc123def456"),
    ],
)
def test_error_statuses_become_clear_errors(fake: FakeE2B, rendered, call: str, status: int, message: str) -> None:
    fake.fail[call] = status
    with pytest.raises(PublishError, match=message):
        publish_template(rendered, "abc123def456", image_reference=IMAGE_REF)


def test_a_build_that_ends_in_error_reports_the_reason(fake: FakeE2B, rendered) -> None:
    fake.build_ends_in_error = "image pull failed: manifest unknown"
    with pytest.raises(PublishError, match="the build failed: image pull failed: manifest unknown"):
        publish_template(rendered, "abc123def456", image_reference=IMAGE_REF)
    assert "claude-code" not in fake.templates


def test_no_api_key_says_what_to_set(monkeypatch: pytest.MonkeyPatch, rendered) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(PublishError, match="E2B_API_KEY is not set"):
        publish_template(rendered, "abc123def456", image_reference=IMAGE_REF)


def test_template_names_are_what_e2b_accepts() -> None:
    assert template_name("claude-code") == "claude-code"
    assert template_name("My.Image_2") == "my-image-2"


ENVIRONMENT = "ab12" * 16


def until(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_two_publishers_of_one_environment_one_builds_and_the_other_waits_until_ready(fake: FakeE2B) -> None:
    """The name exists as soon as the first build starts (as on E2B): the second publisher must wait for that
    build's ready state, not take the name for a template, and must not start a build of its own."""
    fake.hold = threading.Event()
    name, _, tag = environment_template(ENVIRONMENT).partition(":")
    done: dict[str, tuple[str, dict[str, str]]] = {}

    def publish(who: str) -> None:
        made = publish_environment(IMAGE_REF, ENVIRONMENT, user="root", workdir="/app", poll_s=0.05)
        done[who] = (made.action, dict(fake.templates.get(name, {})))  # what was ready when it returned

    first = threading.Thread(target=publish, args=("first",))
    first.start()
    until(lambda: any(b["status"] == "building" for b in fake.builds.values()), "the first build to start")
    second = threading.Thread(target=publish, args=("second",))
    second.start()
    until(lambda: len(fake.bodies("GET", f"/templates/{name}/builds/")) >= 6, "both publishers to poll the build")
    assert second.is_alive() and first.is_alive()  # the name exists, nothing is ready: both wait
    assert name not in fake.templates
    fake.hold.set()
    first.join(60)
    second.join(60)
    assert sorted(action for action, _ in done.values()) == ["pushed", "waited"]
    assert all(tag in ready for _, ready in done.values())  # neither returned before the tag was ready
    assert len(fake.bodies("POST", "/v3/templates")) == 1  # one build in all
    again = publish_environment(IMAGE_REF, ENVIRONMENT, user="root", workdir="/app")
    assert (again.action, again.template) == ("skipped", f"{name}:{tag}")


def test_a_waiter_builds_when_the_build_it_waited_for_fails(fake: FakeE2B) -> None:
    name = environment_template(ENVIRONMENT).partition(":")[0]
    fake.builds["11111111-1111-1111-1111-111111111111"] = {"name": name, "tags": [], "polls": 5, "status": "error"}
    fake.builds["22222222-2222-2222-2222-222222222222"] = {"name": name, "tags": [], "polls": 1, "status": "building"}
    fake.failing.add("22222222-2222-2222-2222-222222222222")
    made = publish_environment(IMAGE_REF, ENVIRONMENT, user="root", workdir="/app", poll_s=0.05)
    assert made.action == "pushed"
    assert len(fake.bodies("POST", "/v3/templates")) == 1
    assert fake.bodies("GET", f"/templates/{name}/builds/22222222")  # it waited for that build first
