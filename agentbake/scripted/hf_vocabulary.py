"""The scripted model's ids in a real tokenizer's vocabulary, so a trainer can feed them to a model of it.

`ScriptedModel(tokenizer=DIR)` loads a Hugging Face tokenizer folder from disk and answers as vLLM serving that
tokenizer would. Prompts are rendered by its chat template; answers are written as a hermes/Qwen template renders them,
then the end-of-sequence token. So an answer sent back unchanged chains exactly. Loading refuses a template that renders
an assistant message otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentbake.errors import ConfigError
from agentbake.gateway.template import template_message
from agentbake.scripted import tokens as tk

_PROBE_USER = "probe question"
_PROBE_CALL = ("probe_tool", '{"command": "ls"}')


class HFVocabulary:
    """A Hugging Face tokenizer folder as the scripted model's vocabulary (see the module docstring)."""

    def __init__(self, directory: Path, *, piecewise: bool = False) -> None:
        self.piecewise = piecewise
        """Sample each part of an answer (its text; a tool call's wrapper, name and arguments) as its own tokens,
        as a model sampling a non-canonical tokenization does: a chat template's re-rendering, tokenized whole,
        then merges across the parts and the history's ids drift from the sampled ones."""
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ConfigError(
                f"tokenizer {directory}: the scripted model needs `transformers` to use a tokenizer: "
                "pip install 'agentbake[trl]'"
            ) from None
        if not (directory / "tokenizer.json").is_file():
            raise ConfigError(
                f"tokenizer {directory}: no tokenizer.json there; expected a Hugging Face tokenizer folder"
            )
        self.directory = directory
        self.tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"tokenizer {directory}: tokenizer_config.json has no chat_template")
        if self.tokenizer.eos_token_id is None:
            raise ConfigError(f"tokenizer {directory}: no eos_token (the token that ends an assistant turn)")
        self._end = tk.Token(self.tokenizer.eos_token_id, self.tokenizer.eos_token, "control")
        self._alternatives = tuple(
            (ids[0], text) for text in tk.ALTERNATIVES if (ids := self.encode(text)) and len(ids) == 1
        ) or ((self._end.id, self._end.text),)
        self._check_template()

    # -- prompts -----------------------------------------------------------------------------------

    def _render(self, request: dict[str, Any], *, generation_prompt: bool) -> str:
        messages = [template_message(m) for m in request.get("messages") or [] if isinstance(m, dict)]
        return self.tokenizer.apply_chat_template(
            messages, tools=request.get("tools") or None, add_generation_prompt=generation_prompt, tokenize=False
        )

    def render_prompt(self, request: dict[str, Any]) -> list[int]:
        return self.encode(self._render(request, generation_prompt=True))

    def render_messages(self, request: dict[str, Any]) -> list[int]:
        return self.encode(self._render(request, generation_prompt=False))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def token_text(self, token_id: int) -> str:
        return str(self.tokenizer.convert_ids_to_tokens(token_id))

    # -- answers -----------------------------------------------------------------------------------

    def answer_tokens(self, reasoning: str, text: str, tool_calls: Sequence[tuple[str, str]]) -> list[tk.Token]:
        if reasoning:
            raise ConfigError(
                f"tokenizer {self.directory}: the scripted model writes no reasoning with a tokenizer; "
                "drop Reply.reasoning"
            )
        parts = answer_parts(text, tool_calls)
        answer = "".join(part for part, _, _ in parts)
        # Each part's [start, end) in the answer, to tell what every token holds.
        spans, start = [], 0
        for part, kind, call in parts:
            spans.append((start, start + len(part), kind, call))
            start += len(part)
        tokens: list[tk.Token] = []
        shown_upto = 0  # byte-level tokens of one character share its offsets: it is shown once
        named: set[int] = set()  # calls whose header delta was sent
        for token_id, (first, last) in self._encode_answer(answer, spans):
            start = max(first, shown_upto)
            held = [(s, e, kind, call) for s, e, kind, call in spans if s < last and first < e]
            token = _classify(token_id, answer, (first, start, last), held, named)
            if token.kind == "name":
                named.add(token.call)
            tokens.append(token)
            shown_upto = max(shown_upto, last)
        return tokens

    def _encode_answer(self, answer: str, spans: list[tuple[int, int, str, int]]) -> list[tuple[int, tuple[int, int]]]:
        """(id, (start, end) in `answer`) of each token: the answer encoded whole, or each part on its own."""
        pieces = [(s, answer[s:e]) for s, e, _, _ in spans] if self.piecewise else [(0, answer)]
        out = []
        for start, piece in pieces:
            encoding = self.tokenizer(piece, add_special_tokens=False, return_offsets_mapping=True)
            for token_id, (first, last) in zip(encoding["input_ids"], encoding["offset_mapping"], strict=True):
                out.append((token_id, (start + first, start + last)))
        return out

    def tokenizer_info(self) -> dict[str, Any]:
        # vLLM's: the tokenizer's init_kwargs without file paths, tokens as their text, and its class.
        config = {k: v for k, v in self.tokenizer.init_kwargs.items() if k not in ("vocab_file", "merges_file")}
        info = json.loads(json.dumps(config, default=lambda value: getattr(value, "content", str(value))))
        return {**info, "tokenizer_class": type(self.tokenizer).__name__}

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def end_token(self) -> tk.Token:
        return self._end

    def alternative_table(self) -> Sequence[tuple[int, str]]:
        return self._alternatives

    # -- the load-time check -------------------------------------------------------------------------

    def _check_template(self) -> None:
        """Refuse a template that renders an assistant message otherwise than the model writes it.

        Prompt ids would then not extend the previous call's on any turn."""
        user = {"role": "user", "content": _PROBE_USER}
        name, arguments = _PROBE_CALL
        call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}
        for answer, calls in (("probe answer", []), ("", [call])):
            prompt = self._render({"messages": [user]}, generation_prompt=True)
            assistant = {"role": "assistant", "content": answer, "tool_calls": calls} if calls else None
            assistant = assistant or {"role": "assistant", "content": answer}
            rendered = self._render({"messages": [user, assistant]}, generation_prompt=False)
            written = "".join(p for p, _, _ in answer_parts(answer, [(name, arguments)] if calls else []))
            expected = prompt + written + self._end.text
            if not rendered.startswith(expected):
                raise ConfigError(
                    f"tokenizer {self.directory}: its chat template renders an assistant message as "
                    f"{rendered[len(prompt) :]!r} after the generation prompt, but the scripted model writes "
                    f"{written + self._end.text!r} (hermes tool calls, Qwen's layout); use a template that renders "
                    "answers that way"
                )


