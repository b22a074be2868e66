"""Token-in with each of vLLM's tool-call parsers: the parser must read back the calls the chat template writes, and
a Qwen3-Coder-style model's XML calls reach the agent as tool calls with their schema's types."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentbake.errors import ConfigError
from agentbake.gateway import GatewayConfig, create_app
from agentbake.gateway.settings import TOOL_CALL_PARSERS
from agentbake.gateway.tool_parsers import PARSERS
from agentbake.gateway.trace import load_trace
from agentbake.scripted import Reply, ScriptedModel

from .test_token_in import converse, gateway_on

HERMES_CALL = """\
{{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
{{- tool_call.arguments | tojson }}
{{- '}\\n</tool_call>' }}"""
# Qwen3-Coder's template writes each argument as a parameter: strings as they are, other values as JSON.
XML_CALL = """\
{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}
{%- for key, value in tool_call.arguments.items() %}
{{- '<parameter=' + key + '>\\n' + (value if value is string else value | tojson) + '\\n</parameter>\\n' }}
{%- endfor %}
{{- '</function>\\n</tool_call>' }}"""
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["command"],
        },
    }
]


@pytest.fixture(scope="module")
def coder_tokenizer(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tokenizer_dir` with its template writing tool calls as Qwen3-Coder's does."""
    folder = tmp_path_factory.mktemp("coder-tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((tokenizer_dir / name).read_bytes())
    template = (tokenizer_dir / "chat_template.jinja").read_text()
    assert HERMES_CALL in template
    (folder / "chat_template.jinja").write_text(template.replace(HERMES_CALL, XML_CALL))
    return folder


def test_a_parser_that_cannot_read_the_templates_calls_keeps_token_in_off(
    tokenizer_dir: Path, coder_tokenizer: Path, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = "http://127.0.0.1:9/v1"
    for folder, parser in ((tokenizer_dir, "qwen3_coder"), (coder_tokenizer, "hermes")):
        with pytest.raises(ConfigError, match=f"vLLM's {parser} tool-call parser does not read back"):
            create_app(GatewayConfig(upstream=upstream, token_in=True, tokenizer=folder, tool_call_parser=parser))
        gateway = create_app(GatewayConfig(upstream=upstream, tokenizer=folder, tool_call_parser=parser))
        assert gateway.calls.token_in is None  # unset: stays off, with a warning
    assert "token-in stays off" in caplog.text
    gateway = create_app(GatewayConfig(upstream=upstream, tokenizer=coder_tokenizer, tool_call_parser="qwen3_coder"))
    assert gateway.calls.token_in is not None


def test_a_tool_call_parser_vllm_does_not_name_is_refused_with_the_choices() -> None:
    expected = (
        "tool_call_parser\n  Value error, 'qwen3' is not a parser token-in has; expected one of hermes, qwen3_coder"
    )
    with pytest.raises(ValidationError, match=re.escape(expected)):
        GatewayConfig(upstream="http://127.0.0.1:9/v1", tool_call_parser="qwen3")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_xml_tool_calls_on_the_completions_route_reach_the_agent_typed_by_the_schema(
    drifting_model: tuple[ScriptedModel, str], coder_tokenizer: Path, tmp_path: Path, stream: bool
) -> None:
    call = "<tool_call>\n<function=Bash>\n<parameter=command>\nls -la\n</parameter>\n<parameter=timeout>\n30\n"
    call += "</parameter>\n</function>\n</tool_call>"
    model, url = drifting_model  # it samples hermes calls on the chat route, and any text on /v1/completions
    # The first call takes the chat route; the later ones continue it on /v1/completions, where the text the model
    # samples is all the gateway gets.
    model.script = [Reply(text="", tool_calls=[("Bash", {"command": "pwd"})]), Reply(text="Listing.\n" + call)]
    model.script.append(Reply(text="Done."))
    trace = tmp_path / "t.jsonl"
    settings = {"token_in": True, "tokenizer": coder_tokenizer, "tool_call_parser": "qwen3_coder"}
    with gateway_on(url, trace, **settings) as gateway:
        answers = converse(gateway.url, stream=stream, tools=TOOLS)
    assert [r.token_in["route"] for r in load_trace(trace).records] == ["chat", "completions", "completions"]
    text, use = answers[1]
    assert text == {"type": "text", "text": "Listing.\n"}
    assert (use["type"], use["name"], use["input"]) == ("tool_use", "Bash", {"command": "ls -la", "timeout": 30})
    assert answers[2] == [{"type": "text", "text": "Done."}]


def test_every_parser_setting_names_a_parser() -> None:
    assert tuple(PARSERS) == TOOL_CALL_PARSERS
