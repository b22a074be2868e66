"""The runnable image on the real engine: the agent's user (the image's, or the one a run names), the workdir as
the image made it, the harness's labels; and a clear error naming the task for every image agentbake cannot run."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import context_tar
from agentbake.buildkit.builders import run_build
from agentbake.errors import TaskImageError
from agentbake.tasks.bundle import BUNDLE_PYTHON
from agentbake.tasks.image import TaskImage, build_task_image
from agentbake.tasks.runnable import AgentUser, choose_agent_user, runnable_image, unsafe_to_own
from tests.tasks.conftest import BOOKWORM, TRIXIE, unique, write_task

pytestmark = pytest.mark.docker

ROOT_PASSWD = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"


@pytest.mark.parametrize(
    ("path", "unsafe"),
    [
        ("/app", False),
        ("/usr/src/app", False),
        ("/var/www", False),
        ("/root/project", False),
        ("/srv", False),
        ("/etc", True),
        ("/etc/nginx", True),
        ("/usr", True),
        ("/usr/lib/x", True),
        ("/root", True),
        ("/var/lib/app", True),
        ("/tmp", True),
        ("/opt/agentbake", True),
    ],
)
def test_a_non_root_agent_never_owns_what_root_runs(path: str, unsafe: bool) -> None:
    """Owning /etc would let the agent write /etc/ld.so.preload, which every root process (the verifier) loads."""
    assert unsafe_to_own(path) is unsafe


def test_choose_agent_user() -> None:
    assert choose_agent_user(ROOT_PASSWD, "root") == AgentUser("root", 0, 0, "/root")
    assert choose_agent_user("", "0") == AgentUser("root", 0, 0, "/root")
    ubuntu = ROOT_PASSWD + "ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash\n"
    assert choose_agent_user(ubuntu, "ubuntu") == AgentUser("ubuntu", 1000, 1000, "/home/ubuntu")
    assert choose_agent_user(ubuntu, "1000") == AgentUser("ubuntu", 1000, 1000, "/home/ubuntu")
    homeless = ROOT_PASSWD + "svc:x:1000:50::/nonexistent:/usr/sbin/nologin\n"
    assert choose_agent_user(homeless, "svc") == AgentUser("svc", 1000, 50, "/home/svc")
    in_etc = ROOT_PASSWD + "svc:x:1000:50::/etc/svc:/bin/sh\n"  # it gets dirs in its home: never a system dir
    assert choose_agent_user(in_etc, "svc").home == "/home/svc"
    with pytest.raises(TaskImageError, match="no user 'agent' in its /etc/passwd"):
        choose_agent_user(ROOT_PASSWD, "agent")


def _task_image(
    engine: docker.DockerClient,
    tmp_path: Path,
    cleanup: list[str],
    name: str,
    dockerfile: str,
    files: dict[str, str] | None = None,
) -> TaskImage:
    env = write_task(tmp_path, name, dockerfile=dockerfile, files=files) / "environment"
    image = build_task_image(engine, name, env, timeout_s=300)
    cleanup.append(image.ref)
    return image


def _run(engine: docker.DockerClient, image: str, script: str, user: str = "1000") -> str:
    return engine.containers.run(image, ["sh", "-c", script], user=user, remove=True, network_mode="none").decode()


def test_terminal_bench_like_image_runs_its_agent_as_root_and_keeps_roots_app(
    engine: docker.DockerClient, bases: tuple[str, str], tmp_path: Path, cleanup: list[str]
) -> None:
    """No USER (every Terminal-Bench image): the agent is root, as Harbor runs it, and /app stays as the image
    made it (root's), so a root verifier's git finds no dubious ownership there."""
    name = unique("tb-like")
    dockerfile = f"FROM {BOOKWORM}\nWORKDIR /app\nCOPY data.txt /app/\nRUN mkdir /app/sub && echo x > /app/sub/f\n"
    image = _task_image(engine, tmp_path, cleanup, name, dockerfile, {"data.txt": "input\n"})
    runnable = runnable_image(engine, name, image)
    cleanup.append(runnable.tag)
    assert runnable.tag.startswith(f"agentbake-run/{name}:") and not runnable.cached
    labels = runnable.labels
    assert (labels["dev.agentbake.user"], labels["dev.agentbake.uid"], labels["dev.agentbake.home"]) == (
        "root",
        "0",
        "/root",
    )
    assert labels["dev.agentbake.dir.workdir"] == "/app" and labels["dev.agentbake.python"] == BUNDLE_PYTHON
    assert labels["dev.agentbake.task.image"] == image.ref
    attrs = engine.api.inspect_image(runnable.id)
    assert attrs["Config"]["Labels"]["dev.agentbake.dir.task"] == "/root/task"
    assert not attrs["Config"]["Entrypoint"] and attrs["Config"]["WorkingDir"] == "/app"
    script = "stat -c %U /app /app/sub /app/sub/f /root/logs/agent; test ! -e /tmp/agentbake-prepare.sh && echo clean"
    assert _run(engine, runnable.tag, script, user="0").split() == ["root"] * 4 + ["clean"]
    assert runnable_image(engine, name, image).cached


def test_the_images_user_or_the_one_a_run_names(
    engine: docker.DockerClient, bases: tuple[str, str], tmp_path: Path, cleanup: list[str]
) -> None:
    """An image with a USER runs its agent as that user; `[agent] user` / `--agent-user` name another (its dirs
    made for it, each such user a runnable image of its own); a user the image lacks is refused, naming the key."""
    name = unique("ubuntu-like")
    # ubuntu:24.04 ships a user `ubuntu` at uid 1000; this image names no WORKDIR either.
    dockerfile = f"FROM {TRIXIE}\nRUN useradd -u 1000 -m -s /bin/bash ubuntu && useradd -m svc\nUSER svc\n"
    image = _task_image(engine, tmp_path, cleanup, name, dockerfile)
    own = runnable_image(engine, name, image)
    cleanup.append(own.tag)
    assert (own.labels["dev.agentbake.user"], own.labels["dev.agentbake.home"]) == ("svc", "/home/svc")
    assert own.labels["dev.agentbake.dir.workdir"] == "/app"
    named = runnable_image(engine, name, image, user="1000")
    cleanup.append(named.tag)
    assert named.tag != own.tag and named.labels["dev.agentbake.user"] == "ubuntu"
    seen = _run(engine, named.tag, "id -un; touch /app/x && stat -c %U /app /home/ubuntu/logs/agent")
    assert seen.split() == ["ubuntu", "ubuntu", "ubuntu"]  # /app was missing: made, the agent's
    with pytest.raises(TaskImageError) as info:
        runnable_image(engine, name, image, user="agent", user_source="--agent-user")
    assert f"task {name}: image {image.ref}: --agent-user 'agent': no user 'agent' in its /etc/passwd" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("dockerfile", "expected"),
    [
        (f"FROM {BOOKWORM}\nRUN touch /etc/alpine-release\n", "is Alpine (musl libc)"),
        ("FROM scratch\nCOPY data.txt /data.txt\n", "has no glibc (/lib64/ld-linux-x86-64.so.2 is missing)"),
        (
            f"FROM {BOOKWORM}\nRUN rm /usr/bin/bash /usr/bin/timeout\n",
            "lacks what agentbake's harness runs: bash timeout",
        ),
        (f"FROM {BOOKWORM}\nRUN rm /usr/bin/sh /bin/sh 2>/dev/null; rm -f /usr/bin/dash\n", "it has no /bin/sh"),
        (f"FROM {BOOKWORM}\nUSER 4242\n", "its USER '4242': no user '4242' in its /etc/passwd"),
    ],
    ids=["alpine", "no-glibc", "missing-tools", "no-sh", "unknown-user"],
)
def test_unsupported_images_are_refused_naming_the_task(
    engine: docker.DockerClient,
    bases: tuple[str, str],
    tmp_path: Path,
    cleanup: list[str],
    dockerfile: str,
    expected: str,
) -> None:
    name = unique("unsupported")
    image = _task_image(engine, tmp_path, cleanup, name, dockerfile, {"data.txt": "x\n"})
    with pytest.raises(TaskImageError) as info:
        runnable_image(engine, name, image)
    assert f"task {name}: image {image.ref}" in str(info.value) and expected in str(info.value)


def test_non_amd64_image_is_refused(engine: docker.DockerClient, cleanup: list[str]) -> None:
    """An image whose config says arm64 (made by loading a saved image with its architecture changed)."""
    tag = f"agentbake-test/{unique('arm64')}:1"
    built = run_build(engine, context_tar({"Dockerfile": b"FROM scratch\nCOPY f /f\n", "f": b"x"}), tag)
    cleanup.append(tag)
    saved = io.BytesIO(b"".join(engine.images.get(built).save()))
    out = io.BytesIO()
    with tarfile.open(fileobj=saved) as src, tarfile.open(fileobj=out, mode="w") as dst:
        manifest = json.load(src.extractfile("manifest.json"))  # type: ignore[arg-type]
        config_name = manifest[0]["Config"]
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name == config_name:
                config = json.loads(data or b"{}")
                config["architecture"] = "arm64"
                data = json.dumps(config).encode()
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    arm = f"agentbake-test/{unique('arm64')}:2"
    (loaded,) = engine.images.load(out.getvalue())
    loaded.tag(arm)
    cleanup.append(arm)
    assert engine.api.inspect_image(arm)["Architecture"] == "arm64"
    with pytest.raises(TaskImageError, match=r"task arm-task: image .* is for linux/arm64; agentbake runs linux/amd64"):
        runnable_image(engine, "arm-task", TaskImage(arm, loaded.id, "docker_image", True, 0.0))
