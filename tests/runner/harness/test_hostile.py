"""Hostile tasks through the real engine: `--oracle` runs solve.sh as the agent, and solve.sh is the
attack. Each attack ends with its reward and status while the runner's memory, its descriptors, the host's disk
and the rest of the batch stay unharmed. Every group runs as one batch beside a healthy task."""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.harness.outcome import HarnessOutcome
from agentbake.runner.harness.upload import ENV_PREFIX
from agentbake.runner.harness.verifier import PROCESSES
from agentbake.runner.harness.verifier_phase import VerifierPhase, clear_the_way
from agentbake.runner.result import RolloutResult, Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.runner.sandbox import SandboxRequest
from agentbake.runner.sandbox.copyout import CopyBudget
from agentbake.runner.sandbox.packed import PackedLogs
from agentbake.tasks import load_task
from tests.resources import Peak
from tests.runner.probes import STILL_OPEN
from tests.runner.rollouts import copy_example, leftovers, reward_if, write_task

pytestmark = pytest.mark.docker

MiB = 1024 * 1024
LOGS = '"$HOME/logs/agent"'  # the claude-code image's agent-log dir (label dev.agentbake.dir.logs_agent)
NOT_SOLVED = reward_if("[ -f solved.txt ]")


@pytest.fixture(scope="module")
def runner(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    backend = DockerBackend(DockerConfig(memory_mb=512, cpus=1, pids_limit=256))
    out = tmp_path_factory.mktemp("out")
    with Runner(RunnerConfig(image=image, oracle=True, out_dir=out), backend) as runner:
        yield runner
    backend.close()


def run_beside_a_healthy_task(
    runner: Runner, root: Path, hostile: dict[str, str | tuple[str, str, str]]
) -> dict[str, RolloutResult]:
    """The hostile tasks (name -> solve.sh, judged by NOT_SOLVED; or (task.toml, solve.sh, test.sh)) and the
    write-file example in one batch; the example must end ok with reward 1."""
    tasks = []
    for name, spec in hostile.items():
        toml, solve, test = spec if isinstance(spec, tuple) else ("", spec, NOT_SOLVED)
        path = write_task(root, name, solve=solve, test=test, toml=toml)
        (path / "environment").mkdir(exist_ok=True)
        (path / "environment" / "keep.txt").write_text("the task's file\n")
        tasks.append(load_task(path))
    tasks.append(load_task(copy_example(root, "write-file", "healthy")))
    results = {r.task: r for r in runner.run_batch(tasks, concurrency=4)}
    assert (results["healthy"].status, results["healthy"].reward) == (Status.OK, 1.0), results["healthy"].error
    return results


def disk_use(folder: Path) -> int:
    """Bytes the files under `folder` occupy on the host's disk (allocated blocks, so a sparse file counts what
    it uses)."""
    return sum(path.lstat().st_blocks * 512 for path in folder.rglob("*"))


COPY_OUT = {
    # A 2 GiB sparse file: once 4 GiB on the host and 4.15 GB of runner memory (the archive held whole).
    "sparse-log": f"mkdir -p {LOGS} && truncate -s 2G {LOGS}/sparse.bin && echo kept > {LOGS}/small.txt\n",
    # Twice the files a rollout may collect (CopyBudget.files): once every one of 200k became an inode in out/.
    "many-logs": f"mkdir -p {LOGS}/many && cd {LOGS}/many && seq 20000 | xargs touch\n",
    # Links in the log dir: once the whole collection stopped there (status ok, log lost).
    "linked-logs": (
        f"mkdir -p {LOGS}/sub && ln -s /etc/shadow {LOGS}/shadow && ln -s / {LOGS}/root && "
        f"ln -s /nowhere {LOGS}/dangling && ln {LOGS}/oracle.log {LOGS}/hard 2>/dev/null; "
        f"mkfifo {LOGS}/fifo && echo real > {LOGS}/sub/real.txt && "
        f'for d in /tmp/agentbake-*; do [ ! -d "$d" ] || ln -s "$d" {LOGS}/scratch; done\n'  # the harness's scratch dir
    ),
    # The agent-log dir itself a link to the harness's root-only scratch dir: neither packed nor followed.
    "logs-dir-linked": (
        f"until [ -e {LOGS}/oracle.log ] && [ -e {LOGS}/oracle.stderr.log ]; do sleep 0.1; done\n"  # the tees opened
        f'mv {LOGS} {LOGS}.moved && for d in /tmp/agentbake-*; do [ ! -d "$d" ] || ln -s "$d" {LOGS}; done\n'
    ),
    # The agent-log dir's parent a link to /home, so the log dir resolves to the agent's home: Docker's archive copy
    # follows a link on a path's way, so the harness would collect whatever folder the agent points it at.
    "logs-parent-linked": (
        f"until [ -e {LOGS}/oracle.log ] && [ -e {LOGS}/oracle.stderr.log ]; do sleep 0.1; done\n"
        'mv "$HOME/logs" "$HOME/logs.moved" && ln -s /home "$HOME/logs"\n'
        "echo home-file > ~/in-home.txt\n"
    ),
    # 1 GiB on stdout: once 3.1 GB of runner memory.
    "loud-agent": "head -c 1073741824 /dev/zero | tr '\\0' 'y'\n",
}


def test_copy_out_attacks_are_cut_with_notes_and_cost_the_host_little(
    runner: Runner, engine: docker.DockerClient, tmp_path: Path
) -> None:
    with Peak() as peak:
        results = run_beside_a_healthy_task(runner, tmp_path, COPY_OUT)
    print(f"\ncopy-out attacks: +{peak.added_mib:.0f} MiB resident (peak), +{peak.added_fds} descriptors (peak)")
    budget = CopyBudget()
    for name in COPY_OUT:
        result = results[name]
        assert (result.status, result.reward) == (Status.OK, 0.0), (name, result.error)
        assert disk_use(result.out_dir) < budget.bytes + 16 * MiB, name
    assert peak.added_mib < 600  # the 2 GiB and 1 GiB streams are never held whole

    sparse = results["sparse-log"]
    agent = sparse.out_dir / "agent"
    assert (agent / "small.txt").read_text() == "kept\n"
    assert (agent / "sparse.bin").stat().st_size == budget.file_bytes
    assert f"/home/agent/logs/agent/sparse.bin: {2048 * MiB} bytes, cut at {budget.file_bytes}" in "\n".join(
        sparse.notes
    )

    many = results["many-logs"]
    assert sum(1 for _ in (many.out_dir / "agent").rglob("*")) <= budget.files
    assert any("copy stopped at the most files a rollout may collect" in note for note in many.notes)

    linked = results["linked-logs"]
    agent = linked.out_dir / "agent"
    assert (agent / "sub" / "real.txt").read_text() == "real\n" and (agent / "oracle.log").is_file()
    assert not any(path.is_symlink() for path in agent.rglob("*"))
    notes = "\n".join(linked.notes)
    for line in ("shadow: a symlink to '/etc/shadow'", "fifo: a device, FIFO", "scratch: a symlink to '/tmp/agentb"):
        assert line in notes
    # the link to / was removed before the verifier ran (it reaches /tests): listed, not collected
    removed = (linked.out_dir / "verifier" / "removed-links.txt").read_text()
    assert removed == '"/home/agent/logs/agent/root" -> "/"\n' and "removed 1 symlinks" in notes
    assert (linked.out_dir / "verifier" / "stdout.txt").exists()

    refused = "not collected: it is, or passes through, a link the agent made (links are never followed)"
    for name in ("logs-parent-linked", "logs-dir-linked"):
        linked = results[name]
        assert not any((linked.out_dir / "agent").rglob("*")), name
        assert f"/home/agent/logs/agent: {refused}" in linked.notes, (name, linked.notes)
        assert (linked.out_dir / "verifier" / "logs" / "reward.txt").read_text() == "0\n"

    loud = results["loud-agent"]
    log = (loud.out_dir / "agent" / "oracle.log").stat().st_size
    assert log == budget.file_bytes  # the tee'd copy in the agent-log dir, cut at the per-file cap
    assert any("oracle.log: 1073741824 bytes, cut at" in note for note in loud.notes)
    left = {name: leftovers(engine, name) for name in COPY_OUT}
    assert not any(left.values()), left


BREAKS_ITS_SANDBOX = {
    # 3 GiB written with a 256 MiB limit: once 3 GiB on the host's disk, nothing stopped it.
    "disk-flood": (
        "[environment]\nstorage_mb = 256\n",
        "for i in $(seq 30); do dd if=/dev/zero of=flood$i.bin bs=1M count=100 2>/dev/null; done\n",
        NOT_SOLVED,
    ),
    # A 300 GB sparse file: once git read it whole, the diff timed out, sandbox_error, no verifier, no logs.
    "sparse-300g": ("", "truncate -s 300G huge.sparse && sleep 5\n", NOT_SOLVED),
    "workdir-removed": ("", 'cd / && rm -rf "$HOME/workdir"\n', NOT_SOLVED),
    "workdir-linked": ("", 'cd / && rm -rf "$HOME/workdir" && ln -s / "$HOME/workdir"\n', NOT_SOLVED),
    # A fork loop retaking every pid slot: once no command could start, sandbox_error, no verifier, no logs. A
    # fork racing the launch's kill keeps it to the agent timeout, the batch's longest rollout: a short one.
    "fork-loop": (
        "[agent]\ntimeout_sec = 10\n",
        "setsid bash -c 'f() { f | f & }; f' </dev/null >/dev/null 2>&1 &\nsleep 2\nexit 0\n",
        NOT_SOLVED,
    ),
    # The same, with the launch's shell killed first, so its own `kill -KILL -1` never runs: the stop step's
    # commands cannot start, the sandbox is restarted.
    "fork-loop-launch-killed": (
        "[agent]\ntimeout_sec = 30\n",
        "setsid bash -c 'f() { f | f & }; f' </dev/null >/dev/null 2>&1 &\nsleep 2\nkill -KILL $PPID\n",
        NOT_SOLVED,
    ),
    # A .gitattributes line: once every change in workdir.diff was "Binary files differ".
    "gitattributes": ("", "printf '* -diff\\n' > .gitattributes && echo 'a hidden change' > notes.txt\n", NOT_SOLVED),
    # The verifier's reward file a symlink: once an uncaught KeyError that ended the whole batch.
    "reward-symlink": ("", "true\n", "ln -s /etc/shadow /logs/verifier/reward.txt\n"),
}


def test_an_agent_breaking_its_sandbox_gets_a_precise_status_and_the_batch_goes_on(
    runner: Runner, engine: docker.DockerClient, tmp_path: Path
) -> None:
    results = run_beside_a_healthy_task(runner, tmp_path, BREAKS_ITS_SANDBOX)
    for name, result in results.items():  # the logs, the diff and the verifier's output, whatever happened
        assert (result.out_dir / "agent").is_dir() and (result.out_dir / "workdir.diff").is_file(), name
        assert (result.out_dir / "result.json").is_file(), name
    for name in ("disk-flood", "sparse-300g"):
        result = results[name]
        assert (result.status, result.reward) == (Status.DISK_LIMIT, 0.0), (name, result.error)
        assert "past its storage limit" in result.error and (result.out_dir / "verifier" / "stdout.txt").exists()
    flooded = int(results["disk-flood"].error.split("grew to ")[1].split(" MiB")[0])
    print(f"\ndisk flood stopped at {flooded} MiB of 3000 (limit 256)")
    assert 256 <= flooded < 3000  # whole MiB, rounded down: a stop just past the limit reads 256
    assert "grew to 307200 MiB" in results["sparse-300g"].error  # the default limit, 10 GiB, by apparent size

    for name in ("workdir-removed", "workdir-linked"):
        result = results[name]
        assert (result.status, result.reward, result.verifier_exit_code) == (Status.OK, 0.0, 0), (name, result.error)
        assert any("removed or replaced the workdir" in note for note in result.notes), result.notes
        assert "deleted file mode" in (result.out_dir / "workdir.diff").read_text()

    # Ended with the launch: its `kill -KILL -1` needs no new process. Under load a fork can race that one kill
    # and survive it; the stop step then restarts the sandbox, as below. Either way the verifier runs.
    fork = results["fork-loop"]
    assert fork.status in (Status.OK, Status.AGENT_TIMEOUT) and fork.reward == 0.0, fork.error
    assert fork.verifier_exit_code == 0 and (fork.out_dir / "agent" / "oracle.log").is_file()
    fork = results["fork-loop-launch-killed"]
    assert fork.status in (Status.AGENT_ERROR, Status.AGENT_TIMEOUT) and fork.reward == 0.0, fork.error
    assert fork.verifier_exit_code == 0 and (fork.out_dir / "agent" / "oracle.log").is_file()
    assert any("the sandbox was restarted" in note for note in fork.notes), fork.notes

    diff = (results["gitattributes"].out_dir / "workdir.diff").read_text()
    assert "+a hidden change" in diff and "Binary files" not in diff

    linked_reward = results["reward-symlink"]
    assert linked_reward.status in (Status.SANDBOX_ERROR, Status.VERIFIER_ERROR) and linked_reward.reward == 0.0
    assert "reward.txt" in linked_reward.error and (linked_reward.out_dir / "verifier" / "stdout.txt").exists()
    assert all(not leftovers(engine, name) for name in BREAKS_ITS_SANDBOX)


# Played by the scripted model through Claude Code's Bash tool (one step: no blank line). From inside the sandbox,
# with the rollout's own token: 12 requests of 60 MiB each, held one byte short of their end, then 600 idle
# connections to the model URL; prints how many idle ones stayed open and the 12 answers' status lines.
GATEWAY_FLOOD = (
    "python3 - <<'PY'"
    + STILL_OPEN
    + r"""
import os, socket, threading, time, urllib.parse
url = urllib.parse.urlsplit(os.environ["ANTHROPIC_BASE_URL"])
token, size = os.environ["ANTHROPIC_API_KEY"], 60 << 20
body = memoryview(b"x" * size)
sent, finish, answers = threading.Semaphore(0), threading.Event(), []
def send():
    try:
        s = socket.create_connection((url.hostname, url.port), timeout=60)
        head = f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {token}\r\ncontent-length: {size}\r\n\r\n"
        s.sendall(head.encode() + body[:-1])
    except OSError as exc:
        answers.append(type(exc).__name__)
        sent.release()
        return
    sent.release()
    finish.wait()
    try:
        s.sendall(body[-1:])
        answers.append(s.recv(64).split(b"\r\n")[0].decode())
    except OSError as exc:
        answers.append(type(exc).__name__)
threads = [threading.Thread(target=send) for _ in range(12)]
[t.start() for t in threads]
[sent.acquire(timeout=60) for _ in threads]
idle = []
for _ in range(600):
    try:
        idle.append(socket.create_connection((url.hostname, url.port), timeout=5))
    except OSError:
        pass
time.sleep(1)
finish.set()
[t.join() for t in threads]
print(f"idle connections open: {still_open(idle)} of {len(idle)} | answers: {sorted(answers)}")
PY
"""
)


def test_an_agent_flooding_its_gateway_costs_the_runner_bounded_descriptors_and_memory(
    image: str, agent_backend: DockerBackend, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Gateway floods through the real path: Claude Code's Bash tool, the in-sandbox relay, the rollout's
    gateway in this process (unbounded, they would cost the runner ~510 descriptors and ~890 MB)."""
    task = load_task(write_task(tmp_path, "gateway-flood", solve=GATEWAY_FLOOD, test=NOT_SOLVED))
    config = RunnerConfig(image=image, model="scripted", out_dir=tmp_path / "out")
    with Runner(config, agent_backend) as runner:
        runner.start_scripted([task])
        with Peak() as peak:
            result = runner.run(task)
    print(f"\ngateway flood: +{peak.added_mib:.0f} MiB resident (peak), +{peak.added_fds} descriptors (peak)")
    assert (result.status, result.reward, result.exit_code) == (Status.OK, 0.0, 0), result.error
    log = (result.out_dir / "agent" / "claude-code.log").read_text()
    found = re.search(r"idle connections open: (\d+) of (\d+) \| answers: (\[[^\]]*\])", log)
    assert found, log[-2000:]
    assert int(found.group(1)) <= 64 and int(found.group(2)) == 600, found.group(0)
    assert "HTTP/1.1 529" in found.group(3), found.group(0)  # past max_body_bytes_in_flight: refused
    print(found.group(0))
    # The relay and the gateway hold 64 connections at most; the rest is the rollout's own (engine connections,
    # the gateway's listener and upstream pool, the scripted model's side of those calls).
    assert peak.added_fds <= 64 + 32
    assert peak.added_mib < 400  # 128 MiB of bodies in flight at most
    assert result.turns >= 2  # the agent's own calls went on after the flood
    assert not leftovers(engine, "gateway-flood")


# As the agent's user, until the verifier's kill pass: every process's cmdline and environ it can read, searched
# for the lines of /tmp/spy/needles (in a file: needles on its own command line would find themselves), and
# /tests/secret read; what it finds is appended to /tmp/spy/found.
SPY = r"""while :; do
  for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do
    tr '\0' '\n' < "$f" 2>/dev/null | grep -F -o -f /tmp/spy/needles
  done
  cat /tests/secret 2>/dev/null
done >> /tmp/spy/found 2>/dev/null
"""


def test_the_tests_ride_to_the_verifier_unseen_by_a_process_of_the_agent_left_alive(
    backend: DockerBackend, image: str, tmp_path: Path
) -> None:
    """tests/ rides in the environment of the root command that runs test.sh. Were a process of the
    agent's user alive then (the stop step sees to it that none is: here one is started after it), it could
    read that command's /proc/<pid>/cmdline but not its environ: it finds the command (so it was looking while
    test.sh ran) and its own environment's canary (so it reads what it may), never the tests."""
    secret = secrets.token_hex(16).encode()
    test = "sleep 2\n" + reward_if(f'[ "$(cat /tests/secret)" = {secret.decode()} ]')  # the spy looks meanwhile
    path = write_task(tmp_path, "spied-on", solve="true\n", test=test)
    (path / "tests" / "secret").write_bytes(secret)
    task = load_task(path)
    needles = {
        "command": "could not unpack tests/",  # in the verifier command's argv (`commands.root_test_sh`)
        "canary": "the spy's own canary",
        "variable": f"{ENV_PREFIX}0=",
        "secret": secret.decode(),
        # the secret as the archive's base64 holds it, whatever its offset in the archive
        **{f"secret, base64 at +{i}": base64.b64encode(secret[i : i + 24]).decode() for i in range(3)},
    }
    sandbox = backend.create(SandboxRequest(image=image, rollout_id=f"spied-on-{secrets.token_hex(4)}"))
    try:
        private = f"/tmp/agentbake-{secrets.token_hex(8)}"
        own = sandbox.exec(f"mkdir -m 700 {private} && {PROCESSES}", user="root", timeout=60)
        sandbox.write_text("/tmp/spy/needles", "".join(f"{n}\n" for n in needles.values()))
        spy = sandbox.start_bg(SPY, envs={"CANARY": needles["canary"]})
        uid = sandbox.exec("id -u", timeout=60).stdout.strip()
        cleared = sandbox.exec(["sh", "-c", clear_the_way(private), "sh", uid], user="root", timeout=60)
        assert own.exit_code == cleared.exit_code == 0, (own, cleared)
        outcome = HarnessOutcome()
        VerifierPhase(
            sandbox,
            task,
            outcome,
            workdir=sandbox.paths["workdir"],
            private=private,
            root_env={"HOME": "/root"},
            own_processes=" ".join(own.stdout.split()),
            network="none",
            archives_in_env=True,
            packed=PackedLogs(private),
            root=lambda *_, **__: pytest.fail("a root verifier needs no command of its own"),
            save=lambda name, text: None,
        ).run()
        assert (outcome.status, outcome.reward) == (Status.OK, 1.0), outcome.error
        assert spy.wait(timeout=30).exit_code != 0, "the verifier's kill pass ended the spy"
        found = set(sandbox.read_text("/tmp/spy/found").splitlines())
    finally:
        sandbox.kill()
    assert needles["command"] in found and needles["canary"] in found, found  # it looked, and it can see
    assert found <= {needles["command"], needles["canary"]}, f"the agent's user saw the tests: {found}"
