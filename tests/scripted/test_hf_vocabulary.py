"""The scripted model with a real tokenizer (`tokenizer=DIR`): ids in that vocabulary, prompts rendered by its
chat template, answers written as that template renders them, so a multi-turn conversation chains."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from agentbake.errors import ConfigError
from agentbake.scripted import Reply, ScriptedModel

CAPTURE = {"logprobs": True, "top_logprobs": 3, "return_tokens_as_token_ids": True, "return_token_ids": True}
BASH = {
    "type": "function",
    "function": {
        "name": "Bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}


def test_a_conversation_chains_in_the_tokenizers_ids_streamed_and_unary(served, tokenizer_dir: Path) -> None:
    model, client = served
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    command = {"command": 'printf "a\\tb" > out.txt && cat out.txt  # ünïcode'}
    model.script = [Reply(text="Let me write it.", tool_calls=[("Bash", command)]), Reply(text="Done: out.txt.")]
    messages: list = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Write out.txt"}]
    chunks = list(
        client.chat.completions.create(model="m", messages=messages, tools=[BASH], stream=True, extra_body=CAPTURE)
    )
    # The stream's tool-call deltas rebuild the arguments exactly, as a hermes-parsing vLLM streams them.
    arguments = "".join(
        c.choices[0].delta.tool_calls[0].function.arguments or ""
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
    )
    assert json.loads(arguments) == command
    first_prompt = chunks[0].model_extra["prompt_token_ids"]
    first_completion = [i for c in chunks if c.choices for i in c.choices[0].model_extra.get("token_ids") or []]
    assert first_completion == model.emitted[0]
    # The prompt is the tokenizer's own chat template, tokenized as vLLM does (no special tokens added).
    rendered = tokenizer.apply_chat_template(messages, tools=[BASH], add_generation_prompt=True, tokenize=False)
    assert first_prompt == tokenizer.encode(rendered, add_special_tokens=False)
    assert first_completion[-1] == tokenizer.eos_token_id
    assert all(0 <= i < len(tokenizer) for i in first_prompt + first_completion)

    # The client sends the answer back (its arguments re-spaced, as clients do) with the tool's result.
    call = {"id": "call_1", "type": "function", "function": {"name": "Bash", "arguments": json.dumps(command)}}
    messages += [
        {"role": "assistant", "content": "Let me write it.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a\tb"},
    ]
    second = client.chat.completions.create(model="m", messages=messages, tools=[BASH], extra_body=CAPTURE)
    second_prompt = second.model_extra["prompt_token_ids"]
    assert second_prompt[: len(first_prompt) + len(first_completion)] == first_prompt + first_completion
    assert second.choices[0].message.content == "Done: out.txt."
    assert tokenizer.decode(second.choices[0].model_extra["token_ids"]) == "Done: out.txt.<|im_end|>"
    # Logprob entries name the same ids, and the alternatives are ids of this vocabulary too.
    entries = second.choices[0].logprobs.content
    assert [int(e.token.removeprefix("token_id:")) for e in entries] == model.emitted[1]
    assert all(0 <= int(t.token.removeprefix("token_id:")) < len(tokenizer) for e in entries for t in e.top_logprobs)


def test_tokenize_route_uses_the_tokenizer(served, tokenizer_dir: Path) -> None:
    _, client = served
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    base = str(client.base_url).removesuffix("/v1/")
    answer = client._client.post(base + "/tokenize", json={"prompt": "hello world", "return_token_strs": True})
    body = answer.json()
    assert body["tokens"] == tokenizer.encode("hello world", add_special_tokens=False)
    assert body["token_strs"] == tokenizer.convert_ids_to_tokens(body["tokens"])


def test_a_folder_without_a_tokenizer_or_with_another_template_is_refused(tokenizer_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no tokenizer\.json there"):
        ScriptedModel(tokenizer=tmp_path)
    other = tmp_path / "other"
    shutil.copytree(tokenizer_dir, other)
    template = other / "chat_template.jinja"  # where transformers saves the template
    template.write_text(template.read_text().replace("<tool_call>", "<call>"))  # tool calls in another layout
    with pytest.raises(ConfigError, match=r"renders an assistant message as .*<call>.* but the scripted model writes"):
        ScriptedModel(tokenizer=other)
