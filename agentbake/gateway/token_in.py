"""Token-in continuation: a call that extends an earlier answered call goes to `/v1/completions` as ids.

Re-rendering and re-tokenizing a history need not give back the ids the model sampled. So a request that continues a
remembered call is sent as that call's prompt ids, its sampled ids, then the new messages' ids. Any other request takes
the chat route, and its record says why.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from agentbake.errors import ConfigError
from agentbake.gateway.errors import UpstreamError
from agentbake.gateway.template import ChatTemplate, FolderTemplate, fetch_server_template, message_text
from agentbake.gateway.tool_parse import ToolParser
from agentbake.gateway.tool_parse_hermes import HERMES
from agentbake.gateway.tool_parsers import PARSERS
from agentbake.gateway.turns import PerRollout, digest

if TYPE_CHECKING:
    from agentbake.gateway.config import GatewayConfig
    from agentbake.gateway.upstream import UpstreamClient

logger = logging.getLogger("agentbake.gateway")

# Sessions per rollout (a main agent and its concurrent sub-agents) and rollouts kept, as turns.py bounds its books.
_SESSIONS = 16
_ROLLOUTS = 64

# Chat request fields that mean the same on /v1/completions; max_completion_tokens becomes max_tokens.
_PASSED = (
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "include_stop_str_in_output",
    "stream",
    "stream_options",
    "return_token_ids",
    "return_tokens_as_token_ids",
    "logit_bias",
    "user",
)
# What the completions route cannot do as the chat route does: structured output, several choices.
_CHAT_ONLY = ("response_format", "guided_json", "guided_regex", "guided_choice", "structured_outputs")


@dataclass(frozen=True, slots=True)
class Session:
    """An answered call a later one may continue."""

    turn: int
    digests: tuple[bytes, ...]
    """One digest per message of its request."""
    settings: bytes
    """Digest of what else the template renders: tools, template kwargs, model."""
    prompt: list[int]
    completion: list[int]
    answer: tuple[str, tuple[tuple[str, Any], ...]]
    """The answer as the client got it: its content and (name, parsed arguments) per tool call."""


@dataclass(frozen=True, slots=True)
class Plan:
    """How one call goes upstream: on `/v1/completions` its prompt is `prefix` + the ids of `suffix`.

    On the chat route `prefix` is None."""

    prefix: list[int] | None
    """The continued call's prompt + sampled ids."""
    suffix: str
    """The template's text of the new messages, the assistant's turn opened."""
    record: dict[str, Any]
    """The record's `token_in`: `{"route": "completions", "continues": turn, "new_tokens": n}` (`new_tokens` set
    once the suffix is tokenized) or `{"route": "chat", "reason": ...}`."""

    @property
    def opens_thinking(self) -> bool:
        """The template opened `<think>` in the generation prompt: the answer starts in its reasoning."""
        return self.suffix.rstrip().endswith("<think>")


def _settings(body: dict) -> bytes:
    return digest([body.get("tools"), body.get("chat_template_kwargs"), body.get("model")])


def answer_key(message: Any) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """What of an assistant message must match the sampled answer: its trimmed text and each tool call's name and
    arguments.

    Reasoning and call ids are not compared: clients drop the one and may replace the other."""
    if not isinstance(message, dict):
        return "", ()
    calls = []
    for call in message.get("tool_calls") or []:
        function = (call.get("function") if isinstance(call, dict) else None) or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        calls.append((str(function.get("name")), arguments))
    return message_text(message.get("content")).strip(), tuple(calls)


@dataclass(slots=True)
class _Rollout:
    sessions: deque[Session] = field(default_factory=lambda: deque(maxlen=_SESSIONS))


