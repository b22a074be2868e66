"""`agentbake run` and `agentbake rollout` as a user types them (subprocesses, real engine and images)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.runner.docker import labels
from agentbake.scripted import ScriptedModel
from agentbake.serve import serve_in_thread
from tests.runner.rollouts import EXAMPLE_TASKS, EXAMPLES, leftovers, write_task

pytestmark = pytest.mark.docker

AGENTBAKE = [sys.executable, "-c", "from agentbake.cli import main; main()"]


def agentbake(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AGENTBAKE, *args], capture_output=True, text=True, timeout=300, **kwargs)


# What an oracle run (no model, so no gateway), piped or --json, never needs: the gateway's config and server, rich,
# the templates' rendering (its tag comes from the user's cache), the remote backends' configs.
NOT_FOR_AN_ORACLE_RUN = (
    "agentbake.gateway.config",
    "agentbake.gateway.app",
    "rich",
    "jinja2",
    "agentbake.buildkit.render",
    "agentbake.buildkit.spec",
    "agentbake.runner.remote.e2b_config",
    "agentbake.runner.remote.hf_config",
)


def test_an_oracle_run_loads_only_what_it_uses(built_images: dict[str, BuildResult], tmp_path: Path) -> None:
    probe = (
        "import json, sys\nfrom agentbake.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps(sorted(m for m in {NOT_FOR_AN_ORACLE_RUN!r} if m in sys.modules)))"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    args = ["run", "claude-code", "--path", str(EXAMPLES / "write-file"), "--oracle", "-o", str(tmp_path / "out")]
    for options in ([], ["--json"]):  # the first run renders the tag once (an empty cache)
        done = subprocess.run(
            [sys.executable, "-c", probe, *args, *options], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert json.loads(done.stdout.splitlines()[0])["status"] == "ok"
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env, timeout=300)
    assert json.loads(done.stdout.splitlines()[-1]) == []
    status, rest = done.stderr.split(" ", 1)  # a pipe: rich's lines, uncoloured, written without rich
    assert status == "ok" and rest.startswith("reward 1  write-file-") and "(oracle)\n  image " in rest
    assert "\x1b" not in done.stderr and "turns 0, tokens captured 0; files in " in done.stderr


def test_run_oracle_json_prints_one_result_object(built_images: dict[str, BuildResult], tmp_path: Path) -> None:
    done = agentbake(
        "run", "claude-code", "--path", str(EXAMPLES / "write-file"), "--oracle", "-o", str(tmp_path), "--json"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {
        "rollout_id",
        "status",
        "reward",
        "exit_code",
        "image",
        "agent_version",
        "timings",
        "turns",
        "out_dir",
    } <= set(result)
    assert (result["status"], result["reward"], result["exit_code"]) == ("ok", 1.0, 0)
    assert result["image"] == built_images["claude-code"].tag  # the catalog name resolved to its content tag
    assert set(result["timings"]) >= {"create", "upload", "setup", "agent", "stop", "verifier", "collect", "ready"}
    assert Path(result["out_dir"]) == (tmp_path / result["rollout_id"]).resolve()
    assert json.loads((Path(result["out_dir"]) / "result.json").read_text())["status"] == "ok"


def test_rollout_json_prints_each_result_then_the_summary(built_images: dict, tmp_path: Path) -> None:
    args = ["rollout", "claude-code", "--path", str(EXAMPLES), "--oracle", "-n", "3", "--json"]
    done = agentbake(*args, "-o", str(tmp_path), "--job-name", "job")
    assert done.returncode == 0, done.stderr
    *results, totals = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(r["task"] for r in results) == sorted(EXAMPLE_TASKS)
    report = tmp_path / "job" / "report.html"
    assert totals["report"] == str(report) and report.is_file()
    summary = totals["summary"]
    assert (summary["rollouts"], summary["reward_mean"], summary["statuses"]) == (5, 1.0, {"ok": 5})
    assert set(summary["phases"]) >= {"create", "agent", "verifier", "ready", "total"}
    assert all(p["p50"] <= p["p95"] for p in summary["phases"].values())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--upstream", "ftp://example.invalid"], "expected 'scripted' or an http(s):// URL"),
        (["--oracle"], "no solution/solve.sh; --oracle runs the task's reference solution"),
    ],
)
def test_bad_input_is_one_clear_error(built_images: dict, tmp_path: Path, args: list[str], message: str) -> None:
    task = write_task(tmp_path, "no-solution", solve="true\n", test="true\n")
    (task / "solution" / "solve.sh").unlink()
    done = agentbake("run", "claude-code", "--path", str(task), "-o", str(tmp_path / "out"), *args)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_model_server_that_fails_the_preflight_is_one_clear_error(built_images: dict, tmp_path: Path) -> None:
    model = ScriptedModel()
    model.ignore_fields = {"logprobs", "top_logprobs"}
    with serve_in_thread(model, log_level="critical") as server:
        args = ["run", "claude-code", "--path", str(EXAMPLES / "write-file"), "-o", str(tmp_path)]
        done = agentbake(*args, "--upstream", f"{server.url}/v1", "--logprobs-mode", "raw")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "preflight failed" in done.stderr and "the server ignores `logprobs: true`" in done.stderr
    assert "--no-preflight" in done.stderr and not list(tmp_path.iterdir())  # no rollout started


def test_upstream_repeated_is_several_workers_each_with_its_preflight(built_images: dict, tmp_path: Path) -> None:
    good, bad = ScriptedModel(), ScriptedModel()
    bad.ignore_fields = {"logprobs", "top_logprobs"}
    with serve_in_thread(good, log_level="critical") as one, serve_in_thread(bad, log_level="critical") as two:
        args = ["run", "claude-code", "--path", str(EXAMPLES / "write-file"), "--rollouts-dir", str(tmp_path)]
        done = agentbake(*args, "--upstream", f"{one.url}/v1", "--upstream", f"{two.url}/v1", "--model", "m")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"model {two.url}/v1: preflight failed" in done.stderr  # the second worker, named
    assert any(path.endswith("/chat/completions") for path in good.paths)  # the first was probed and passed
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_a_batch_removes_its_sandboxes_and_gateways(
    built_images: dict, engine: docker.DockerClient, tmp_path: Path, signum: int
) -> None:
    """Real Claude Code through the scripted model, each rollout stuck in a long tool call when the signal comes."""
    name = f"sig{signum}-{os.getpid()}"
    task = write_task(tmp_path, name, solve="sleep 120\n", test="true\n")
    runner = subprocess.Popen(
        [*AGENTBAKE, "rollout", "claude-code", "--path", str(task), "--upstream", "scripted", "-k", "2", "-n", "2",
         "-o", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(_containers(engine, name)) < 2 or not leftovers(engine, name):
            assert runner.poll() is None, runner.communicate()
            assert time.monotonic() < deadline, "the rollouts never started"
            time.sleep(0.2)
        time.sleep(3)  # the agents are inside their tool call by now
        runner.send_signal(signum)
        _, stderr = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == (130 if signum == signal.SIGINT else 128 + signum), stderr
    assert leftovers(engine, name) == []


def _containers(engine: docker.DockerClient, prefix: str) -> list[str]:
    return [
        c.name
        for c in engine.containers.list(filters={"label": labels.ROLLOUT}, ignore_removed=True)
        if c.labels[labels.ROLLOUT].startswith(prefix)
    ]


def test_agent_user_reaches_the_run_and_a_bad_one_is_a_usage_error(
    built_images: dict[str, BuildResult], tmp_path: Path
) -> None:
    """`--agent-user` is the RunnerConfig's: a catalog-image task refuses another user than its image's, naming the
    flag; a value that is no user name is a usage error naming it."""
    args = ["run", "claude-code", "--path", str(EXAMPLES / "write-file"), "--oracle", "-o", str(tmp_path)]
    done = agentbake(*args, "--agent-user", "root")
    assert done.returncode != 0 and "task write-file: --agent-user 'root'" in done.stderr, done.stderr
    bad = agentbake(*args, "--agent-user", "two words")
    assert bad.returncode == 2 and "agent_user: Value error, 'two words': expected a user name or a uid" in bad.stderr
