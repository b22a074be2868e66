"""Whole rollouts with a model: the real agent CLIs in their real images, the scripted model behind a
gateway per rollout, token ids in the trace, and the upstream key kept out of the sandbox.

The agent x task matrix is trimmed to each agent once (six pairs, ~40 s together): every agent against every
task would add more runs that exercise no further code path."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import docker
import pytest

from agentbake.buildkit.build import BuildResult
from agentbake.gateway import read_trace
from agentbake.runner.docker import labels
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.result import Status
from agentbake.runner.runner import Runner
from agentbake.runner.runner_config import RunnerConfig
from agentbake.scripted import Fault, ScriptedModel
from agentbake.scripted.tokens import request_seed, sampled_logprob
from agentbake.serve import serve_in_thread
from agentbake.tasks import load_task
from tests.runner.faulty_engine import FaultyEngine
from tests.runner.rollouts import EXAMPLES, leftovers, reward_if, with_deltas_joined, write_task

pytestmark = pytest.mark.docker


TRANSCRIPTS = {
    "claude-code": "projects/*/*.jsonl",
    "codex": "sessions/*/*/*/rollout-*.jsonl",
    "gemini-cli": "tmp/*/chats/session-*.jsonl",
    "mini-swe-agent": "mini-swe-agent.traj.json",
    "opencode": "log/*.log",
    "pi": "pi-sessions/*.jsonl",
    "qwen-code": "projects/*/chats/*.jsonl",
}
"""Each agent's session transcript under out/<id>/agent/."""


@pytest.mark.parametrize(
    ("agent", "task_name"),
    [
        ("claude-code", "write-file"),
        ("codex", "fix-failing-test"),
        ("gemini-cli", "fix-failing-test"),
        ("mini-swe-agent", "fix-failing-test"),
        ("opencode", "fix-failing-test"),
        ("pi", "multi-step-report"),
        ("qwen-code", "fix-failing-test"),
    ],
)
def test_each_agent_solves_a_task_with_the_scripted_model_and_every_call_has_token_ids(
    built_images: dict[str, BuildResult],
    agent_backend: DockerBackend,
    engine: docker.DockerClient,
    tmp_path: Path,
    agent: str,
    task_name: str,
) -> None:
    task = load_task(EXAMPLES / task_name)
    config = RunnerConfig(image=built_images[agent].tag, model="scripted", out_dir=tmp_path)
    with Runner(config, agent_backend) as runner:
        runner.start_scripted([task])
        result = runner.run(task)
    assert (result.status, result.reward, result.exit_code, result.agent) == (Status.OK, 1.0, 0, agent), result.error
    records = read_trace(result.out_dir / "trace.jsonl")
    assert result.turns == len(records) >= 2  # at least one tool call and the closing message
    assert {r.rollout_id for r in records} == {result.rollout_id}
    for record in records:
        assert record.ok and record.completion_token_ids, f"turn {record.turn} captured no token ids"
        # The scripted model's logprobs are a function of the request it got (the record's, as sent) but its sampling
        # settings (Gemini CLI sends temperature and top_p): the values it emitted, compared token by token.
        seed = request_seed({k: v for k, v in record.request.items() if k not in ("temperature", "top_p")})
        assert record.per_token_logps == [sampled_logprob(seed, n) for n in range(len(record.completion_token_ids))]
    assert result.trace == records and result.calls_without_token_ids == 0
    assert {r.logprobs_mode for r in records} == {"raw"}  # what the runner's preflight found
    assert result.tokens == sum(len(r.completion_token_ids) for r in records)
    assert (result.out_dir / "agent" / f"{agent}.log").stat().st_size > 0
    # What the agent recorded beyond its log (its own transcript path, `Agent.log_paths`) is collected too.
    assert any((result.out_dir / "agent").glob(TRANSCRIPTS[agent])) and result.notes == [], result.notes
    # The export: the whole rollout is one agent sequence, its input ids the last call's prompt + completion.
    document = json.loads((result.out_dir / "sequences.json").read_text())
    assert result.trainable is True and document["validation"]["trainable"] is True
    (sequence,) = [s for s in document["sequences"] if s["role"] == "agent"]
    last = records[-1]
    assert sequence["input_ids"] == last.prompt_token_ids + last.completion_token_ids
    assert sum(sequence["loss_mask"]) == sum(len(r.completion_token_ids) for r in records)
    assert leftovers(engine, result.rollout_id) == []


