"""vLLM's `/v1/completions` for the scripted model: a token-id or text prompt in, plain text out.

The ids are decoded and the ChatML conversation in them read back into messages and tools for the policy. The answer
takes vLLM 0.34's completions shape, legacy logprobs and token ids included. It parses no tool calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from agentbake.gateway.tool_parse_hermes import parse_hermes
from agentbake.scripted import tokens as tk
from agentbake.scripted.vllm import CREATED, SYSTEM_FINGERPRINT, Completion, error_body

_TOOL_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
# What a completions request says that the policy and the logprobs read as a chat request does.
_SAMPLING = ("model", "temperature", "top_p", "max_tokens", "stream", "stream_options")
_CAPTURE = ("return_token_ids", "return_tokens_as_token_ids")


def prompt_error(request: dict[str, Any], vocab: tk.Vocabulary) -> dict | None:
    """vLLM's 400 for a prompt this server cannot take (one prompt only: ids or text), or None."""
    prompt = request.get("prompt")
    ids = isinstance(prompt, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt)
    if not (ids and prompt) and not isinstance(prompt, str):
        return error_body("prompt: expected one prompt, a string or a list of token ids", 400, param="prompt")
    if vocab.decode([], skip_special_tokens=False) is None:
        message = "this scripted model has no tokenizer to read a completions prompt with: start it with a tokenizer"
        return error_body(message, 400, param="prompt")
    return None


def chat_of(prompt: str) -> dict[str, Any]:
    """The messages and tools of a ChatML prompt (the assistant's open turn at its end left out)."""
    messages: list[dict[str, Any]] = []
    tools: list[Any] = []
    for segment in prompt.split("<|im_start|>")[1:]:
        body, closed, _ = segment.partition("<|im_end|>")
        if not closed:
            break
        role, _, content = body.partition("\n")
        if role == "system" and "<tools>" in content:
            head, _, rest = content.partition("<tools>")
            tools = [json.loads(line) for line in rest.partition("</tools>")[0].splitlines() if line.strip()]
            system = head.partition("# Tools")[0].strip()
            if system:
                messages.append({"role": "system", "content": system})
        elif role == "assistant":
            text, calls = parse_hermes(content)
            message: dict[str, Any] = {"role": "assistant", "content": (text or "").removesuffix("\n")}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": f"call_{len(messages)}_{n}",
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for n, c in enumerate(calls)
                ]
            messages.append(message)
        elif role == "user" and content.startswith("<tool_response>"):
            asked = [c["id"] for m in messages[-1:] for c in m.get("tool_calls") or []]
            for n, result in enumerate(_TOOL_RESPONSE.findall(content)):
                call_id = asked[n] if n < len(asked) else f"call_{n}"
                messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        else:
            messages.append({"role": role, "content": content})
    return {"messages": messages, "tools": tools}


def chat_request(request: dict[str, Any], prompt: str) -> dict[str, Any]:
    """The chat request a completions request amounts to, for the policy and the logprobs."""
    chat = {**chat_of(prompt), **{k: request[k] for k in (*_SAMPLING, *_CAPTURE) if k in request}}
    top = request.get("logprobs")
    if isinstance(top, int) and not isinstance(top, bool):
        chat["logprobs"] = True
        chat["top_logprobs"] = top + 1  # the sampled token, then `top` alternatives
    return chat


class CompletionsAnswer:
    """One scripted `Completion` in the completions route's shapes (see the module docstring)."""

    def __init__(self, completion: Completion, request: dict[str, Any], prompt_ids: list[int]) -> None:
        self.completion = completion
        self.request = request
        self.prompt_ids = prompt_ids
        self.skip_special = request.get("skip_special_tokens", True) is not False
        self.finish = "stop" if completion.finish == "tool_calls" else completion.finish
        self.id = "cmpl-" + completion.id.removeprefix("chatcmpl-")
        tokens = completion.tokens
        # The end-of-sequence token ends the answer; its text is never written.
        written = len(tokens) - 1 if tokens and completion.finish in ("stop", "tool_calls") else len(tokens)
        self.pieces = self._pieces([t.id for t in tokens[:written]]) + [""] * (len(tokens) - written)
        """The text each token adds, as vLLM's incremental detokenizer shows it (a character split over tokens
        comes with its last one)."""
        self.offsets = [0]
        for piece in self.pieces:
            self.offsets.append(self.offsets[-1] + len(piece))

    def _pieces(self, ids: list[int]) -> list[str]:
        """Each token's text, decoded over a window of the tokens before it (not the whole prefix each time)."""
        decode = self.completion.vocab.decode
        pieces, prefix, read = [], 0, 0
        for end in range(1, len(ids) + 1):
            before = str(decode(ids[prefix:read], skip_special_tokens=self.skip_special))
            after = str(decode(ids[prefix:end], skip_special_tokens=self.skip_special))
            if len(after) > len(before) and not after.endswith("\ufffd"):
                pieces.append(after[len(before) :])
                prefix, read = read, end
            else:
                pieces.append("")
        if read < len(ids) and pieces:  # the answer ends inside a character: what is there, as vLLM flushes it
            before = str(decode(ids[prefix:read], skip_special_tokens=self.skip_special))
            pieces[-1] = str(decode(ids[prefix:], skip_special_tokens=self.skip_special))[len(before) :]
        return pieces

    def _logprobs(self, start: int, count: int) -> dict[str, Any] | None:
        if not self.completion.request.get("logprobs"):
            return None
        legacy: dict[str, list] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        for position in range(start, start + count):
            entry = self.completion._entry(position, self.completion.tokens[position], stream=False)
            legacy["tokens"].append(entry["token"])
            legacy["token_logprobs"].append(entry["logprob"])
            legacy["top_logprobs"].append({top["token"]: top["logprob"] for top in entry["top_logprobs"]})
            legacy["text_offset"].append(self.offsets[position])
        return legacy

    def _ids(self, ids: list[int]) -> list[int] | None:
        return ids if self.request.get("return_token_ids") else None

    def unary(self) -> dict[str, Any]:
        completion = self.completion
        choice = {
            "index": 0,
            "text": "".join(self.pieces),
            "logprobs": self._logprobs(0, len(completion.tokens)),
            "finish_reason": self.finish,
            "stop_reason": completion.stop_reason,
            "token_ids": self._ids(completion.token_ids),
            "prompt_logprobs": None,
            "prompt_token_ids": self._ids(self.prompt_ids),
        }
        return {
            "id": self.id,
            "object": "text_completion",
            "created": CREATED,
            "model": completion.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "usage": completion.usage(),
            "kv_transfer_params": None,
        }

    def chunks(self) -> Iterator[dict[str, Any]]:
        """The stream's chunks but [DONE]: one per engine step (`Completion.groups`), then usage if asked."""
        completion = self.completion
        base = {"id": self.id, "object": "text_completion", "created": CREATED, "model": completion.model}
        sent = 0
        for n, group in enumerate(completion.groups):
            final = n == len(completion.groups) - 1
            size = len(group.tokens)
            choice: dict[str, Any] = {
                "index": 0,
                "text": "".join(self.pieces[sent : sent + size]),
                "logprobs": self._logprobs(sent, size),
                "finish_reason": self.finish if final else None,
                "stop_reason": completion.stop_reason if final else None,
                "token_ids": self._ids([t.id for t in group.tokens]),
            }
            if n == 0:
                choice["prompt_token_ids"] = self._ids(self.prompt_ids)
            yield {**base, "choices": [choice]}
            sent += size
        if (self.request.get("stream_options") or {}).get("include_usage"):
            yield {**base, "choices": [], "usage": completion.usage(details=False)}
