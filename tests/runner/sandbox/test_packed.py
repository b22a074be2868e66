"""packed.py: log paths packed by a root command and extracted from its output make exactly what the backend's copy
of the same paths makes (files, notes, the budget spent in the same order); what cannot be packed is left to it."""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

import pytest

from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.sandbox import DockerSandbox
from agentbake.runner.harness.commands import RootCommand
from agentbake.runner.sandbox import SandboxRequest
from agentbake.runner.sandbox.copyout import CopyBudget
from agentbake.runner.sandbox.packed import MAX_PACKED_BYTES, THROUGH_AGENT_LINK, PackedLogs

SCRATCH = "/tmp/agentbake-packtest"  # root-only, as the harness's scratch dir
# As the agent: every kind of entry copy-out must refuse or cut, names in an order a directory listing does not keep.
AGENT_TREE = r"""set -e
cd "$HOME" && mkdir -p logs/sub/deeper logs/empty other/agent
for n in b B a a.txt a-z 'with space' "$(printf 'caf\351')" Zed; do head -c 3000 /dev/urandom > "logs/$n"; done
echo deep > logs/sub/deeper/file.txt
ln -s /etc/shadow logs/shadow && ln -s /tmp/agentbake-packtest logs/scratch && ln -s / logs/root
ln -s a logs/relative && ln -s /nowhere logs/dangling && ln logs/a logs/sub/hard && mkfifo logs/fifo
printf 'x' > logs/sub/one && chmod 4755 logs/sub/one
head -c 3000000 /dev/urandom > other/agent/big.bin
ln -s "$HOME/other" linked-parent && ln -s "$HOME/logs" linked-logs
"""


@pytest.fixture(scope="module")
def sandbox(backend: DockerBackend, image: str) -> DockerSandbox:
    sandbox = backend.create(SandboxRequest(image=image, rollout_id="test-packed"))
    assert sandbox.exec(AGENT_TREE).exit_code == 0
    assert sandbox.exec(f"mkdir -m 700 {SCRATCH} && echo secret > {SCRATCH}/setup.sh", user="root").exit_code == 0
    # The image's own link (root's) on a log path's way, as a distribution's /home -> /var/home
    assert sandbox.exec(f"ln -s {sandbox.home}/other /image-linked", user="root").exit_code == 0
    return sandbox


def packed_by(sandbox: DockerSandbox, paths: list[str], before: str = "true") -> tuple[PackedLogs, str, int]:
    """`paths` packed by the part after a root command's part `before`: the packs, what `before` printed, the exit
    status."""
    packed = PackedLogs(SCRATCH)
    command = RootCommand().then("before", before).then("pack", packed.pack(paths)).render()
    ran = sandbox.exec(["sh", "-c", command.script], user="root")
    parts = command.split(ran.stdout)
    packed.take(parts.get("pack"), paths)
    return packed, parts["before"], ran.exit_code


def collected(sandbox: DockerSandbox, paths: list[str], packed: PackedLogs, out: Path, budget: CopyBudget) -> tuple:
    sandbox.copy_out_all([(path, out / str(i)) for i, path in enumerate(paths)], budget, packed.archives)
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    dirs = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_dir())
    assert not any(p.is_symlink() for p in out.rglob("*"))
    return budget.finish(), files, dirs


@pytest.mark.docker
@pytest.mark.parametrize(
    "budget",
    [CopyBudget, lambda: CopyBudget(bytes=14_000, files=9)],  # whole; cut mid-folder (name order decides what)
    ids=["whole", "cut"],
)
def test_a_packed_copy_makes_what_the_backends_copy_makes(sandbox: DockerSandbox, tmp_path: Path, budget) -> None:
    logs = f"{sandbox.home}/logs"
    paths = [logs, f"{logs}/sub/deeper/file.txt", "/nowhere", f"{logs}/sub"]
    packed, rest, status = packed_by(sandbox, paths, before="echo before")
    assert (rest, status) == ("before\n", 0)  # the output as it was
    assert set(packed.archives) == set(paths) and packed.archives["/nowhere"] is None

    copy = collected(sandbox, paths, packed, tmp_path / "packed", budget())
    assert copy == collected(sandbox, paths, PackedLogs(SCRATCH), tmp_path / "engine", budget())
    notes = "\n".join(copy[0])
    for left_out in ("shadow: a symlink to '/etc/shadow'", f"scratch: a symlink to '{SCRATCH}'", "fifo: a device"):
        assert left_out in notes or "copy stopped" in notes
    assert not any(b"secret" in data for data in copy[1].values())
    assert sandbox.exec(f"ls {SCRATCH}", user="root").stdout == "setup.sh\n"  # the pack's own file is gone