def answer_parts(text: str, tool_calls: Sequence[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """(text, kind, call) parts of an answer as a hermes/Qwen chat template renders an assistant message.

    The text comes first, then `<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>` per call."""
    parts: list[tuple[str, str, int]] = [(text, "content", -1)] if text else []
    for n, (name, arguments) in enumerate(tool_calls):
        opening = ("\n" if parts else "") + '<tool_call>\n{"name": "'
        parts += [
            (opening, "wrapper", n),
            (name, "name", n),
            ('", "arguments": ', "wrapper", n),
            (arguments, "args", n),
            ("}\n</tool_call>", "wrapper", n),
        ]
    return parts


def _classify(
    token_id: int,
    answer: str,
    offsets: tuple[int, int, int],
    held: list[tuple[int, int, str, int]],
    named: set[int],
) -> tk.Token:
    """A token of the answer with the kind of what it holds: end of a tool name, arguments, text, or JSON around them.

    `offsets` are the token's first character, the first one no earlier token showed, and its end."""
    first, start, last = offsets
    text = answer[first:last]
    shown = "".join(answer[max(s, start) : min(e, last)] for s, e, kind, _ in held if kind in ("args", "content"))
    for _, e, kind, call in held:
        if kind == "name" and last >= e and call not in named:
            return tk.Token(token_id, text, "name", call)
    for _, _, kind, call in held:
        if kind in ("args", "content"):
            return tk.Token(token_id, text, kind, call, shown=shown if shown != text else None)
    return tk.Token(token_id, text, "wrapper", held[0][3] if held else -1)
