"""SSE decoding and assembling a streamed completion."""

from __future__ import annotations

from agentbake.gateway.stream import ChunkAssembler, SSEDecoder


def test_decoder_handles_split_reads_crlf_comments_and_multiline_data():
    decoder = SSEDecoder()
    raw = b': keep-alive\r\ndata: {"a":\r\ndata: 1}\r\n\r\nevent: x\ndata:[DONE]\n\ndata: tail'
    events = []
    for i in range(0, len(raw), 3):
        events += decoder.feed(raw[i : i + 3])
    assert events == [b'{"a":\n1}', b"[DONE]"]
    assert decoder.close() == [b"tail"]
    assert decoder.close() == []


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