@pytest.mark.docker
def test_what_cannot_be_packed_is_left_to_the_backend(sandbox: DockerSandbox, tmp_path: Path) -> None:
    home = sandbox.home
    paths = [
        "/image-linked/agent",  # the image's link on its way: copied as the backend always copied it
        f"{home}/other/agent",  # more than MAX_PACKED_BYTES
        "relative",
        f"{home}/logs/sub",  # still packed: the large ones took no room
    ]
    packed, _, _ = packed_by(sandbox, paths)
    assert list(packed.archives) == [f"{home}/logs/sub"]

    budget = CopyBudget()
    notes, files, _ = collected(sandbox, paths, packed, tmp_path, budget)
    assert notes[-1].startswith("relative: not collected:") and "must be absolute" in notes[-1]
    assert len(files["0/big.bin"]) == len(files["1/big.bin"]) == 3_000_000 > MAX_PACKED_BYTES
    assert files["3/deeper/file.txt"] == b"deep\n"


@pytest.mark.docker
def test_a_path_through_a_link_the_agent_made_is_not_collected(sandbox: DockerSandbox, tmp_path: Path) -> None:
    """The engine's copy would follow a link in the parent folders: the agent could point the harness anywhere."""
    home = sandbox.home
    paths = [f"{home}/linked-logs", f"{home}/linked-parent/agent", f"{home}/logs/sub"]
    packed, _, _ = packed_by(sandbox, paths)
    assert packed.archives[paths[0]] == packed.archives[paths[1]] == THROUGH_AGENT_LINK

    notes, files, _ = collected(sandbox, paths, packed, tmp_path, CopyBudget())
    refused = "not collected: it is, or passes through, a link the agent made (links are never followed)"
    assert notes == [f"{paths[0]}: {refused}", f"{paths[1]}: {refused}"]
    assert list(files) == ["2/deeper/file.txt", "2/hard", "2/one"]  # the other path still collected
    # what the engine's copy alone did with the same paths: followed the link on the way
    _, engine_files, _ = collected(sandbox, paths[1:2], PackedLogs(SCRATCH), tmp_path / "engine", CopyBudget())
    assert "0/big.bin" in engine_files


@pytest.mark.docker
def test_a_root_link_made_after_the_agent_started_is_the_agents(sandbox: DockerSandbox, tmp_path: Path) -> None:
    """A root agent's links are root's: told from the image's own (`/image-linked`, older) by their change time."""
    marker = f"{SCRATCH}/started"
    made = f"touch {marker} && stat -c %.9Z {marker} && sleep 1.1 && ln -s {sandbox.home}/other /root-agent-linked"
    started = sandbox.exec(made, user="root")
    assert started.exit_code == 0
    paths = ["/root-agent-linked/agent", "/image-linked/agent"]
    packed = PackedLogs(SCRATCH, since=f"@{started.stdout.strip()}")
    command = RootCommand().then("pack", packed.pack(paths)).render()
    packed.take(command.split(sandbox.exec(["sh", "-c", command.script], user="root").stdout).get("pack"), paths)
    assert packed.archives == {paths[0]: THROUGH_AGENT_LINK}  # the image's: left to the backend's file API
    missing = PackedLogs(SCRATCH, since="@0")  # the agent started at the epoch: every root link is refused
    command = RootCommand().then("pack", missing.pack(paths[1:])).render()
    missing.take(command.split(sandbox.exec(["sh", "-c", command.script], user="root").stdout).get("pack"), paths[1:])
    assert missing.archives == {paths[1]: THROUGH_AGENT_LINK}


@pytest.mark.docker
def test_the_pack_keeps_the_commands_exit_status_and_packs_nothing_after_a_failure(sandbox: DockerSandbox) -> None:
    paths = [f"{sandbox.home}/logs"]
    packed, rest, status = packed_by(sandbox, paths, before="echo failing; (exit 5)")
    assert (rest, status, packed.archives) == ("failing\n", 5, {})
    assert packed_by(sandbox, paths, before="(exit 0)")[2] == 0


def test_a_line_not_whole_leaves_its_path_to_the_backend() -> None:
    archive = tarfile_bytes()
    line = f"+{base64.b64encode(archive).decode()}"
    for answers, kept in [
        ([line, "absent"], {"/a": archive, "/b": None}),
        (["linked", "-"], {"/a": THROUGH_AGENT_LINK}),  # refused; the image's link: left to the backend
        ([line[:-4], "-"], {}),  # cut short
        ([f"{line} -", "absent"], {"/b": None}),  # tar failed
        ([f"+{base64.b64encode(archive[:1024]).decode()}", "absent"], {"/b": None}),  # not ending as a tar does
        ([f"+{base64.b64encode(bytes(MAX_PACKED_BYTES + 512)).decode()}", "absent"], {"/b": None}),  # cut by head
        (["+not base64!", "absent"], {"/b": None}),
        ([line], {}),  # a line missing: which path it is for is unknown
    ]:
        packs = PackedLogs(SCRATCH)
        packs.take("\n".join(answers) + "\n", ["/a", "/b"])
        assert packs.archives == kept
    not_run = PackedLogs(SCRATCH)
    not_run.take(None, ["/a"])
    assert not_run.archives == {}


def tarfile_bytes() -> bytes:
    """A whole archive of one small file, as tar writes it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("log.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    return buffer.getvalue()
