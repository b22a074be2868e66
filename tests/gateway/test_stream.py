"""Assembling a streamed completion into the one completion it amounts to."""

from __future__ import annotations

from agentbake.gateway.stream import ChunkAssembler


def test_assembler_builds_the_completion_a_stream_amounts_to():
    assembler = ChunkAssembler()
    chunks = [
        {
            "id": "c1",
            "model": "m",
            "created": 5,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "He"}}],
        },
        {"choices": [{"index": 0, "delta": {"content": "y", "reasoning": "r"}}]},
        {"choices": [{"index": 1, "delta": {"content": "other choice"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", "arguments": '{"x"'}}]},
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "END"}]},
        {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}},
    ]
    for chunk in chunks:
        assembler.add(chunk)
    completion = assembler.completion()
    assert completion["id"] == "c1" and completion["usage"]["completion_tokens"] == 2
    (choice,) = completion["choices"]
    assert choice["message"]["content"] == "Hey" and choice["message"]["reasoning_content"] == "r"
    assert choice["message"]["tool_calls"][0] == {
        "id": "t",
        "type": "function",
        "function": {"name": "f", "arguments": '{"x": 1}'},
    }
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", "END")