class TokenIn:
    """Plans each call's route and remembers answered calls, for one gateway."""

    def __init__(self, template: ChatTemplate, parser: ToolParser = HERMES) -> None:
        self.template = template
        self.parser = parser
        """The server's tool-call parser, which completions' text is parsed with."""
        self._rollouts = PerRollout(_Rollout, _ROLLOUTS)
        self._unavailable: str | None = None

    def unavailable(self, status: int) -> Plan:
        """The upstream answered `/v1/completions` with `status` (404, 405): from now on every call takes the chat
        route (this one's plan is returned)."""
        self._unavailable = f"the upstream answered /v1/completions with {status}: it serves the chat route only"
        return chat_route(self._unavailable)

    def plan(self, rollout_id: str | None, body: dict) -> Plan:
        """The route of a chat request about to go upstream (see the module docstring)."""
        if self._unavailable is not None:
            return chat_route(self._unavailable)
        unsupported = [key for key in _CHAT_ONLY if body.get(key) is not None]
        if (body.get("n") or 1) != 1:
            unsupported.append("n")
        choice = body.get("tool_choice")
        if choice not in (None, "auto"):
            unsupported.append("tool_choice")
        if unsupported:
            return chat_route(f"the completions route does not serve {', '.join(unsupported)}")
        messages = body["messages"]
        digests = tuple(digest(m) for m in messages)
        settings = _settings(body)
        sessions = self._rollouts.of(rollout_id).sessions
        # The longest earlier conversation this one starts with (a retry continues what its original did).
        candidates = [s for s in sessions if len(s.digests) < len(digests) and digests[: len(s.digests)] == s.digests]
        if not candidates:
            return chat_route("no earlier call of this rollout is the start of this conversation")
        session = max(candidates, key=lambda s: (len(s.digests), s.turn))
        at = len(session.digests)
        if len(messages) <= at + 1:
            return chat_route(f"the request adds only an assistant message to turn {session.turn}'s conversation")
        if settings != session.settings:
            return chat_route(f"the tools or template settings differ from turn {session.turn}'s")
        answer = messages[at]
        if not isinstance(answer, dict) or answer.get("role") != "assistant" or answer_key(answer) != session.answer:
            return chat_route(f"message {at} is not the answer turn {session.turn} sampled (an edited history)")
        if any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages[at + 1 :]):
            return chat_route(f"assistant messages after turn {session.turn}'s answer were not sampled by it")
        suffix = self._suffix(body, at, session)
        if not suffix.ok:
            return chat_route(suffix.text)
        prefix = [*session.prompt, *session.completion]
        return Plan(prefix, suffix.text, {"route": "completions", "continues": session.turn})

    def _suffix(self, body: dict, at: int, session: Session) -> _Suffix:
        """The text of the messages after the answer at `at`, the assistant's turn opened; or why the template
        cannot render them as an addition."""
        template, messages = self.template, body["messages"]
        tools, kwargs = body.get("tools"), body.get("chat_template_kwargs")
        before = template.render(messages[: at + 1], tools, generation_prompt=False, kwargs=kwargs)
        after = template.render(messages, tools, generation_prompt=True, kwargs=kwargs)
        if not after.startswith(before):
            return _Suffix(False, "the chat template renders the history otherwise once the new messages follow")
        end = before.rfind(template.eos_text)
        if end < 0:
            return _Suffix(False, f"the chat template does not end the answer with {template.eos_text!r}")
        # The sampled ids stop at the end-of-sequence token (or before it, cut by a length limit); what the
        # template writes after it belongs to the new messages.
        closing = before[end + len(template.eos_text) :]
        if not (session.completion and session.completion[-1] == template.eos_id):
            closing = template.eos_text + closing
        return _Suffix(True, closing + after[len(before) :])

    async def prompt(self, plan: Plan, model: Any, client: UpstreamClient, tokenize_url: str) -> list[int] | None:
        """The prompt ids of a call planned for the completions route: `plan.prefix`, then the new messages' ids.

        The server's `/tokenize` gives those when the template has no tokenizer; None when that fails."""
        assert plan.prefix is not None
        ids = self.template.encode(plan.suffix)
        if ids is None:
            payload = {"model": model, "prompt": plan.suffix, "add_special_tokens": False}
            try:
                response = await client.request("POST", tokenize_url, orjson.dumps(payload))
                try:
                    content = await response.read()
                finally:
                    response.close()
                tokens = orjson.loads(content).get("tokens") if response.status == 200 else None
            except (UpstreamError, orjson.JSONDecodeError, AttributeError):
                return None
            if not (isinstance(tokens, list) and all(isinstance(i, int) for i in tokens)):
                return None
            ids = tokens
        plan.record["new_tokens"] = len(ids)
        return [*plan.prefix, *ids]

    def answered(
        self,
        rollout_id: str | None,
        turn: int,
        body: dict,
        prompt: list[int],
        completion: list[int],
        message: Any,
        continued: int | None = None,
    ) -> None:
        """Remember an answered call as a session later calls may continue.

        It replaces the call it `continued`, if any."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return
        session = Session(
            turn=turn,
            digests=tuple(digest(m) for m in messages),
            settings=_settings(body),
            prompt=prompt,
            completion=completion,
            answer=answer_key(message),
        )
        sessions = self._rollouts.of(rollout_id).sessions
        # The call this one continued is done with: each live conversation keeps one session, so a main agent's
        # outlives its sub-agents' calls (a client's retry of an errored call, never answered, still finds it).
        kept = [s for s in sessions if s.turn != continued]
        sessions.clear()
        sessions.extend([*kept, session])


class _Suffix(NamedTuple):
    ok: bool
    text: str
    """The new messages' text, or why there is none."""