STATEFUL_SOLVE = """set -euo pipefail
OUT="$PWD/out"
export LABEL="state carried"
mkdir -p "$OUT/deep"
cd "$OUT/deep"
note() { printf '%s: %s\\n' "$1" "$LABEL" >> "$OUT/notes.txt"; }

note first
cat > story.txt <<'EOF'
once

upon a time
EOF

[[ -o errexit ]] && note second
bash -c 'echo "$LABEL" > child.txt'

exit 0

rm -rf "$OUT"
"""
STATEFUL_TEST = reward_if(
    '[ "$(cat out/notes.txt)" = "$(printf \'first: state carried\\nsecond: state carried\')" ]'
    " && grep -qx 'upon a time' out/deep/story.txt && [ \"$(cat out/deep/child.txt)\" = 'state carried' ]"
)


# OpenCode and Pi pass too (a fresh shell per call, as tests/scripted/test_shell_steps.py plays the steps), but
# their runs take 40-130 s on a loaded 2-core machine.
@pytest.mark.parametrize("agent", ["oracle", "claude-code", "codex", "gemini-cli", "mini-swe-agent", "qwen-code"])
def test_a_solve_sh_with_state_across_blocks_solves_its_task_as_the_oracle_does(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path, agent: str
) -> None:
    """Variables, the directory, a function, set -e and an exported variable carry from one tool call to the
    next, a here-document keeps its blank line, and `exit 0` ends the script: the reward the oracle gets."""
    task = load_task(write_task(tmp_path / "tasks", "stateful", solve=STATEFUL_SOLVE, test=STATEFUL_TEST))
    image = built_images["claude-code" if agent == "oracle" else agent].tag
    oracle = agent == "oracle"
    config = RunnerConfig(image=image, model=None if oracle else "scripted", oracle=oracle, out_dir=tmp_path / "out")
    with Runner(config, agent_backend) as runner:
        if not oracle:
            runner.start_scripted([task])
        result = runner.run(task)
    assert (result.status, result.reward, result.exit_code) == (Status.OK, 1.0, 0), result.error
    if not oracle:
        # Four steps ran (the fifth, after `exit 0`, was never sent), then the closing message.
        log = with_deltas_joined((result.out_dir / "agent" / f"{agent}.log").read_text())
        assert "the reference solution of stateful ended at step 4 (exit 0)" in log, log[-2000:]


KEY_PREFIX = "sk-agentbake-probe-"
# Played through the agent's shell tool: every process's environment and command line, the agent's own
# environment and every file it can read, searched for anything shaped like the key (the prefix alone
# appears in this script's own command line, which shows the search saw the processes).
PROBE = f"""P='{KEY_PREFIX}'
{{ env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < "$f"; echo; done; }} 2>/dev/null \\
  | grep -o "${{P}}[A-Za-z0-9]*" > probe.txt
grep -rIho "${{P}}[A-Za-z0-9]*" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null >> probe.txt
echo probed >> probe.txt
"""


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini-cli", "mini-swe-agent", "qwen-code"])
def test_the_upstream_key_reaches_the_upstream_and_never_the_sandbox(
    built_images: dict[str, BuildResult],
    agent_backend: DockerBackend,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
) -> None:
    key = KEY_PREFIX + secrets.token_hex(16)
    monkeypatch.setenv("AGENTBAKE_TEST_PROBE_KEY", key)
    task = load_task(write_task(tmp_path, "key-probe", solve=PROBE, test=reward_if("grep -q probed probe.txt")))
    model = ScriptedModel(tasks=[task])
    with serve_in_thread(model) as upstream:
        config = RunnerConfig(
            image=built_images[agent].tag,
            model=f"{upstream.url}/v1",
            model_name="probe-model",
            api_key_env="AGENTBAKE_TEST_PROBE_KEY",
            out_dir=tmp_path / "out",
        )
        with Runner(config, agent_backend) as runner:
            result = runner.run(task)
    assert (result.status, result.reward) == (Status.OK, 1.0), result.error
    assert model.headers and all(h.get("authorization") == f"Bearer {key}" for h in model.headers)
    assert all(r["model"] == "probe-model" for r in model.requests)  # --model-name overrides upstream
    found = [line[1:] for line in (result.out_dir / "workdir.diff").read_text().splitlines() if line.startswith("+")]
    assert "probed" in found and KEY_PREFIX in found, "the probe did not run or saw no process"
    assert not any(key in line for line in found), "the upstream key is readable inside the sandbox"
    for path in result.out_dir.rglob("*"):  # nor in anything the rollout wrote
        assert not path.is_file() or key.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("agent", ["codex", "gemini-cli", "mini-swe-agent", "qwen-code"])
