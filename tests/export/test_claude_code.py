"""A real Claude Code run through the gateway, exported: the graph shapes a real agent produces."""

from __future__ import annotations

from agentbake.export import export_rollout
from agentbake.scripted import Reply
from agentbake.scripted.chat_template import render_consistent
from tests.gateway.conftest import run_claude_code, tool_calls_so_far


def test_a_claude_code_tool_loop_exports_as_one_trainable_agent_sequence(claude_bin, make_gateway, upstream, tmp_path):
    work = tmp_path / "work"
    work.mkdir()

    def agent(request: dict) -> Reply:
        step = tool_calls_so_far(request)
        if step < 2:
            return Reply(text=f"Step {step}.", tool_calls=[("Bash", {"command": f"echo {step} >> log.txt"})])
        return Reply(text="All done.")

    upstream.fake.responder = agent
    upstream.fake.render_prompt = render_consistent
    gw = make_gateway(model_override="fake-model", read_timeout_s=60.0)
    run_claude_code(
        claude_bin,
        "Append 0 and then 1 to log.txt with two shell commands.",
        gw_url=gw.url + "/r/cc-export",
        cwd=work,
        home=tmp_path / "home",
    )
    assert (work / "log.txt").read_text() == "0\n1\n"

    document = export_rollout(gw.trace, "cc-export")
    shape = [(c["turn"], c["parent"], c["tools"]) for c in document["calls"]]
    print("graph:", shape, [(s["role"], s["turns"]) for s in document["sequences"]])
    agents = [s for s in document["sequences"] if s["role"] == "agent"]
    assert len(agents) == 1, (shape, document["validation"]["findings"])
    (sequence,) = agents
    assert len(sequence["turns"]) == 3
    last = gw.records()[sequence["turns"][-1]]
    assert sequence["input_ids"] == last.prompt_token_ids + last.completion_token_ids
    sampled = [i for i, m in zip(sequence["input_ids"], sequence["loss_mask"], strict=True) if m]
    assert sampled == [i for t in sequence["turns"] for i in upstream.fake.emitted[t]]
    assert document["validation"]["trainable"] is True, document["validation"]["findings"]


def _first_user_text(request: dict) -> str:
    for message in request["messages"]:
        if message["role"] == "user":
            content = message["content"]
            return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
    return ""


def test_a_claude_code_subagent_is_a_second_agent_sequence(claude_bin, make_gateway, upstream, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    task = {
        "description": "List the files",
        "prompt": "SUBAGENT: list the files here.",
        "subagent_type": "general-purpose",
    }

    def agent(request: dict) -> Reply:
        step = tool_calls_so_far(request)
        if "SUBAGENT:" in _first_user_text(request):  # the subagent's own conversation
            return (
                Reply(text="Listing.", tool_calls=[("Bash", {"command": "ls"})])
                if step == 0
                else Reply(text="No files.")
            )
        if step == 0:
            return Reply(text="Delegating.", tool_calls=[("Agent", task)])
        return Reply(text="All done.")

    upstream.fake.responder = agent
    upstream.fake.render_prompt = render_consistent
    gw = make_gateway(model_override="fake-model", read_timeout_s=60.0)
    run_claude_code(
        claude_bin, "Use a subagent to list the files.", gw_url=gw.url + "/r/cc-sub", cwd=work, home=tmp_path / "home"
    )

    document = export_rollout(gw.trace, "cc-sub")
    shape = [(c["turn"], c["parent"], c["tools"]) for c in document["calls"]]
    print("graph:", shape, [(s["role"], s["turns"]) for s in document["sequences"]])
    print("findings:", [(f["code"], f["message"][:200]) for f in document["validation"]["findings"]])
    agents = sorted(s["turns"] for s in document["sequences"] if s["role"] == "agent")
    assert len(agents) == 2, (shape, document["validation"]["findings"])
    assert document["validation"]["trainable"] is True, document["validation"]["findings"]


def test_a_claude_code_retry_after_a_cut_stream_is_discarded(claude_bin, make_gateway, upstream, tmp_path):
    upstream.fake.script = [Reply(text="one two three four", reset_after=2)]
    upstream.fake.responder = lambda request: Reply(text="Recovered.")
    upstream.fake.render_prompt = render_consistent
    gw = make_gateway(read_timeout_s=60.0)
    run_claude_code(claude_bin, "Say something.", gw_url=gw.url + "/r/cc-retry", cwd=tmp_path, home=tmp_path / "home")

    document = export_rollout(gw.trace, "cc-retry")
    roles = [(s["role"], s["turns"]) for s in document["sequences"]]
    print("graph:", [(c["turn"], c["parent"], c["retry_of"]) for c in document["calls"]], roles)
    assert roles[-1] == ("agent", [len(document["calls"]) - 1])
    assert {role for role, _ in roles[:-1]} == {"discarded"} and len(roles) >= 2
    codes = {f["code"] for f in document["validation"]["findings"]}
    assert not codes & {"retry_mismatch", "unmarked_retry", "retried_call_continued"}
    assert document["validation"]["trainable"] is True
