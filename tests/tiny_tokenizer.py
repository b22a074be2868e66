"""A real Hugging Face tokenizer built on this machine (no Hub): byte-level BPE trained on the repository's
own text, Qwen's special tokens, and a Qwen2.5-style chat template (hermes tool calls).

Shared by the scripted model's tokenizer tests and the TRL end-to-end test. Trained on the repository's
README and package text so the agents' English prompts compress to a few characters per token (a short
sequence keeps a CPU training step cheap)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

# Qwen2.5's template, shortened (no default system prompt): tools in a system turn, hermes tool calls,
# tool results as user turns inside <tool_response>.
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' and not message.tool_calls %}
{{- '<|im_start|>assistant\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
{{- tool_call.arguments | tojson }}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def corpus() -> list[str]:
    """The repository's markdown and package source, in a fixed order."""
    files = sorted(ROOT.glob("*.md")) + sorted(ROOT.glob("agentbake/**/*.md")) + sorted(ROOT.glob("agentbake/**/*.py"))
    return [path.read_text() for path in files]


def build_tokenizer(folder: Path, *, vocab_size: int = 8192) -> Path:
    """Train the tokenizer and save it (tokenizer.json, tokenizer_config.json with the chat template) in
    `folder`, which is returned."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    model.train_from_iterator(corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE
    )
    tokenizer.save_pretrained(str(folder))
    return folder