def test_the_agent_reaches_nothing_but_its_gateway(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path, agent: str
) -> None:
    """Every host is refused in the agent phase but one nobody calls, and each refusal is a note: the solution's
    own request is the only one, so the agent itself called nothing (update check, plugin sync, telemetry, Google's
    or Alibaba's own hosts, litellm's price list) but its gateway, which it reaches with no network."""
    solve = "curl -s -o /dev/null https://example.com/ || true\necho hello > hello.txt\n"
    test = reward_if("grep -qx hello hello.txt")
    task = load_task(write_task(tmp_path / "tasks", "no-route-out", solve=solve, test=test))
    config = RunnerConfig(
        image=built_images[agent].tag,
        model="scripted",
        agent_network="allowlist",
        allowed_hosts=("127.0.0.2",),
        out_dir=tmp_path / "out",
    )
    with Runner(config, agent_backend) as runner:
        runner.start_scripted([task])
        result = runner.run(task)
    assert (result.status, result.reward) == (Status.OK, 1.0), result.error
    assert [note.split(" (")[0] for note in result.notes] == ["network: example.com refused once in the agent phase"]


def test_a_batch_shares_one_runner_and_keeps_traces_apart(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    task = load_task(EXAMPLES / "write-file")
    progress_seen: list[tuple[int, int]] = []
    config = RunnerConfig(image=built_images["claude-code"].tag, model="scripted", out_dir=tmp_path)
    with Runner(config, agent_backend) as runner:
        runner.start_scripted([task])
        results = runner.run_batch(
            [task], repeats=3, concurrency=3, on_progress=lambda p: progress_seen.append((p.done, p.running))
        )
    assert [r.status for r in results] == [Status.OK] * 3 and [r.reward for r in results] == [1.0] * 3
    assert len({r.rollout_id for r in results}) == 3
    for result in results:
        assert {r.rollout_id for r in read_trace(result.out_dir / "trace.jsonl")} == {result.rollout_id}
    assert progress_seen[-1] == (3, 0) and max(running for _, running in progress_seen) >= 2


def test_a_real_agent_whose_model_refuses_every_call_is_an_agent_error_and_still_judged(
    built_images: dict[str, BuildResult], agent_backend: DockerBackend, tmp_path: Path
) -> None:
    model = ScriptedModel()
    model.responder = lambda request: Fault(status=400, message="refused by the test")
    task = load_task(EXAMPLES / "write-file")
    with serve_in_thread(model) as upstream:
        config = RunnerConfig(
            image=built_images["claude-code"].tag,
            model=f"{upstream.url}/v1",
            model_name="m",
            preflight=False,  # the preflight would refuse this server: the agent must meet it
            out_dir=tmp_path,
        )
        with Runner(config, agent_backend) as runner:
            result = runner.run(task)
    assert (result.status, result.reward) == (Status.AGENT_ERROR, 0.0), result.error
    assert result.exit_code not in (0, None) and result.turns >= 1
    assert "hello.txt is missing" in (result.out_dir / "verifier" / "stdout.txt").read_text()


def test_a_sandbox_that_cannot_be_removed_is_a_sandbox_error_once_its_gateway_has_stopped(
    built_images: dict[str, BuildResult], engine: docker.DockerClient, tmp_path: Path
) -> None:
    """The sandbox's removal runs in a thread while the gateway stops; its failure is still the rollout's status
    in result.json, and the gateway has stopped first: the trace is whole, its socket folder gone."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip(f"the fault-injecting relay needs a unix-socket engine, DOCKER_HOST is {host}")
    task = load_task(EXAMPLES / "write-file")
    with FaultyEngine(
        tmp_path / "engine.sock", host.removeprefix("unix://"), r"^DELETE /v[\d.]+/containers/", 100
    ) as proxy:
        backend = DockerBackend(DockerConfig(memory_mb=1024, cpus=1), base_url=proxy.url)
        config = RunnerConfig(image=built_images["claude-code"].tag, model="scripted", out_dir=tmp_path / "out")
        with Runner(config, backend) as runner:
            runner.start_scripted([task])
            result = runner.run(task)
    left = engine.containers.list(all=True, filters={"label": f"{labels.ROLLOUT}={result.rollout_id}"})
    for container in left:  # the engine answers again: what the failed removal left goes now
        container.remove(force=True)
    assert len(left) == 1, "the removal did fail (else this test shows nothing)"
    assert result.status is Status.SANDBOX_ERROR and "could not remove sandbox" in result.error
    assert json.loads((result.out_dir / "result.json").read_text())["status"] == "sandbox_error"
    assert result.turns > 0 and len(read_trace(result.out_dir / "trace.jsonl")) == result.turns
    assert leftovers(engine, result.rollout_id) == []
