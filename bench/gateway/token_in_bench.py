"""What token-in adds to a gateway call: `TokenIn.plan` (digests of the messages, the conversation rendered twice by
the chat template, the new messages tokenized) on Claude-Code-sized conversations, beside what the chat route
makes the server do instead (the whole conversation rendered once and tokenized whole). Prints a table of p50 /
p95 milliseconds per call; the tokenizer is the tests' (tests/tiny_tokenizer.py) unless `--tokenizer DIR`.

    python bench/gateway/token_in_bench.py [--runs 30] [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from agentbake.gateway.template import FolderTemplate
from agentbake.gateway.token_in import TokenIn

REPO = Path(__file__).resolve().parents[2]
sys.path[0] = str(REPO)  # the repo in place of this folder, whose bench.py would shadow the bench package

from bench.gateway.bench import timed  # noqa: E402
from tests.tiny_tokenizer import build_tokenizer  # noqa: E402

SYSTEM = "You are an agent that edits code with the tools below. " * 700  # ~40 KB, as Claude Code's
TOOL = {
    "type": "function",
    "function": {
        "name": "Bash",
        "description": "Run a shell command. " * 200,
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


def conversation(rounds: int) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the failing test."}]
    for n in range(rounds):
        arguments = f'{{"command": "pytest -x tests/test_{n}.py"}}'
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "Bash", "arguments": arguments}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": f"line {n} of output\n" * 100})
    return messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tokenizer", type=Path)
    args = parser.parse_args()
    folder = args.tokenizer or build_tokenizer(Path(tempfile.mkdtemp(prefix="agentbake-bench-tok-")))
    template = FolderTemplate(folder)
    print("| rounds | prompt tokens | token-in plan p50 ms | p95 ms | chat route: render + tokenize whole p50 ms |")
    print("|---|---|---|---|---|")
    for rounds in (1, 10, 40):
        messages = conversation(rounds)
        earlier = {"model": "m", "tools": [TOOL], "messages": messages[:-2]}
        body = {"model": "m", "tools": [TOOL], "messages": messages}
        prompt = template.encode(template.render(earlier["messages"], [TOOL], generation_prompt=True))
        sampled = template.encode(template.render(messages[:-1], [TOOL], generation_prompt=False))[len(prompt) :]
        planner = TokenIn(template)
        planner.answered("r", 0, earlier, prompt, sampled[: sampled.index(template.eos_id) + 1], messages[-2])
        plan = planner.plan("r", body)
        assert plan.prefix is not None, plan.record
        prompt_len = len(plan.prefix) + len(template.encode(plan.suffix))

        def token_in() -> list[int]:
            plan = planner.plan("r", body)  # noqa: B023
            return [*plan.prefix, *template.encode(plan.suffix)]

        p50, p95 = timed(token_in, args.runs)
        whole, _ = timed(
            lambda: template.encode(template.render(messages, [TOOL], generation_prompt=True)),  # noqa: B023
            args.runs,
        )
        print(f"| {rounds} | {prompt_len} | {p50:.2f} | {p95:.2f} | {whole:.2f} |")


if __name__ == "__main__":
    main()
