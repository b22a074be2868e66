"""The agent's user as Harbor chooses it, on the real engine: Terminal-Bench-shaped tasks of their own (debian, no
USER, WORKDIR /app) run their oracle as root with the solution at /solution; a root agent's leftovers (a detached
process, a `setsid` daemon, one that kills the relay) are dead before test.sh, its links into /tests removed while
the image's own links stay; `[agent] user` and `--agent-user` pick another user (a missing one is an error naming
the key); a root verifier's git works in a uid-1000 workdir while the harness's own git runs nothing the agent
planted in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.errors import TaskError
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.result import Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.tasks import load_task
from agentbake.tasks.bundle import BUNDLE_GIT
from tests.runner.rollouts import reward_if, write_task

pytestmark = pytest.mark.docker

TB2_DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo data > /app/input.txt{extra}\n"
THROWAWAY = ("root-solution", "leftovers", "kills-relay", "root-timeout", "root-links", "named-user", "ghost-user")


@pytest.fixture(scope="module")
def backend(engine: docker.DockerClient) -> Iterator[DockerBackend]:
    backend = DockerBackend(DockerConfig(memory_mb=512, cpus=1))
    yield backend
    backend.close()
    for image in engine.images.list(filters={"label": "dev.agentbake.task.name"}):
        if image.labels["dev.agentbake.task.name"] in THROWAWAY:
            engine.images.remove(image.id, force=True)


def tb2_task(root: Path, name: str, *, solve: str, test: str, toml: str = "", extra: str = "") -> Path:
    """A task as Terminal-Bench 2.0 lays them out: its own Dockerfile (no USER, WORKDIR /app)."""
    task = write_task(root, name, solve=solve, test=test, toml=toml)
    (task / "environment").mkdir()
    (task / "environment" / "Dockerfile").write_text(TB2_DOCKERFILE.format(extra=extra))
    return task


def run(built_images: dict[str, BuildResult], backend: DockerBackend, tmp: Path, *tasks: Path, **config) -> dict:
    settings = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp / "out", **config)
    with Runner(settings, backend) as runner:
        return {r.task: r for r in runner.run_batch([load_task(t) for t in tasks], concurrency=3)}


ROOT_SOLVE = f"""set -e
useradd -m tbuser
echo configured > /etc/tb2.conf
chmod 600 /etc/debian_version
cp /solution/helper.txt /app/
echo "$SOLVE_VAR" > /app/solve-var
echo "$HOME $(id -u)" > /app/home
mkdir /app/repo && cd /app/repo
{BUNDLE_GIT} init -q && echo x > f && {BUNDLE_GIT} add f
{BUNDLE_GIT} -c user.name=a -c user.email=a@b commit -qm one
"""
ROOT_TEST = reward_if(
    '[ "$(stat -c %u /app)" = 0 ] && id tbuser >&2 && [ "$(cat /etc/tb2.conf)" = configured ]'
    ' && [ "$(stat -c %a /etc/debian_version)" = 600 ] && [ "$(cat /app/helper.txt)" = help ]'
    ' && [ "$(cat /app/solve-var)" = from-solution ] && [ "$VERIFY_VAR" = from-verifier ]'
    ' && [ "$(cat /app/home)" = "/root 0" ]'
    f" && {BUNDLE_GIT} -C /app/repo fsck >&2 && {BUNDLE_GIT} -C /app/repo log --oneline | grep -q one"
)
# Three leftovers, each named by its command line.
LEFTOVERS_SOLVE = r"""
nohup sh -c 'while :; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.05; done; : leftover-a' \
  >/dev/null 2>&1 &
setsid sh -c 'sleep 1000; : leftover-b' </dev/null >/dev/null 2>&1 &
( sh -c 'sleep 1000; : leftover-c' </dev/null >/dev/null 2>&1 & )
sleep 0.3
"""
# The relay is the sandbox's main process: killing it stops the container, with the leftovers in it.
KILL_RELAY = (
    LEFTOVERS_SOLVE
    + r"""
