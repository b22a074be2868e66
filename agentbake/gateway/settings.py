"""The gateway settings `agentbake run` and `rollout` take as options, as plain data.

Their `--help` lists them without importing pydantic. `config.py` builds `ModelSettings` from `MODEL_SETTINGS`, so each
field's type, default, bounds and help are written once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

UPSTREAM_API_KEY_ENV = "AGENTBAKE_UPSTREAM_API_KEY"
"""Default variable holding the upstream API key (`GatewayConfig.api_key_env`, `RunnerConfig.api_key_env`)."""

LogprobsMode = Literal["raw", "processed"]
"""What an answer's logprobs are, as vLLM's `--logprobs-mode` names them (`raw_logprobs`, `processed_logprobs`)."""
LOGPROBS_MODES: tuple[str, ...] = get_args(LogprobsMode)

ToolCallParser = Literal["hermes", "qwen3_coder"]
"""How a completion's text holds tool calls, named as vLLM's `--tool-call-parser` (tool_parsers.py has their rules)."""
TOOL_CALL_PARSERS: tuple[str, ...] = get_args(ToolCallParser)


@dataclass(frozen=True)
class Setting:
    """One field of `ModelSettings`: its type, its default, its help text and its bounds (pydantic `Field`
    constraints: gt, ge, le)."""

    annotation: Any
    default: bool | str | Path | None
    help: str
    bounds: dict[str, float] = field(default_factory=dict)


MODEL_SETTINGS: dict[str, Setting] = {
    "disable_thinking": Setting(
        bool, False, "Send `chat_template_kwargs.enable_thinking=false` (Qwen3-style templates) on every request."
    ),
    "inner_system_as_user": Setting(
        bool,
        False,
        "Send Claude Code's `role: \"system\"` messages that follow the first user turn as user messages: Qwen3's "
        "chat template (and others) accept a system message only at the start and fail the call otherwise.",
    ),
    "token_in": Setting(
        bool | None,
        None,
        "Token-in continuation: a call that extends the conversation of an earlier one goes to `/v1/completions` "
        "with that call's prompt + sampled ids, then the new messages rendered by `tokenizer`'s chat template, as "
        "its prompt, so every turn's prompt ids extend the previous turn's exactly (no re-tokenization drift). "
        "Default (unset): on when `tokenizer` is given and its template is one token-in is exact with. True "
        "requires that; without `tokenizer` it takes the template from the server (vLLM's `/tokenizer_info`, "
        "served with `--enable-tokenizer-info-endpoint`) and the new messages' ids from its `/tokenize`. False "
        "sends every call to the chat route.",
    ),
    "tool_call_parser": Setting(
        ToolCallParser,
        "hermes",
        "The tool-call parser the server runs (vLLM's `--tool-call-parser`), which token-in parses completions "
        "with: `hermes` (Qwen2.5, Qwen3: `<tool_call>{json}</tool_call>`) or `qwen3_coder` (Qwen3-Coder's "
        "`<function=NAME><parameter=P>` XML, values typed by the tool's schema). Token-in stays off (or refuses, "
        "when asked for) if the chat template writes tool calls this parser does not read back.",
    ),
    "tokenizer": Setting(
        Path | None,
        None,
        "The served model's Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json and its chat "
        "template; read from disk, never the Hub), for token-in. Needs `pip install 'agentbake[trl]'`.",
    ),
    "temperature": Setting(
        float | None,
        None,
        "Temperature set on every request, whatever the client asked: a trainer's, so what the agent samples is "
        "the policy the trainer computes its ratios for (Claude Code sends its own). None forwards the client's.",
        {"gt": 0},
    ),
    "top_p": Setting(
        float | None,
        None,
        "`top_p` set on every request (as `temperature`); None forwards the client's.",
        {"gt": 0, "le": 1},
    ),
    "top_k": Setting(
        int | None, None, "`top_k` set on every request (0 or -1: the whole vocabulary); None forwards the client's."
    ),
    "min_p": Setting(
        float | None, None, "`min_p` set on every request; None forwards the client's.", {"ge": 0, "le": 1}
    ),
    "repetition_penalty": Setting(
        float | None, None, "`repetition_penalty` set on every request; None forwards the client's.", {"gt": 0}
    ),
}
"""`ModelSettings`' fields, in order: what the gateway changes in agents' requests for the served model's sake."""

SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
"""GatewayConfig's sampling settings, set on every upstream request when given."""
