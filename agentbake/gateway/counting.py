"""Prompt token counts for the count-tokens endpoints (Anthropic's `count_tokens`, Gemini's `countTokens`):
exact through the upstream's `/tokenize` (vLLM), else an estimate."""

from __future__ import annotations

import math

import orjson

from agentbake.gateway.calls import Calls
from agentbake.gateway.errors import UpstreamError


class TokenCounter:
    """Counts the prompt of a translated chat request; after a 404 or 405 from `/tokenize` (not vLLM) it
    stops asking and estimates."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self._tokenize_works = True

    async def count(self, converted: dict) -> int:
        """Prompt tokens of a chat request (its messages and tools, the assistant's turn opened)."""
        config = self.calls.config
        payload = {
            "model": config.model_override or converted["model"],
            "messages": converted["messages"],
            "add_generation_prompt": True,
        }
        if "tools" in converted:
            payload["tools"] = converted["tools"]
        count = await self._tokenize(payload) if self._tokenize_works else None
        if count is None:
            # Without a tokenizer: ~4 bytes of JSON per token, the usual rough ratio for English and code.
            count = math.ceil(len(orjson.dumps(payload["messages"])) / 4)
            count += math.ceil(len(orjson.dumps(payload.get("tools", []))) / 4)
        return count

    async def _tokenize(self, payload: dict) -> int | None:
        try:
            url = self.calls.config.resolved_tokenize_url
            response = await self.calls.client.request("POST", url, orjson.dumps(payload))
            try:
                content = await response.read()
            finally:
                response.close()
        except UpstreamError:
            return None
        if response.status in (404, 405):
            self._tokenize_works = False  # not vLLM: stop asking
            return None
        try:
            count = orjson.loads(content).get("count")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return count if isinstance(count, int) and response.status == 200 else None
