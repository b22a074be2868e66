"""Traces written by the real gateway in front of the scripted model with consistent prompt ids, exported.

Each test drives a conversation through the official OpenAI SDK (a chat agent loop), then checks the graph
and sequences against what the upstream really emitted (its prompt ids and completion ids per call).
"""

from __future__ import annotations

import json

import openai
import orjson
import pytest

from agentbake.export import export_rollout, to_trl
from agentbake.export.reader import fast_keys
from agentbake.scripted import Reply
from agentbake.scripted.chat_template import render_consistent

BASH = {
    "type": "function",
    "function": {
        "name": "Bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
SYSTEM = {"role": "system", "content": "You are a coding agent."}


@pytest.fixture
def gw(make_gateway, upstream):
    upstream.fake.render_prompt = render_consistent
    return make_gateway()


class Agent:
    """A minimal tool loop: keeps the conversation and sends it back as a client does."""

    def __init__(self, gw, rollout: str, *, system: dict = SYSTEM, tools: list | None = None) -> None:
        self.client = openai.OpenAI(
            base_url=f"{gw.url}/r/{rollout}/v1", api_key="k", max_retries=0, http_client=gw.http_client()
        )
        self.messages: list[dict] = [system]
        self.tools = [BASH] if tools is None else tools

    def ask(self, *, stream: bool = False, extra: list[dict] | None = None, keep: bool = True) -> dict:
        """One call; the answer (and a tool result for each call) joins the history when `keep`."""
        messages = self.messages + (extra or [])
        kwargs = {"tools": self.tools} if self.tools else {}
        if stream:
            chunks = list(self.client.chat.completions.create(model="m", messages=messages, stream=True, **kwargs))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            calls: dict[int, dict] = {}
            for c in chunks:
                for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
                    slot = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] += d.id or ""
                    slot["name"] += (d.function.name or "") if d.function else ""
                    slot["arguments"] += (d.function.arguments or "") if d.function else ""
            tool_calls = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls.values()
            ]
        else:
            answer = self.client.chat.completions.create(model="m", messages=messages, **kwargs).choices[0].message
            text = answer.content or ""
            tool_calls = [t.model_dump() for t in answer.tool_calls or []]
        message = {"role": "assistant", "content": text}
        if tool_calls:
            message["tool_calls"] = tool_calls
        if keep:
            self.messages = [*messages, message]
            for call in tool_calls:
                self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok\n"})
        return message


def bash(command: str) -> Reply:
    return Reply(text="Running it.", tool_calls=[("Bash", {"command": command})])


def truth(upstream) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) of every answered call, as the scripted model computed them."""
    return [(render_consistent(r), e) for r, e in zip(upstream.fake.requests, upstream.fake.emitted, strict=True)]


def by_role(document: dict, role: str) -> list[dict]:
    return [s for s in document["sequences"] if s["role"] == role]


def check_sampled(sequence: dict, calls: list[tuple[list[int], list[int]]]) -> None:
    """The sequence's masked ids are exactly the completion ids of its calls, in order."""
    sampled = [i for i, m in zip(sequence["input_ids"], sequence["loss_mask"], strict=True) if m]
    assert sampled == [i for _, completion in calls for i in completion]
    assert all((lp is None) == (not m) for lp, m in zip(sequence["logprobs"], sequence["loss_mask"], strict=True))


def test_a_tool_loop_is_one_agent_sequence_equal_to_the_last_call(gw, upstream):
    upstream.fake.script = [bash("ls"), bash("cat x"), Reply(text="Done.")]
    agent = Agent(gw, "loop")
    agent.messages.append({"role": "user", "content": "List files, then read x."})
    agent.ask(stream=True)
    agent.ask()
    agent.ask(stream=True)

    document = export_rollout(gw.trace, "loop")
    calls = truth(upstream)
    (sequence,) = document["sequences"]
    last_prompt, last_completion = calls[-1]
    assert sequence["role"] == "agent" and sequence["turns"] == [0, 1, 2]
    assert sequence["input_ids"] == last_prompt + last_completion
    assert sequence["prompt_len"] == len(calls[0][0])
    assert sum(sequence["loss_mask"]) == sum(len(c) for _, c in calls)
    assert sequence["prompt_len"] + sum(sequence["turn_lengths"]) == len(sequence["input_ids"])
    check_sampled(sequence, calls)
    records = gw.records()
    logps = [lp for lp in sequence["logprobs"] if lp is not None]
    assert logps == [lp for r in records for lp in r.per_token_logps]
    assert [c["parent"] for c in document["calls"]] == [None, 0, 1]
    for line in gw.trace.read_bytes().splitlines(keepends=True):  # pass 1's shortcut reads the gateway's records
        full = orjson.loads(line)
        assert fast_keys(line) == {k: full[k] for k in ("turn", "schema_version", "rollout_id")}
    errors = [f for f in document["validation"]["findings"] if f["severity"] == "error"]
    assert errors == [] and document["validation"]["trainable"] is True

    trl = to_trl(document)  # TRL's row: the first prompt, then everything after it, env_mask on sampled ids
    assert trl["prompt_ids"] == calls[0][0]
    assert trl["prompt_ids"] + trl["completion_ids"] == last_prompt + last_completion
    sampled = [i for i, m in zip(trl["completion_ids"], trl["env_mask"], strict=True) if m]
    assert sampled == [i for _, c in calls for i in c]
    assert [lp for lp, m in zip(trl["logprobs"], trl["env_mask"], strict=True) if m] == logps


