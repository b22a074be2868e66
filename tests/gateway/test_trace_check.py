"""Multi-turn token consistency: per record (`prefix`) and per rollout (`agentbake trace check`).

The scripted upstream renders prompts either as a well-behaved chat template does (an assistant turn of the
history becomes exactly the ids it sampled: its default) or, as Qwen3's template does, with the reasoning of
earlier turns dropped, which breaks the chain.
"""

from __future__ import annotations

import itertools
import json

import openai
from click.testing import CliRunner

from agentbake.cli import main
from agentbake.scripted import Reply
from agentbake.scripted.tokens import render_prompt

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "Bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
SCRIPT = [
    Reply(reasoning="list first", text="Looking.", tool_calls=[("Bash", {"command": "ls"})]),
    Reply(reasoning="now read", text="Reading.", tool_calls=[("Bash", {"command": "cat a.txt"})]),
    Reply(text="Done."),
]


def render_without_reasoning(request: dict) -> list[int]:
    """A chat template that drops the reasoning of earlier assistant turns (Qwen3's does)."""
    messages = [{k: v for k, v in m.items() if k != "reasoning"} for m in request["messages"]]
    return render_prompt({**request, "messages": messages})


def tool_loop(gateway, rollout: str) -> list[dict]:
    """Three calls of an agent loop that sends its history back as received; returns the last request."""
    client = openai.OpenAI(base_url=f"{gateway.url}/r/{rollout}/v1", api_key="k", max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "look at a.txt"}]
    for _ in SCRIPT:
        sent = list(messages)
        message = client.chat.completions.create(model="m", messages=sent, tools=TOOLS).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt"})
    return sent


def check(trace, *options: str):
    return CliRunner().invoke(main, ["trace", "check", *options, str(trace)])


def test_a_template_that_renders_history_as_sampled_extends_every_turn(gateway, upstream):
    upstream.fake.script = list(SCRIPT)
    last = tool_loop(gateway, "good")
    upstream.fake.script = [SCRIPT[-1]]  # the client retries the last call
    openai.OpenAI(base_url=f"{gateway.url}/r/good/v1", api_key="k", max_retries=0).chat.completions.create(
        model="m", messages=last, tools=TOOLS
    )

    records = gateway.records()
    assert [r.turn for r in records] == [0, 1, 2, 3] and records[3].retry_of == 2
    assert records[0].prefix is None  # nothing before the first call
    assert records[1].prefix == {"previous_turn": 0, "extends": True}
    assert records[2].prefix == {"previous_turn": 1, "extends": True}
    # A retry is compared with what its original was compared with, not with the original itself.
    assert records[3].prefix == {"previous_turn": 1, "extends": True}
    # The claim is checked against the ids themselves, not only the gateway's word.
    for previous, record in itertools.pairwise(records[:3]):
        head = previous.prompt_token_ids + previous.completion_token_ids
        assert record.prompt_token_ids[: len(head)] == head
    assert all(r.capture == {"verdict": "complete", "reasons": []} for r in records)

    result = check(gateway.trace)
    assert result.exit_code == 0, result.output
    assert "rollout good: 4 calls, 3 checked: 3 extend, 0 restart, 0 re-rendered; capture complete 4" in result.output
    (report,) = [json.loads(line) for line in check(gateway.trace, "--json").output.splitlines()]
    assert report["consistent"] is True and report["breaks"] == [] and report["extends"] == 3


def test_a_template_that_drops_reasoning_is_caught_with_the_index_and_ids(gateway, upstream):
    upstream.fake.render_prompt = render_without_reasoning
    upstream.fake.script = list(SCRIPT)
    tool_loop(gateway, "bad")

    first, second, third = gateway.records()
    prefix = second.prefix
    assert prefix["previous_turn"] == 0 and prefix["extends"] is False and prefix["diverged_in"] == "completion"
    at = prefix["diverged_at"]
    sampled = first.prompt_token_ids + first.completion_token_ids
    assert at == len(first.prompt_token_ids)  # the whole previous prompt was repeated, then no <think> ...
    assert second.prompt_token_ids[:at] == sampled[:at] and second.prompt_token_ids[at] != sampled[at]  # ... then not
    start = prefix["around"]
    assert prefix["expected"] == sampled[start : at + 3] and prefix["found"] == second.prompt_token_ids[start : at + 3]
    assert third.prefix["previous_turn"] == 1 and third.prefix["extends"] is False

    result = check(gateway.trace)
    assert result.exit_code == 1
    assert "rollout bad: 3 calls, 2 checked: 0 extend, 0 restart, 2 re-rendered" in result.output
    assert f"turn 1 vs turn 0: diverges at {at} (in the previous completion)" in result.output
    (report,) = [json.loads(line) for line in check(gateway.trace, "--json").output.splitlines()]
    assert report["consistent"] is False and [b["turn"] for b in report["breaks"]] == [1, 2]


def test_another_conversation_in_between_is_a_restart_not_a_re_render(gateway, upstream):
    client = openai.OpenAI(base_url=f"{gateway.url}/r/side/v1", api_key="k", max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "task"}])
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a title please"}])
    (_, side) = gateway.records()
    assert side.prefix["extends"] is False and side.prefix["diverged_in"] == "prompt"
    result = check(gateway.trace)
    assert result.exit_code == 0 and "1 restart, 0 re-rendered" in result.output


def test_check_of_a_trace_of_an_unknown_schema_is_a_clean_cli_error(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"turn": 0, "schema_version": 9, "request": {}, "response": null}\n')
    result = check(path)
    assert result.exit_code == 1 and "trace.jsonl:1: trace record schema_version 9 is not one" in result.output
