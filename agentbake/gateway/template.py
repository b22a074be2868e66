"""The served model's chat template and tokenizer, which token-in calls render and tokenize with.

`FolderTemplate` reads a local Hugging Face tokenizer folder; `ServerTemplate` asks vLLM's `/tokenizer_info` and
`/tokenize`. Both render with `transformers` (`pip install 'agentbake[trl]'`), given messages as vLLM hands them over.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from agentbake.errors import ConfigError
from agentbake.gateway.tool_parse import THINK_CLOSE, ToolParser

_PROBE_CALL = ("probe_tool", {"command": "ls"})
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _PROBE_CALL[0],
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
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": _PROBE_CALL[0], "arguments": json.dumps(_PROBE_CALL[1])},
            }
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


def _transformers(where: str) -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ConfigError(f"{where}: token-in needs `transformers`: pip install 'agentbake[trl]'") from None


class ChatTemplate:
    """A chat template as the server applies it, and the end-of-sequence token that ends an assistant turn."""

    eos_text: str
    eos_id: int

    def _apply(self, messages: list[dict[str, Any]], tools: Any, generation_prompt: bool, extra: dict) -> str:
        raise NotImplementedError

    def render(self, messages: list[Any], tools: Any, *, generation_prompt: bool, kwargs: Any = None) -> str:
        """The template's text of `messages` (and `tools`), the assistant's turn opened or not."""
        prepared = [template_message(m) for m in messages if isinstance(m, dict)]
        return self._apply(prepared, tools or None, generation_prompt, kwargs if isinstance(kwargs, dict) else {})

    def encode(self, text: str) -> list[int] | None:
        """Ids of rendered text, no special tokens added (the template wrote them); None when the server
        tokenizes it (`/tokenize`)."""
        return None

    def unsafe(self, parser: ToolParser) -> str | None:
        """Why token-in would not be exact with this template and the server's tool-call `parser`, or None.

        New messages must only append to the rendering, an assistant turn must end with the end-of-sequence token, and
        the tool call it writes must parse back as that call."""
        for cut in (2, 3):
            shorter = self.render(_PROBE[:cut], _PROBE_TOOLS, generation_prompt=False)
            longer = self.render(_PROBE[: cut + 1], _PROBE_TOOLS, generation_prompt=True)
            if not longer.startswith(shorter):
                return (
                    f"its chat template renders the first {cut} messages of a conversation otherwise once more "
                    f"follow ({shorter!r} is not the start of {longer!r})"
                )
        assistant = self.render(_PROBE[:3], _PROBE_TOOLS, generation_prompt=False)
        opening = self.render(_PROBE[:2], _PROBE_TOOLS, generation_prompt=True)
        if self.eos_text not in assistant[len(opening) :]:
            return f"its chat template does not end an assistant turn with the eos_token {self.eos_text!r}"
        # The assistant's turn (what follows the conversation before it) to its end, reasoning left out.
        before = self.render(_PROBE[:2], _PROBE_TOOLS, generation_prompt=False)
        turn = assistant[len(before) if assistant.startswith(before) else len(opening) :]
        written = turn[: turn.find(self.eos_text)].rpartition(THINK_CLOSE)[2]
        _, calls = parser.parse(written, _PROBE_TOOLS)
        if [(call.name, json.loads(call.arguments)) for call in calls] != [_PROBE_CALL]:
            return (
                f"its chat template writes a tool call as {written!r}, which vLLM's {parser.name} tool-call parser "
                "does not read back: set tool_call_parser to the server's --tool-call-parser"
            )
        return None


class FolderTemplate(ChatTemplate):
    """A local tokenizer folder's chat template and tokenizer."""

    def __init__(self, directory: Path) -> None:
        _transformers(f"tokenizer {directory}")
        from transformers import AutoTokenizer

        if not (directory / "tokenizer.json").is_file():
            raise ConfigError(
                f"tokenizer {directory}: no tokenizer.json there; expected a Hugging Face tokenizer folder "
                "(the served model's, with its chat template)"
            )
        self.directory = directory
        self.tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(
                f"tokenizer {directory}: no chat template (chat_template.jinja, or chat_template in "
                "tokenizer_config.json)"
            )
        if self.tokenizer.eos_token_id is None:
            raise ConfigError(f"tokenizer {directory}: no eos_token (the token that ends an assistant turn)")
        self.eos_id: int = self.tokenizer.eos_token_id
        self.eos_text: str = self.tokenizer.eos_token

    def _apply(self, messages: list[dict[str, Any]], tools: Any, generation_prompt: bool, extra: dict) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=generation_prompt, tokenize=False, **extra
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))


def _token_text(value: Any) -> str | None:
    """A special token as `/tokenizer_info` gives it: its text, or an object holding it as `content`."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


class ServerTemplate(ChatTemplate):
    """The chat template and special tokens the server reports (`/tokenizer_info`); the server tokenizes."""

    def __init__(self, info: dict[str, Any], eos_id: int, where: str) -> None:
        _transformers(where)
        source = info.get("chat_template")
        if not isinstance(source, str) or not source:
            raise ConfigError(f"{where}: the server reports no chat_template; give the tokenizer folder instead")
        eos = _token_text(info.get("eos_token"))
        if eos is None:
            raise ConfigError(f"{where}: the server reports no eos_token; give the tokenizer folder instead")
        self.source = source
        self.eos_text, self.eos_id = eos, eos_id
        # What `apply_chat_template` hands every template besides the conversation.
        names = ("bos_token", "eos_token", "unk_token", "pad_token")
        self.special = {name: text for name in names if (text := _token_text(info.get(name)))}

    def _apply(self, messages: list[dict[str, Any]], tools: Any, generation_prompt: bool, extra: dict) -> str:
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, _ = render_jinja_template(
            [messages],
            tools=tools,
            chat_template=self.source,
            add_generation_prompt=generation_prompt,
            **{**self.special, **extra},
        )
        return rendered[0]


def fetch_server_template(root: str, headers: dict[str, str], ca_file: Path | None) -> ServerTemplate:
    """The chat template of the server at `root` (its base URL without `/v1`), from `GET /tokenizer_info`, its
    end-of-sequence id from `POST /tokenize`. Raises ConfigError naming what failed and the fix."""
    where = f"token_in: {root}/tokenizer_info"
    info = _call(f"{root}/tokenizer_info", None, headers, ca_file, where)
    eos = _token_text(info.get("eos_token"))
    tokens = _call(f"{root}/tokenize", {"prompt": eos or "", "add_special_tokens": False}, headers, ca_file, where)
    ids = tokens.get("tokens")
    if eos is not None and not (isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], int)):
        raise ConfigError(f"{where}: the server's /tokenize gives {ids!r} for the eos_token {eos!r}, not one id")
    return ServerTemplate(info, ids[0] if isinstance(ids, list) and ids else -1, where)


def _call(url: str, body: Any, headers: dict[str, str], ca_file: Path | None, where: str) -> dict[str, Any]:
    """One JSON request to the server at start-up (GET, or POST with `body`): its JSON object answer."""
    import ssl
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="GET" if body is None else "POST")
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            payload = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise ConfigError(
            f"{where}: {url} answered {exc.code}: start vLLM with --enable-tokenizer-info-endpoint, or give the "
            "served model's tokenizer folder (--tokenizer DIR)"
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: cannot read {url}: {exc}") from None
    if not isinstance(payload, dict):
        raise ConfigError(f"{where}: {url} answered {type(payload).__name__}, expected a JSON object")
    return payload