def test_a_retried_turn_is_a_discarded_sibling(gw, upstream):
    upstream.fake.script = [bash("ls"), Reply(text="one two three four", reset_after=2), Reply(text="Finished.")]
    agent = Agent(gw, "retry")
    agent.messages.append({"role": "user", "content": "Go."})
    agent.ask()
    with pytest.raises(openai.APIError):
        agent.ask(stream=True, keep=False)  # the stream is cut: the client re-sends the same call
    agent.ask()

    document = export_rollout(gw.trace, "retry")
    assert [c["retry_of"] for c in document["calls"]] == [None, None, 1]
    assert [c["parent"] for c in document["calls"]] == [None, 0, 0]  # the retry is a sibling of the cut call
    (discarded,) = by_role(document, "discarded")
    (agent_sequence,) = by_role(document, "agent")
    assert discarded["turns"] == [0, 1] and discarded["trainable"] is False
    assert agent_sequence["turns"] == [0, 2] and agent_sequence["trainable"] is True
    assert document["validation"]["trainable"] is True
    codes = {f["code"] for f in document["validation"]["findings"]}
    assert not codes & {"retry_mismatch", "unmarked_retry", "retried_call_continued"}


def test_a_side_call_without_tools_is_auxiliary(gw, upstream):
    upstream.fake.script = [bash("ls"), Reply(text="Listing files"), Reply(text="Done.")]
    agent = Agent(gw, "side")
    agent.messages.append({"role": "user", "content": "List files."})
    agent.ask()
    title = Agent(gw, "side", system={"role": "system", "content": "Write a 3-word title."}, tools=[])
    title.messages.append({"role": "user", "content": "List files."})
    title.ask()
    agent.ask()

    document = export_rollout(gw.trace, "side")
    (auxiliary,) = by_role(document, "auxiliary")
    (agent_sequence,) = by_role(document, "agent")
    assert auxiliary["turns"] == [1] and agent_sequence["turns"] == [0, 2]
    assert document["validation"]["trainable"] is True


def test_a_system_prompt_swap_and_a_compaction_start_new_agent_sequences(gw, upstream):
    upstream.fake.script = [bash("ls"), bash("pwd"), bash("cat a"), Reply(text="Done.")]
    agent = Agent(gw, "rewrites")
    agent.messages.append({"role": "user", "content": "Work."})
    agent.ask()
    agent.messages[0] = {"role": "system", "content": "You are a coding agent. Plan mode is off."}  # swapped
    agent.ask()
    agent.messages = [SYSTEM, {"role": "user", "content": "Summary: ran ls and pwd. Continue."}]  # compaction
    agent.ask()
    agent.ask()

    document = export_rollout(gw.trace, "rewrites")
    calls = truth(upstream)
    assert [s["turns"] for s in document["sequences"]] == [[0], [1], [2, 3]]
    assert {s["role"] for s in document["sequences"]} == {"agent"}
    for sequence in document["sequences"]:
        check_sampled(sequence, [calls[t] for t in sequence["turns"]])
    assert "broken_prefix" not in {f["code"] for f in document["validation"]["findings"]}
    assert document["validation"]["trainable"] is True


def test_a_subagent_is_its_own_agent_sequence(gw, upstream):
    upstream.fake.script = [
        Reply(text="Delegating.", tool_calls=[("Task", {"prompt": "find x"})]),
        bash("find . -name x"),
        Reply(text="x is in ./a."),
        Reply(text="Found it."),
    ]
    main = Agent(gw, "sub")
    main.messages.append({"role": "user", "content": "Where is x?"})
    main.ask()
    sub = Agent(gw, "sub", system={"role": "system", "content": "You are a search subagent."})
    sub.messages.append({"role": "user", "content": "find x"})
    sub.ask()
    sub.ask()
    main.ask()

    document = export_rollout(gw.trace, "sub")
    assert sorted(s["turns"] for s in by_role(document, "agent")) == [[0, 3], [1, 2]]
    assert document["validation"]["trainable"] is True


def test_respaced_tool_arguments_keep_the_link_and_dropped_reasoning_breaks_it(gw, upstream):
    upstream.fake.script = [
        Reply(text="", tool_calls=[("Bash", {"command": "ls", "timeout": 5})]),
        Reply(text="Thinking done.", reasoning="The listing is empty.", tool_calls=[("Bash", {"command": "pwd"})]),
        Reply(text="Done."),
    ]
    agent = Agent(gw, "reserialise")
    agent.messages.append({"role": "user", "content": "Go."})
    first = agent.ask()
    arguments = json.loads(first["tool_calls"][0]["function"]["arguments"])
    respaced = json.dumps(arguments, indent=1, separators=(",", " :  "))  # the client re-spaces it
    agent.messages[2]["tool_calls"][0]["function"]["arguments"] = respaced
    agent.ask()  # this answer's reasoning is not sent back, as clients (and Qwen3's template) drop it
    agent.ask()

    document = export_rollout(gw.trace, "reserialise")
    assert [c["parent"] for c in document["calls"]] == [None, 0, 0]
    (broken,) = [f for f in document["validation"]["findings"] if f["code"] == "broken_prefix"]
    assert broken["turn"] == 2 and broken["severity"] == "warning"
    assert "turn 1" in broken["message"]
    assert document["validation"]["trainable"] is True  # each sequence is still exact
