"""The real Claude Code CLI, headless, through the gateway against the scripted upstream."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from agentbake.scripted import Fault, Reply

ROOT = Path(__file__).resolve().parents[2]
# The version the claude-code image bakes: the gateway is tested against what rollouts run.
CLAUDE_CODE_VERSION = orjson.loads((ROOT / "images" / "claude-code" / "lock.json").read_bytes())["agent"]["version"]
PREFIX = ROOT / ".cache" / "npm" / "claude-code"


def _version(binary: Path) -> str:
    try:
        result = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except OSError:
        return ""
    return result.stdout.strip()


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    """Claude Code from npm in a cache prefix, installed once and reused on later runs."""
    package = PREFIX / "node_modules" / "@anthropic-ai"
    wrapper = package / "claude-code" / "bin" / "claude.exe"
    # The platform package holds the same binary; used directly if npm skipped the postinstall link.
    native = package / "claude-code-linux-x64" / "claude"
    for binary in (wrapper, native):
        if binary.exists() and _version(binary).startswith(CLAUDE_CODE_VERSION):
            return binary
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CI"):
            pytest.fail("npm is needed to install Claude Code")
        pytest.skip("npm is not installed")
    PREFIX.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(PREFIX),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}",
        ],
        check=True,
        timeout=900,
    )
    for binary in (wrapper, native):
        if binary.exists() and _version(binary).startswith(CLAUDE_CODE_VERSION):
            return binary
    pytest.fail(f"Claude Code {CLAUDE_CODE_VERSION} did not install a working binary under {PREFIX}")


def _env(gw_url: str, home: Path) -> dict[str, str]:
    """A fully offline headless run (see agentbake/gateway/README.md, "What Claude Code sends"), fresh HOME."""
    home.mkdir()
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gw_url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",
        "CLAUDE_CODE_MAX_RETRIES": "3",
    }


def _tool_calls_so_far(request: dict) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "assistant" and m.get("tool_calls"))


def test_claude_code_runs_a_task_through_the_gateway(claude_bin, make_gateway, upstream, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    written = work / "written.txt"

    def agent(request: dict) -> Reply:
        """Bash first, then Write, then a final answer: one model call per step."""
        step = _tool_calls_so_far(request)
        if step == 0:
            # With reasoning, as vLLM's reasoning parser returns it: Claude Code must take the thinking block.
            return Reply(
                text="Running a command.",
                reasoning="The user wants a file; Bash can write it.",
                tool_calls=[("Bash", {"command": "echo bash-ran > proof.txt"})],
                tool_call_ids=["call_0"],
            )
        if step == 1:
            content = {"file_path": str(written), "content": "written by the model\n"}
            return Reply(text="", tool_calls=[("Write", content)], tool_call_ids=["call_0"])
        return Reply(text="All done.")

    upstream.fake.responder = agent
    gw = make_gateway(model_override="fake-model", read_timeout_s=60.0)
    result = subprocess.run(
        [
            claude_bin,
            "-p",
            "--output-format",
            "json",
            "--dangerously-skip-permissions",
            "--model",
            "claude-sonnet-4-5",
        ],
        input="Write proof.txt with a shell command, then create written.txt.",
        capture_output=True,
        text=True,
        cwd=work,
        env=_env(gw.url + "/r/cc-e2e", tmp_path / "home"),
        timeout=240,
    )
    assert result.returncode == 0, f"stdout={result.stdout[-2000:]}\nstderr={result.stderr[-2000:]}"
    outcome = orjson.loads(result.stdout)
    assert outcome["is_error"] is False
    assert outcome["result"] == "All done."

    assert (work / "proof.txt").read_text() == "bash-ran\n"  # the Bash tool call ran
    assert written.read_text() == "written by the model\n"  # the Write tool call ran

    # The fake numbers calls per answer (call_0 twice, like some servers); the gateway gave the repeat a
    # fresh id, and each tool result follows the assistant call it answers.
    third = upstream.fake.requests[-1]["messages"]
    calls = [m["tool_calls"][0]["id"] for m in third if m.get("tool_calls")]
    assert calls[0] == "call_0" and calls[1].startswith("toolu_")
    assert next(m["content"] for m in third if m.get("tool_calls")) == "Running a command."  # no thinking text
    results = [m for m in third if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == calls
    assert [third[third.index(m) - 1].get("tool_calls", [{}])[0].get("id") for m in results] == calls

    records = gw.records()
    assert len(records) == len(upstream.fake.requests) == 3
    assert [r.turn for r in records] == [0, 1, 2]
    sent = zip(upstream.fake.emitted, upstream.fake.emitted_logprobs, strict=True)
    for record, (emitted, logprobs) in zip(records, sent, strict=True):
        assert record.rollout_id == "cc-e2e"
        assert record.dialect == "anthropic"
        assert record.upstream_error is None
        assert record.retry_of is None
        assert record.request["stream"] is True  # Claude Code streamed and never fell back
        assert record.completion_token_ids and record.completion_token_ids == emitted
        assert record.per_token_logps == logprobs  # the values the upstream sent, token by token
        assert record.request["model"] == "fake-model"
        assert record.request["max_tokens"] <= 8192
    # Claude Code's billing system block never reaches the model.
    for request in upstream.fake.requests:
        assert "x-anthropic-billing-header" not in orjson.dumps(request["messages"]).decode()


def test_claude_code_recovers_from_upstream_faults_and_retries_are_marked(claude_bin, make_gateway, upstream, tmp_path):
    """503 before the answer (-> 529, retried with backoff), then a stream cut mid-way (-> SSE error event,
    re-sent): Claude Code still finishes, and the trace marks each repeated call with the turn it repeats."""
    upstream.fake.script = [Fault(status=503, message="engine busy"), Reply(text="one two three four", reset_after=2)]
    upstream.fake.responder = lambda request: Reply(text="Recovered.")
    gw = make_gateway(read_timeout_s=60.0)
    result = subprocess.run(
        [claude_bin, "-p", "--output-format", "json", "--dangerously-skip-permissions", "--model", "claude-sonnet-4-5"],
        input="Say something.",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(gw.url, tmp_path / "home"),
        timeout=240,
    )
    assert result.returncode == 0, f"stdout={result.stdout[-2000:]}\nstderr={result.stderr[-2000:]}"
    assert orjson.loads(result.stdout)["result"] == "Recovered."

    records = gw.records()
    assert len(records) == len(upstream.fake.requests) >= 3
    busy, cut, *rest = records
    assert busy.upstream_status == 503 and "engine busy" in busy.upstream_error and busy.retry_of is None
    assert "cut mid-way" in cut.upstream_error and cut.retry_of == busy.turn
    assert cut.completion_token_ids == upstream.fake.emitted[0][:2]
    assert rest[0].retry_of == cut.turn and rest[-1].ok
    assert rest[-1].completion_token_ids == upstream.fake.emitted[-1]
