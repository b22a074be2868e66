"""The served model's chat template and tokenizer, for token-in calls: render the new messages, tokenize them.

Loaded from a local Hugging Face tokenizer folder (`tokenizer.json`, `tokenizer_config.json` with the chat
template; never the Hub) through `transformers`, an optional extra (`pip install 'agentbake[trl]'`). Messages
reach the template as vLLM hands them over: text content as one string, tool-call arguments parsed from JSON.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from agentbake.errors import ConfigError

_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "probe_tool",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
_PROBE = [
    {"role": "system", "content": "probe system"},
    {"role": "user", "content": "probe question"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "probe_tool", "arguments": '{"command": "ls"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "content": "probe result"},
]


def message_text(content: Any) -> str:
    """The text of a chat message's content: a string, or its text parts joined by newlines (as vLLM does)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as vLLM hands it to a template: text content, tool-call arguments parsed from JSON."""
    out = {**message, "content": message_text(message.get("content"))}
    calls = []
    for call in message.get("tool_calls") or []:
        function = dict((call.get("function") or {}) if isinstance(call, dict) else {})
        if isinstance(function.get("arguments"), str):
            with contextlib.suppress(ValueError):  # not JSON: the template gets the string, as with vLLM
                function["arguments"] = json.loads(function["arguments"])
        calls.append({**call, "function": function})
    if calls:
        out["tool_calls"] = calls
    return out


class ChatTemplate:
    """A tokenizer folder's chat template and tokenizer (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ConfigError(
                f"tokenizer {directory}: token-in needs `transformers`: pip install 'agentbake[trl]'"
            ) from None
        if not (directory / "tokenizer.json").is_file():
            raise ConfigError(
                f"tokenizer {directory}: no tokenizer.json there; expected a Hugging Face tokenizer folder "
                "(the served model's, with its chat template in tokenizer_config.json)"
            )
        self.directory = directory
        self.tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"tokenizer {directory}: tokenizer_config.json has no chat_template")
        if self.tokenizer.eos_token_id is None:
            raise ConfigError(f"tokenizer {directory}: no eos_token (the token that ends an assistant turn)")
        self.eos_id: int = self.tokenizer.eos_token_id
        self.eos_text: str = self.tokenizer.eos_token

    def render(self, messages: list[Any], tools: Any, *, generation_prompt: bool, kwargs: Any = None) -> str:
        """The template's text of `messages` (and `tools`), the assistant's turn opened or not."""
        extra = kwargs if isinstance(kwargs, dict) else {}
        prepared = [template_message(m) for m in messages if isinstance(m, dict)]
        return self.tokenizer.apply_chat_template(
            prepared, tools=tools or None, add_generation_prompt=generation_prompt, tokenize=False, **extra
        )

    def encode(self, text: str) -> list[int]:
        """Ids of rendered text, no special tokens added (the template wrote them)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def unsafe(self) -> str | None:
        """Why token-in would not be exact with this template, or None: rendering a conversation must start with
        the rendering of its first messages (new messages only append), and an assistant turn must end with the
        end-of-sequence token."""
        for cut in (2, 3):
            shorter = self.render(_PROBE[:cut], _PROBE_TOOLS, generation_prompt=False)
            longer = self.render(_PROBE[: cut + 1], _PROBE_TOOLS, generation_prompt=True)
            if not longer.startswith(shorter):
                return (
                    f"its chat template renders the first {cut} messages of a conversation otherwise once more "
                    f"follow ({shorter!r} is not the start of {longer!r})"
                )
        assistant = self.render(_PROBE[:3], _PROBE_TOOLS, generation_prompt=False)
        if self.eos_text not in assistant[len(self.render(_PROBE[:2], _PROBE_TOOLS, generation_prompt=True)) :]:
            return f"its chat template does not end an assistant turn with the eos_token {self.eos_text!r}"
        return None
