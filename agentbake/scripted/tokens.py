"""A toy tokenizer and deterministic logprobs, so the scripted model's ids behave like a real model's.

A piece of text (a word with its trailing spaces, or a run of spaces) gets a hash of its text as id. Special tokens use
Qwen's ids. Logprobs come from a hash of the request and the position.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from agentbake.gateway.template import message_text as content_text

IM_START, IM_END = 151644, 151645
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = 151657, 151658
THINK_OPEN, THINK_CLOSE = 151667, 151668
SPECIAL_TEXT = {
    IM_START: "<|im_start|>",
    IM_END: "<|im_end|>",
    TOOL_CALL_OPEN: "<tool_call>",
    TOOL_CALL_CLOSE: "</tool_call>",
    THINK_OPEN: "<think>",
    THINK_CLOSE: "</think>",
}
_FIRST_ID, _VOCAB = 1000, 150_000  # ordinary pieces land in [1000, 151000), below the special ids
ARG_FRAGMENT = 7
"""Characters of tool-call arguments per token."""
_PIECE = re.compile(r"\S+\s*|\s+")
# Alternatives offered in top_logprobs (their ids follow from their text like any piece).
ALTERNATIVES = (" the", "\n", " a", ",", ".", " to", " and", " of", " is", " in", "(", ":")


def pieces(text: str) -> list[str]:
    """The pieces `text` is cut into; joined they give `text` back."""
    return _PIECE.findall(text)


def piece_id(piece: str) -> int:
    """The id of one piece of text."""
    digest = hashlib.blake2b(piece.encode(), digest_size=8).digest()
    return _FIRST_ID + int.from_bytes(digest, "big") % _VOCAB


def encode(text: str) -> list[int]:
    """Token ids of `text`."""
    return [piece_id(p) for p in pieces(text)]


@dataclass(frozen=True)
class Token:
    """One generated token: its id, decoded text, and what part of the answer it belongs to."""

    id: int
    text: str
    kind: str
    """"reasoning", "content", "control" (think/tool-call markers, EOS), "name" (completes a tool call's name),
    "args" (a tool call's argument text), or "wrapper" (tool-call JSON around name and arguments)."""
    call: int = -1
    """Index of the tool call this token belongs to, or -1."""
    shown: str | None = None
    """The part of `text` a stream delta shows, when a token straddles two parts of the answer; None shows all of it."""

    @property
    def delta(self) -> str:
        """What the stream shows for this token (its content, reasoning or argument text)."""
        return self.text if self.shown is None else self.shown


TOY_ALTERNATIVES = tuple((piece_id(text), text) for text in ALTERNATIVES)


def text_tokens(text: str, kind: str, call: int = -1) -> list[Token]:
    return [Token(piece_id(p), p, kind, call) for p in pieces(text)]


def special(token_id: int) -> Token:
    return Token(token_id, SPECIAL_TEXT[token_id], "control")


def tool_call_tokens(call: int, name: str, arguments: str) -> list[Token]:
    """One tool call as a hermes-style model writes it, the arguments in fragments of a few characters."""
    head = text_tokens(json.dumps({"name": name}, ensure_ascii=False)[:-1] + ", ", "wrapper", call)
    head[-1] = Token(head[-1].id, head[-1].text, "name", call)  # the token that completes the name
    fragments = [arguments[i : i + ARG_FRAGMENT] for i in range(0, len(arguments), ARG_FRAGMENT)]
    return [
        special(TOOL_CALL_OPEN),
        *head,
        *text_tokens('"arguments": ', "wrapper", call),
        *(Token(piece_id(f), f, "args", call) for f in fragments),
        Token(piece_id("}"), "}", "wrapper", call),
        special(TOOL_CALL_CLOSE),
    ]


def request_seed(request: dict[str, Any]) -> bytes:
    """What makes two requests "the same": everything but how the answer is transported."""
    content = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    return hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).digest()


def _unit(seed: bytes, *salt: object) -> float:
    """A number in [0, 1) fixed by seed and salt."""
    digest = hashlib.blake2b(repr(salt).encode(), key=seed[:32], digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def sampled_logprob(seed: bytes, position: int) -> float:
    """The logprob of the sampled token at `position`, in [-2.5, -0.001]."""
    return round(-0.001 - 2.5 * _unit(seed, "sampled", position) ** 3, 6)


def alternatives(
    seed: bytes, position: int, sampled: int, count: int, table: Sequence[tuple[int, str]] | None = None
) -> list[tuple[int, str, float]]:
    """(id, text, logprob) of the `count` most likely other tokens, most likely first, drawn from `table`."""
    table = TOY_ALTERNATIVES if table is None else table
    start = int(_unit(seed, "alt", position) * len(table))
    out: list[tuple[int, str, float]] = []
    logprob = -0.05 - _unit(seed, "top", position)
    for k in range(len(table)):
        token_id, text = table[(start + k) % len(table)]
        if token_id == sampled:
            continue
        if len(out) == count:
            break
        out.append((token_id, text, round(logprob, 6)))
        logprob -= 0.5 + _unit(seed, "gap", position, k)
    return out


def render_prompt(request: dict[str, Any], *, add_generation_prompt: bool = True) -> list[int]:
    """Prompt ids: a ChatML rendering of the tools and messages, then the assistant's turn opening.

    An assistant message is rendered with the very tokens the model generated for it. So answers sent back unchanged
    chain exactly, and dropped reasoning breaks the chain, as with a real template."""
    ids: list[int] = []

    def turn(role: str, text: str) -> None:
        ids.extend([IM_START, *encode(f"{role}\n{text}"), IM_END, *encode("\n")])

    if request.get("tools"):
        turn(
            "system",
            "# Tools\n" + "\n".join(orjson.dumps(t, option=orjson.OPT_SORT_KEYS).decode() for t in request["tools"]),
        )
    for message in request.get("messages") or []:
        if not isinstance(message, dict):
            continue
        text = content_text(message.get("content"))
        if message.get("role") == "assistant":
            ids.extend([IM_START, *encode("assistant\n"), *_assistant_ids(message, text), IM_END, *encode("\n")])
        else:
            turn(str(message.get("role")), text)
    if add_generation_prompt:
        ids.extend([IM_START, *encode("assistant\n")])
    return ids


def _assistant_ids(message: dict[str, Any], text: str) -> list[int]:
    ids: list[int] = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        ids += [THINK_OPEN, *encode(reasoning), THINK_CLOSE]
    ids += encode(text)
    for n, call in enumerate(message.get("tool_calls") or []):
        function = (call.get("function") if isinstance(call, dict) else None) or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        ids += [t.id for t in tool_call_tokens(n, str(function.get("name")), arguments)]
    return ids


class Vocabulary(Protocol):
    """How the scripted model turns answers and prompts into token ids: the toy ids (`TOY`) or a real tokenizer's."""

    def answer_tokens(self, reasoning: str, text: str, tool_calls: Sequence[tuple[str, str]]) -> list[Token]:
        """The tokens of an answer (reasoning, text, then each (name, arguments JSON) tool call), without the
        end-of-sequence token."""
        ...

    def end_token(self) -> Token:
        """The end-of-sequence token that closes a finished answer."""
        ...

    def alternative_table(self) -> Sequence[tuple[int, str]]:
        """(id, text) of the tokens offered as `top_logprobs` alternatives."""
        ...

    def render_prompt(self, request: dict[str, Any]) -> list[int]:
        """Prompt ids of a chat request, the assistant's turn opened."""
        ...

    def render_messages(self, request: dict[str, Any]) -> list[int]:
        """Ids of a chat request's messages with no generation prompt (`/tokenize` with
        `add_generation_prompt: false`)."""
        ...

    def encode(self, text: str) -> list[int]:
        """Ids of plain text (`/tokenize` with a `prompt`)."""
        ...

    def token_text(self, token_id: int) -> str:
        """How `/tokenize` names a token in `token_strs`."""
        ...

    def tokenizer_info(self) -> dict[str, Any] | None:
        """What vLLM's `GET /tokenizer_info` answers; None for the toy vocabulary (a 404)."""
        ...

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str | None:
        """The text of ids; None when the vocabulary cannot decode (the toy one's ids are hashes)."""
        ...


class ToyVocabulary:
    """The default vocabulary: ids from a hash of each text piece, Qwen's special ids, no tokenizer needed."""

    def answer_tokens(self, reasoning: str, text: str, tool_calls: Sequence[tuple[str, str]]) -> list[Token]:
        tokens: list[Token] = []
        if reasoning:
            tokens += [special(THINK_OPEN), *text_tokens(reasoning, "reasoning"), special(THINK_CLOSE)]
        tokens += text_tokens(text, "content")
        for n, (name, arguments) in enumerate(tool_calls):
            tokens += tool_call_tokens(n, name, arguments)
        return tokens

    def end_token(self) -> Token:
        return special(IM_END)

    def alternative_table(self) -> Sequence[tuple[int, str]]:
        return TOY_ALTERNATIVES

    def render_prompt(self, request: dict[str, Any]) -> list[int]:
        return render_prompt(request)

    def render_messages(self, request: dict[str, Any]) -> list[int]:
        return render_prompt(request, add_generation_prompt=False)

    def encode(self, text: str) -> list[int]:
        return encode(text)

    def token_text(self, token_id: int) -> str:
        return SPECIAL_TEXT.get(token_id, f"<{token_id}>")

    def tokenizer_info(self) -> dict[str, Any] | None:
        return None

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str | None:
        return None


TOY = ToyVocabulary()
