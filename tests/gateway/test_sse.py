"""Server-sent events: decoding the upstream's stream, encoding the clients' events."""

from __future__ import annotations

import orjson

from agentbake.gateway.sse import SSEDecoder, sse_data, sse_event, sse_events


def test_decoder_handles_split_reads_crlf_comments_and_multiline_data():
    decoder = SSEDecoder()
    raw = b': keep-alive\r\ndata: {"a":\r\ndata: 1}\r\n\r\nevent: x\ndata:[DONE]\n\ndata: tail'
    events = []
    for i in range(0, len(raw), 3):
        events += decoder.feed(raw[i : i + 3])
    assert events == [b'{"a":\n1}', b"[DONE]"]
    assert decoder.close() == [b"tail"]
    assert decoder.close() == []


def test_encoded_events_decode_back():
    encoded = sse_events([("message_start", {"a": 1}), ("ping", {})]) + sse_data({"b": [2]}) + b"data: [DONE]\n\n"
    assert encoded.startswith(sse_event("message_start", {"a": 1}))
    decoded = SSEDecoder().feed(encoded)
    assert [orjson.loads(d) for d in decoded[:3]] == [{"a": 1}, {}, {"b": [2]}] and decoded[3] == b"[DONE]"
