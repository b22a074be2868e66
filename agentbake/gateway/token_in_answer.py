"""A `/v1/completions` answer turned into the chat route's answer, unary or streamed.

The text is parsed as vLLM's chat server does (tool_parse.py); ids and logprobs are kept exactly, in the chat shape. So
the capture and every dialect read a token-in answer like any other.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agentbake.gateway.capture import choices_of
from agentbake.gateway.tool_parse import (
    THINK_CLOSE,
    THINK_OPEN,
    Parsed,
    ToolParser,
    held_back,
    message_of,
    parse_completion,
)


def chat_logprobs(legacy: Any) -> dict[str, Any] | None:
    """Legacy completions logprobs as chat `logprobs` (`content` entries, alternatives in the server's order)."""
    if not isinstance(legacy, dict) or not isinstance(legacy.get("tokens"), list):
        return None
    values = legacy.get("token_logprobs") or []
    tops = legacy.get("top_logprobs") or []
    content = []
    for n, token in enumerate(legacy["tokens"]):
        top = tops[n] if n < len(tops) else None
        content.append(
            {
                "token": token,
                "logprob": values[n] if n < len(values) else None,
                "bytes": None,
                "top_logprobs": [{"token": key, "logprob": value, "bytes": None} for key, value in (top or {}).items()],
            }
        )
    return {"content": content}


def call_ids(response_id: Any, count: int) -> list[str]:
    """Tool call ids in vLLM's form, fixed by the answer's id (the same answer gets the same ids)."""
    return [
        "chatcmpl-tool-" + hashlib.blake2b(f"{response_id}:{n}".encode(), digest_size=16).hexdigest()
        for n in range(count)
    ]


def finish_of(finish: Any, parsed: Parsed) -> Any:
    """The chat route's finish reason: `stop` becomes `tool_calls` when calls were parsed."""
    return "tool_calls" if finish == "stop" and parsed.tool_calls else finish


def _head(data: dict, kind: str) -> dict[str, Any]:
    return {**{k: data[k] for k in ("id", "created", "model") if k in data}, "object": kind}


def _prompt_ids(data: dict, choice: dict) -> Any:
    prompt = choice.get("prompt_token_ids")
    return prompt if isinstance(prompt, list) else data.get("prompt_token_ids")


class CompletionAnswer:
    """Turns one call's completions answer into chat form: `unary(answer)`, or `chunk(chunk)` per stream chunk."""

    def __init__(self, eos_text: str, parser: ToolParser, tools: Any = None, *, opened: bool = False) -> None:
        self.eos_text = eos_text
        self.parser = parser
        self.tools = tools
        """The request's tools, whose schemas may type the calls' arguments."""
        self.opened = opened
        """The prompt opened `<think>`: the answer starts in its reasoning."""
        self.text = ""
        self.shown = 0
        """Characters of `text` already sent as reasoning or content."""
        self.body = 0
        """Where the text after the reasoning starts."""
        self.phase = "start"  # start -> reasoning -> content -> calls
        self.parsed = Parsed(content=None)
        """The calls, once the text is final."""
        self.head: dict[str, Any] = {}
        """`id`, `created`, `model` of the stream's first chunk, on every chunk made of it."""
        self.finished = False

    def _whole(self, text: str) -> str:
        return text.removesuffix(self.eos_text)

    def unary(self, data: dict) -> dict[str, Any]:
        choice = choices_of(data)[0]
        text = self._whole(str(choice.get("text") or ""))
        parsed = parse_completion(text, self.parser, self.tools, opened=self.opened)
        out_choice = {
            "index": 0,
            "message": message_of(parsed, call_ids(data.get("id"), len(parsed.tool_calls))),
            "logprobs": chat_logprobs(choice.get("logprobs")),
            "finish_reason": finish_of(choice.get("finish_reason"), parsed),
            "stop_reason": choice.get("stop_reason"),
            "token_ids": choice.get("token_ids"),
        }
        answer = {**_head(data, "chat.completion"), "choices": [out_choice], "usage": data.get("usage")}
        answer["prompt_token_ids"] = _prompt_ids(data, choice)
        return answer

    def chunk(self, data: dict, *, final: bool = False) -> list[dict[str, Any]]:
        """The chat chunks of one completions chunk: its ids, logprobs and the text it lets through.

        The finishing chunk (or `final`) adds what was held back and the tool calls, then the finish reason."""
        if not self.head:
            self.head = _head(data, "chat.completion.chunk")
        head = self.head
        choices = [c for c in choices_of(data) if c.get("index", 0) == 0]
        if not choices:
            return [{**head, "choices": [], **({"usage": data["usage"]} if data.get("usage") else {})}]
        choice = choices[0]
        self.text += str(choice.get("text") or "")
        finish = choice.get("finish_reason")
        final = final or finish is not None
        self.finished = final
        first = {
            "index": 0,
            "delta": self._advance(final=final),
            "logprobs": chat_logprobs(choice.get("logprobs")),
            "finish_reason": None,
            "token_ids": choice.get("token_ids"),
        }
        out = [{**head, "choices": [first]}]
        prompt = _prompt_ids(data, choice)
        if isinstance(prompt, list):
            out[0]["prompt_token_ids"] = prompt
        if data.get("usage"):
            out[0]["usage"] = data["usage"]
        if not final:
            return out
        parsed = self.parsed
        ids = call_ids(head.get("id"), len(parsed.tool_calls))
        for n, (call, call_id) in enumerate(zip(parsed.tool_calls, ids, strict=True)):
            function = {"name": call.name, "arguments": call.arguments}
            delta = {
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "index": n, "function": function}],
            }
            out.append({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]})
        last = out[-1]["choices"][0]
        last["finish_reason"] = finish_of(finish, parsed)
        last["stop_reason"] = choice.get("stop_reason")
        return out

    def end(self) -> list[dict[str, Any]]:
        """The chunks a stream that ended without a finish reason still holds back (none after a finished one)."""
        if self.finished or not self.head:
            return []
        return self.chunk({"choices": [{"index": 0, "text": ""}]}, final=True)

    def _advance(self, *, final: bool) -> dict[str, Any]:
        """The reasoning and content the text so far lets through (all of it once `final`)."""
        text = self._whole(self.text) if final else self.text
        delta: dict[str, Any] = {}
        if self.phase == "start":
            if not final and len(text) < len(THINK_OPEN) and THINK_OPEN.startswith(text):
                return delta
            if text.startswith(THINK_OPEN):
                self.phase, self.shown = "reasoning", len(THINK_OPEN)
            else:
                self.phase = "reasoning" if self.opened else "content"
        if self.phase == "reasoning":
            end = text.find(THINK_CLOSE, self.shown)
            upto = end if end >= 0 else len(text) - (0 if final else held_back(text[self.shown :], THINK_CLOSE))
            if upto > self.shown:
                delta["reasoning"] = text[self.shown : upto]
            self.shown = upto
            if end < 0:
                return delta
            self.phase = "content"
            self.shown = self.body = end + len(THINK_CLOSE)
        if self.phase == "content":
            found = [at for marker in self.parser.markers if (at := text.find(marker, self.shown)) >= 0]
            if found:
                upto = min(found)
            else:
                hold = 0 if final else max(held_back(text[self.shown :], m) for m in self.parser.markers)
                upto = len(text) - hold
            if upto > self.shown:
                delta["content"] = text[self.shown : upto]
            self.shown = upto
            if found:
                self.phase = "calls"
        if self.phase == "calls" and final:
            content, calls = self.parser.parse(text[self.body :], self.tools)
            # Content runs to where the calls start (past a marker that opened none), or is all the text.
            end = self.body + len(content or "") if calls else len(text)
            if end > self.shown:
                delta["content"] = delta.get("content", "") + text[self.shown : end]
                self.shown = end
            self.parsed = Parsed(content=content, tool_calls=calls)
        return delta
