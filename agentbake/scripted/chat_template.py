"""A chat template that re-renders history exactly as it was sampled, so prompt ids chain like vLLM's.

`render_consistent` renders each assistant message as the very tokens the scripted model sampled for it, with tool
arguments re-dumped as the model writes them. Re-serialised arguments keep the chain; dropped reasoning breaks it, as
with Qwen3's template.

    model = ScriptedModel()
    model.render_prompt = render_consistent
"""

from __future__ import annotations

import json
from typing import Any

from agentbake.scripted import tokens as tk
from agentbake.scripted.script import Reply
from agentbake.scripted.vllm import Completion


def render_consistent(request: dict[str, Any]) -> list[int]:
    """Prompt ids of a chat request, then the assistant's turn opening."""
    ids = tk.render_prompt({"tools": request.get("tools"), "messages": []}, add_generation_prompt=False)
    for message in request.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "assistant":
            ids += [tk.IM_START, *tk.encode("assistant\n"), *sampled_ids(message), *tk.encode("\n")]
        else:
            ids += tk.render_prompt({"messages": [message]}, add_generation_prompt=False)
    return [*ids, tk.IM_START, *tk.encode("assistant\n")]


def sampled_ids(message: dict[str, Any]) -> list[int]:
    """The ids the scripted model samples for an answer with this message's text and tool calls."""
    calls = []
    for call in message.get("tool_calls") or []:
        function = (call.get("function") or {}) if isinstance(call, dict) else {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            arguments = {"arguments": function.get("arguments")}
        calls.append((str(function.get("name")), arguments if isinstance(arguments, dict) else {}))
    reply = Reply(text=tk.content_text(message.get("content")), tool_calls=calls)
    return Completion({"messages": []}, reply, prompt_ids=[]).token_ids