for p in /proc/[0-9]*; do
  if tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q forwarder.py; then kill -KILL ${p#/proc/}; fi
done
sleep 1
"""
)
LEFTOVERS_TEST = """alive=0
for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'leftover-[abc]' && alive=$((alive+1)); done
echo "alive $alive"
""" + reward_if('[ "$alive" = 0 ]')
LINKS_SOLVE = """while [ ! -e /root/logs/agent/oracle.log ]; do sleep 0.01; done  # tee has it open (load)
ln -s /tests/expected /app/answer
mkdir -p /tmp/fake/agent && echo stolen > /tmp/fake/agent/secret
mv /root/logs /root/logs.old && ln -s /tmp/fake /root/logs
# the harness's markers moved into the future: its links would look older than them
for m in /tmp/agentbake-*/*; do touch -d 2100-01-01 "$m"; done
"""
LINKS_TEST = reward_if(
    "[ ! -e /app/answer ] && [ ! -L /app/answer ] && [ -L /app/image-link ] && [ -L /usr/bin/py-link ]"
)


def test_a_terminal_bench_shaped_root_solution_gets_reward_1(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    """useradd, a file under /etc, a chmod of a root file, /solution's files, `[solution] env` and `[verifier] env`,
    and a repo in root's /app that the root verifier's git reads (no dubious ownership)."""
    toml = '[solution.env]\nSOLVE_VAR = "from-solution"\n\n[verifier.env]\nVERIFY_VAR = "from-verifier"\n'
    task = tb2_task(tmp_path, "root-solution", solve=ROOT_SOLVE, test=ROOT_TEST, toml=toml)
    (task / "solution" / "helper.txt").write_text("help\n")
    (task / "solution" / "helper.txt").chmod(0o600)
    result = run(built_images, backend, tmp_path, task)["root-solution"]
    assert (result.status, result.reward, result.exit_code) == (Status.OK, 1.0, 0), (
        result.error,
        (result.out_dir / "verifier" / "stderr.txt").read_text(),
    )
    assert result.image.startswith("agentbake-run/root-solution:")


def test_a_root_agents_leftovers_and_links_are_gone_before_test_sh(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    """A detached loop writing the reward, a `setsid` daemon, a double fork, a killed relay, an agent past its
    deadline: none of what it left is alive when test.sh runs, which still runs and writes the reward. A link the
    root agent made to /tests is removed before /tests exists (listed), the image's own root links stay; its log
    dir turned into a link is not collected."""
    leftovers = tb2_task(tmp_path, "leftovers", solve=LEFTOVERS_SOLVE, test=LEFTOVERS_TEST)
    relay = tb2_task(tmp_path, "kills-relay", solve=KILL_RELAY, test=LEFTOVERS_TEST)
    late = LEFTOVERS_SOLVE + "sleep 100\n"
    timed_out = tb2_task(tmp_path, "root-timeout", solve=late, test=LEFTOVERS_TEST, toml="[agent]\ntimeout_sec = 2\n")
    image_links = " && ln -s /tests/expected /app/image-link && ln -s python3 /usr/bin/py-link"
    links = tb2_task(tmp_path, "root-links", solve=LINKS_SOLVE, test=LINKS_TEST, extra=image_links)
    results = run(built_images, backend, tmp_path, leftovers, relay, timed_out, links)
    late_result = results["root-timeout"]  # stopped at its deadline: the same kill, the verifier still runs
    assert (late_result.status, late_result.reward) == (Status.AGENT_TIMEOUT, 1.0), late_result.error
    killed = results["kills-relay"]  # its sandbox stopped under it: restarted, the verifier still ran
    assert (killed.status, killed.reward, killed.exit_code) == (Status.AGENT_ERROR, 1.0, 137), killed.error
    assert any("the sandbox was restarted" in note for note in killed.notes)
    left = results["leftovers"]
    assert (left.status, left.reward, left.exit_code) == (Status.OK, 1.0, 0), left.error
    assert (left.out_dir / "verifier" / "stdout.txt").read_text().split() == ["alive", "0"]
    assert (left.out_dir / "verifier" / "logs" / "reward.txt").read_text() == "1\n"
    linked = results["root-links"]
    assert (linked.status, linked.reward) == (Status.OK, 1.0), linked.error
    removed = (linked.out_dir / "verifier" / "removed-links.txt").read_text().splitlines()
    assert removed == ['"/app/answer" -> "/tests/expected"']
    assert any("/root/logs/agent: not collected" in note and "a link the agent made" in note for note in linked.notes)
    assert not (linked.out_dir / "agent" / "secret").exists()


NAMED_SOLVE = "id -un > /tmp/who && cp /solution/solve.sh /tmp/solve-copy && touch /app/x 2>/dev/null || true\n"
NAMED_TEST = reward_if('[ "$(cat /tmp/who)" = nobody ] && [ -s /tmp/solve-copy ] && [ ! -e /app/x ]')


def test_agent_user_names_another_user_and_a_missing_one_is_an_error(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    """`[agent] user` runs the oracle as that user (/solution readable to it, root's /app not writable: as the image
    made it); `--agent-user` overrides the key, and a user the image lacks fails the rollout naming the flag."""
    named = tb2_task(tmp_path, "named-user", solve=NAMED_SOLVE, test=NAMED_TEST, toml='[agent]\nuser = "nobody"\n')
    result = run(built_images, backend, tmp_path, named)["named-user"]
    assert (result.status, result.reward) == (Status.OK, 1.0), result.error
    ghost = tb2_task(tmp_path, "ghost-user", solve="true\n", test=reward_if("true"), toml='[agent]\nuser = "nobody"\n')
    failed = run(built_images, backend, tmp_path / "flag", ghost, agent_user="ghost")["ghost-user"]
    assert failed.status is Status.SANDBOX_ERROR
    assert "task ghost-user" in failed.error and "--agent-user 'ghost': no user 'ghost' in its /etc/passwd" in (
        failed.error
    )


def test_a_catalog_image_task_refuses_another_agent_user(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    task = load_task(write_task(tmp_path, "catalog", solve="true\n", test=reward_if("true")))
    config = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path, agent_user="root")
    with Runner(config, backend) as runner, pytest.raises(TaskError, match=r"task catalog: --agent-user 'root'"):
        runner.run(task)
    same = RunnerConfig(image=built_images["claude-code"].tag, oracle=True, out_dir=tmp_path, agent_user="1000")
    with Runner(same, backend) as runner:
        assert runner.run(task).reward == 1.0  # its own user, by uid


# Each planted piece, if git ran it as root, leaves /tmp/proof-<name> holding the uid it ran as.
PLANT = r"""set -e
proof() { printf '%s' "sh -c 'id -u > /tmp/proof-$1'"; }
plant() {  # $1: a repo's .git
  mkdir -p "$1/hooks" /tmp/hooks
  for hook in pre-commit post-commit post-index-change reference-transaction fsmonitor-watchman; do
    printf '#!/bin/sh\nid -u > /tmp/proof-hook-%s\n' "$hook" | tee "$1/hooks/$hook" > /tmp/hooks/$hook
    chmod +x "$1/hooks/$hook" /tmp/hooks/$hook
  done
  git config -f "$1/config" core.hooksPath /tmp/hooks
  git config -f "$1/config" core.fsmonitor "$(proof fsmonitor)"
  git config -f "$1/config" core.pager "$(proof pager)"
  git config -f "$1/config" core.sshCommand "$(proof ssh)"
  git config -f "$1/config" diff.external "$(proof external)"
  git config -f "$1/config" filter.evil.clean "$(proof filter)"
  git config -f "$1/config" filter.evil.process "$(proof process)"
  git config -f "$1/config" diff.evil.textconv "$(proof textconv)"
}
git init -q . && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m one
mkdir sub && git -C sub init -q && git -C sub -c user.name=a -c user.email=a@b commit -q --allow-empty -m sub
plant .git && plant sub/.git
printf '* filter=evil diff=evil\n' > .gitattributes
cp .gitattributes sub/.gitattributes
echo changed > changed.txt && echo nested > sub/file.txt
git config -f ~/.gitconfig filter.evil.clean "$(proof global-filter)"
"""
# As root: nothing planted ran (as root or at all), then the verifier's git reads the agent's (uid 1000) workdir.
PLANT_TEST = (
    reward_if(
        '[ -z "$(ls /tmp/proof-* 2>/dev/null)" ] && [ "$(stat -c %u "$PWD")" = 1000 ] && [ "$(id -u)" = 0 ] && '
        'git -c core.fsmonitor=false -C "$PWD" log --oneline | grep -q one'
    )
    + "ls /tmp/proof-* 2>/dev/null; true\n"
)


def test_the_root_verifiers_git_works_in_the_agents_workdir_and_the_harness_runs_nothing_planted(
    built_images: dict[str, BuildResult], backend: DockerBackend, tmp_path: Path
) -> None:
    """A catalog-image task (workdir owned by uid 1000): the agent plants hooks, `core.hooksPath`, fsmonitor, pager,
    ssh command, an external diff, filters and a textconv in the workdir's .git/config and a nested repo's, with a
    .gitattributes using them, and a filter in its ~/.gitconfig; the harness's snapshot and diff (root) run none of
    them, and the root verifier's git reads the repo (safe.directory in its environment)."""
    task = write_task(tmp_path, "planted-git", solve=PLANT, test=PLANT_TEST)
    result = run(built_images, backend, tmp_path, task)["planted-git"]
    said = (result.out_dir / "verifier" / "stdout.txt").read_text()
    assert (result.status, result.reward) == (Status.OK, 1.0), (result.error, said)
    diff = (result.out_dir / "workdir.diff").read_text()
    assert "+changed" in diff and "+* filter=evil diff=evil" in diff  # the diff is text, no filter or textconv ran
