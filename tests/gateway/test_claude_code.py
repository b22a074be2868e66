"""The real Claude Code CLI, headless, through the gateway against the scripted upstream."""

from __future__ import annotations

import itertools
from unittest.mock import ANY

import orjson

from agentbake.gateway import check
from agentbake.scripted import Fault, Reply, ScriptedModel
from agentbake.serve import serve_in_thread
from tests.runner.rollouts import write_task

from .conftest import run_claude_code, tool_calls_so_far


def test_claude_code_runs_a_task_through_the_gateway(claude_bin, make_gateway, upstream, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    written = work / "written.txt"

    def agent(request: dict) -> Reply:
        """Bash first, then Write, then a final answer: one model call per step."""
        step = tool_calls_so_far(request)
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
    prompt = "Write proof.txt with a shell command, then create written.txt."
    result = run_claude_code(claude_bin, prompt, gw_url=gw.url + "/r/cc-e2e", cwd=work, home=tmp_path / "home")
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
    result = run_claude_code(claude_bin, "Say something.", gw_url=gw.url, cwd=tmp_path, home=tmp_path / "home")
    assert orjson.loads(result.stdout)["result"] == "Recovered."

    records = gw.records()
    assert len(records) == len(upstream.fake.requests) >= 3
    busy, cut, *rest = records
    assert busy.upstream_status == 503 and "engine busy" in busy.upstream_error and busy.retry_of is None
    assert "cut mid-way" in cut.upstream_error and cut.retry_of == busy.turn
    assert cut.completion_token_ids == upstream.fake.emitted[0][:2]
    assert rest[0].retry_of == cut.turn and rest[-1].ok
    assert rest[-1].completion_token_ids == upstream.fake.emitted[-1]


def test_claude_code_through_token_in_extends_every_turn_exactly_where_the_chat_route_drifts(
    claude_bin, tokenizer_dir, make_gateway, tmp_path
):
    """The scripted model plays a two-step solve.sh in a real tokenizer's ids, sampling non-canonical tokenizations;
    every agent call after the first continues the one before through /v1/completions with zero drift, while the
    chat route's re-tokenization of the same requests diverges inside what was sampled."""
    task = write_task(
        tmp_path / "tasks", "two-steps", solve="echo one > steps.txt\n\necho two >> steps.txt\n", test="true\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    model = ScriptedModel(tasks=[task], tokenizer=tokenizer_dir, piecewise=True)
    with serve_in_thread(model, log_level="critical") as served:
        gw = make_gateway(upstream=served.url + "/v1", tokenizer=tokenizer_dir, read_timeout_s=60.0)
        instruction = (task / "instruction.md").read_text()
        run_claude_code(claude_bin, instruction, gw_url=gw.url + "/r/cc-token-in", cwd=work, home=tmp_path / "home")
    assert (work / "steps.txt").read_text() == "one\ntwo\n"  # both steps ran

    agent_calls = [r for r in gw.records() if r.request.get("tools")]
    assert len(agent_calls) == 3  # two steps, then the closing text
    assert agent_calls[0].token_in["route"] == "chat"
    for previous, record in itertools.pairwise(agent_calls):
        assert record.token_in == {"route": "completions", "continues": previous.turn, "new_tokens": ANY}
        whole = previous.prompt_token_ids + previous.completion_token_ids
        assert record.prompt_token_ids[: len(whole)] == whole  # 0 drift
        # What the chat route would have sent: the same request rendered and tokenized whole, which drifts.
        rendered = model.vocab.render_prompt(record.request)
        assert rendered[: len(whole)] != whole
        assert model.vocab.decode(rendered, skip_special_tokens=False) == model.vocab.decode(
            record.prompt_token_ids, skip_special_tokens=False
        )  # the same text: only the tokenization of what was sampled differs
    (rollout,) = check(gw.records())
    assert rollout.consistent and rollout.rerendered == 0