def chat_route(reason: str) -> Plan:
    """The plan of a call on the chat route, and why."""
    return Plan(None, "", {"route": "chat", "reason": reason})


def completions_body(chat: dict, prompt: list[int]) -> dict:
    """The `/v1/completions` request of a chat request continued at `prompt`, with the same sampling and capture fields.

    Logprobs take the legacy form (`logprobs: N`). With tools, special tokens stay in the text so `<tool_call>` reaches
    the tool-call parser."""
    body: dict[str, Any] = {key: chat[key] for key in _PASSED if key in chat}
    body["prompt"] = prompt
    if "max_tokens" not in body:
        # An explicit null is what the chat route's absent field means (the rest of the context); an absent
        # field would be the completions route's default of 16 tokens.
        body["max_tokens"] = chat.get("max_completion_tokens")
    if chat.get("logprobs"):
        body["logprobs"] = chat.get("top_logprobs") or 0
    if chat.get("tools") and chat.get("tool_choice") != "none":
        body["skip_special_tokens"] = False
    return body


def load_token_in(config: GatewayConfig, headers: dict[str, str]) -> TokenIn | None:
    """The gateway's token-in planner, or None when token-in is off.

    Unset, `token_in` is on with a tokenizer folder whose template allows it (with the `tool_call_parser`). True
    without a folder, the template comes from the server. Raises ConfigError when `token_in` is true and cannot be
    on."""
    token_in, tokenizer = config.token_in, config.tokenizer
    if token_in is False or (token_in is None and tokenizer is None):
        return None
    parser = PARSERS[config.tool_call_parser]
    if tokenizer is not None:
        template, unsafe = _load(tokenizer.resolve(), parser)
        where = f"tokenizer {tokenizer}"
    else:
        root = config.upstream.removesuffix("/v1")
        template = fetch_server_template(root, headers, config.upstream_ca_file)
        unsafe, where = template.unsafe(parser), f"{root}/tokenizer_info"
    if unsafe is not None:
        if token_in:
            raise ConfigError(f"token_in: {where}: token-in would not be exact: {unsafe}")
        logger.warning("token-in stays off: %s: %s", where, unsafe)
        return None
    return TokenIn(template, parser)


@functools.cache
def _load(tokenizer: Path, parser: ToolParser) -> tuple[FolderTemplate, str | None]:
    """A folder's template and its verdict with `parser`, loaded once per process (the runner starts a gateway per
    rollout)."""
    template = FolderTemplate(tokenizer)
    return template, template.unsafe(parser)
