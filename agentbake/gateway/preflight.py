"""Preflight: does an upstream answer in a form the gateway can capture for training?

One tiny chat call, unary then streaming, sent exactly as the gateway sends its own calls (the same
rewriting, the same vLLM-only capture fields, the same retry without the fields a server rejects), with
a tiny tool offered. Then each check in `CHECKS` reads the two answers and says `ok`, `warn` (worth
knowing, capture unaffected), `partial` (samples lack something a trainer may need) or `missing`
(nothing trainable). The verdict: `not capturable` when a check is missing, `partial` when one is
partial, else `capturable`.

A new check is one function `(Probes) -> Check` appended to `CHECKS`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import orjson

from agentbake.errors import PreflightError
from agentbake.gateway.calls import Call, Calls, error_message
from agentbake.gateway.capture import Capture, choices_of, token_id_of
from agentbake.gateway.config import GatewayConfig
from agentbake.gateway.errors import UpstreamError
from agentbake.gateway.upstream import UpstreamResponse

logger = logging.getLogger("agentbake.gateway")

PROMPT = "Call the tool `ping` once, or reply with one word."
PING_TOOL = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Answers pong.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}
MAX_TOKENS = 16
"""Enough for a word or a call to `ping`; the probe costs the server next to nothing."""

Status = Literal["ok", "warn", "partial", "missing"]
Verdict = Literal["capturable", "partial", "not capturable"]


@dataclass
class Probe:
    """One preflight call and what its answer carried."""

    mode: Literal["unary", "stream"]
    error: str | None = None
    """Why the call got no usable answer (HTTP status and message, or a broken stream); None when it did."""
    capture: Capture = field(default_factory=Capture)
    tool_calls: list[str] = field(default_factory=list)
    """Names of the tools the answer called."""
    completion_tokens: int | None = None
    """`usage.completion_tokens`, when the server reported it."""
    rejected: list[str] = field(default_factory=list)
    """vLLM-only request fields this call had to be sent again without."""

    @property
    def entry_ids(self) -> list[int | None]:
        return [token_id_of(entry) for entry in self.capture.logprobs]


@dataclass
class Probes:
    """Both preflight calls, what every check reads."""

    model: str
    unary: Probe
    stream: Probe

    @property
    def answered(self) -> list[Probe]:
        return [probe for probe in (self.unary, self.stream) if probe.error is None]

    @property
    def rejected(self) -> list[str]:
        return sorted({name for probe in (self.unary, self.stream) for name in probe.rejected})


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


@dataclass
class PreflightReport:
    upstream: str
    model: str
    verdict: Verdict
    checks: list[Check]
    rejected_fields: list[str]
    """vLLM-only capture fields the server refused (the gateway sends its calls without them)."""

    @property
    def ok(self) -> bool:
        """True unless the verdict is `not capturable`."""
        return self.verdict != "not capturable"

    @property
    def missing(self) -> list[str]:
        """The details of every check that is partial or missing."""
        return [check.detail for check in self.checks if check.status in ("partial", "missing")]

    def summary(self) -> str:
        lines = [f"{self.upstream} (model {self.model}): {self.verdict}"]
        lines += [f"  {check.status:<7} {check.name}: {check.detail}" for check in self.checks]
        return "\n".join(lines)


# ------------------------------------------------------------------ checks


def _modes(probes: list[Probe]) -> str:
    return " and the ".join({"unary": "unary", "stream": "streaming"}[probe.mode] for probe in probes)


def check_answers(probes: Probes) -> Check:
    failed = [p for p in (probes.unary, probes.stream) if p.error is not None]
    if failed:
        return Check("answers", "missing", "; ".join(f"the {p.mode} call failed: {p.error}" for p in failed))
    return Check("answers", "ok", "the unary and the streaming call answered")


def check_logprobs(probes: Probes) -> Check:
    if not probes.answered:
        return Check("logprobs", "missing", "no answer to read logprobs from")
    without = [p for p in probes.answered if not p.capture.logprobs]
    if without:
        return Check(
            "logprobs",
            "missing",
            f"no logprobs in the {_modes(without)} answer: the server ignores `logprobs: true`",
        )
    short = [
        f"{p.mode}: {len(p.capture.logprobs)} entries for {p.completion_tokens} tokens"
        for p in probes.answered
        if p.completion_tokens is not None and p.completion_tokens != len(p.capture.logprobs)
    ]
    if short:
        return Check(
            "logprobs", "partial", "logprob entries do not cover every completion token (" + "; ".join(short) + ")"
        )
    return Check("logprobs", "ok", "one entry per completion token, unary and streaming")


def check_token_ids(probes: Probes) -> Check:
    if not probes.answered:
        return Check("token_ids", "missing", "no answer to read token ids from")
    forms: set[str] = set()
    without: list[Probe] = []
    for probe in probes.answered:
        from_entries = probe.entry_ids
        whole = bool(from_entries) and all(i is not None for i in from_entries)
        if whole:
            keyed = all(isinstance(entry.get("token_id"), int) for entry in probe.capture.logprobs)
            forms.add("`token_id` keys" if keyed else "`token_id:<n>` tokens")
        if probe.capture.choice_token_ids:
            forms.add("`token_ids`")
        if not whole and not probe.capture.choice_token_ids:
            without.append(probe)
    if without:
        return Check(
            "token_ids",
            "missing",
            f"no completion token ids in the {_modes(without)} answer: neither `token_id:<n>` tokens or "
            "`token_id` keys in the logprobs nor `token_ids` (vLLM's `return_tokens_as_token_ids` / "
            "`return_token_ids`); re-tokenized text does not give the ids the model sampled",
        )
    return Check("token_ids", "ok", "as " + " and ".join(sorted(forms)))


def check_records(probes: Probes) -> Check:
    """The capture verdict the gateway's record of each call would carry (ids agreeing, null logprobs, ...)."""
    if not probes.answered:
        return Check("records", "missing", "no answer to record")
    verdicts = {probe.mode: probe.capture.verdict(None) for probe in probes.answered}
    flawed = {mode: v for mode, v in verdicts.items() if v["verdict"] != "complete"}
    if not flawed:
        return Check("records", "ok", "the gateway's records of both calls would be complete")
    status: Status = "missing" if any(v["verdict"] == "none" for v in flawed.values()) else "partial"
    detail = "; ".join(f"{mode}: {v['verdict']} ({', '.join(v['reasons'])})" for mode, v in flawed.items())
    return Check("records", status, f"the gateway's records would be {detail}")


def check_prompt_ids(probes: Probes) -> Check:
    without = [p for p in probes.answered if p.capture.prompt_token_ids is None]
    if not probes.answered or without:
        where = f" in the {_modes(without)} answer" if without else ""
        return Check(
            "prompt_ids",
            "partial",
            f"no `prompt_token_ids`{where}: prompts must be re-tokenized for training and the multi-turn "
            "token check cannot run",
        )
    return Check("prompt_ids", "ok", "`prompt_token_ids` in the unary and the streaming answer")


def check_tool_calls(probes: Probes) -> Check:
    calling = [p for p in probes.answered if p.tool_calls]
    if calling:
        return Check("tool_calls", "ok", f"the offered tool was called in the {_modes(calling)} answer")
    return Check(
        "tool_calls",
        "warn",
        "the model answered without calling the offered tool `ping` (it may still call tools when a task needs them)",
    )


def check_rejected_fields(probes: Probes) -> Check:
    if probes.rejected:
        names = ", ".join(f"`{name}`" for name in probes.rejected)
        return Check("rejected_fields", "warn", f"the server rejects {names}; the gateway sends its calls without")
    return Check("rejected_fields", "ok", "every capture field the gateway sends is accepted")


CHECKS: list[Callable[[Probes], Check]] = [
    check_answers,
    check_logprobs,
    check_token_ids,
    check_records,
    check_prompt_ids,
    check_tool_calls,
    check_rejected_fields,
]


def verdict_of(checks: list[Check]) -> Verdict:
    statuses = {check.status for check in checks}
    if "missing" in statuses:
        return "not capturable"
    return "partial" if "partial" in statuses else "capturable"


# ------------------------------------------------------------------ probes


def _request(model: str, *, stream: bool) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": [PING_TOOL],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": stream,
    }


def _tool_names(calls: object) -> list[str]:
    if not isinstance(calls, list):
        return []
    names = [(call.get("function") or {}).get("name") for call in calls if isinstance(call, dict)]
    return [name for name in names if isinstance(name, str) and name]


def _usage_tokens(payload: dict) -> int | None:
    usage = payload.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) else None


async def _probe(calls: Calls, model: str, mode: Literal["unary", "stream"]) -> Probe:
    call = calls.begin("openai", None, _request(model, stream=mode == "stream"))
    probe = Probe(mode, capture=call.capture)
    sent = call.injected.extensions
    try:
        response = await calls.open(call)
        probe.rejected = [name for name in sent if name not in call.injected.extensions]
        if response.status != 200:
            content = await calls.read_all(call, response)
            probe.error = f"HTTP {response.status}: {error_message(content)}"
        elif mode == "unary":
            _read_unary(probe, await calls.read_all(call, response))
        else:
            await _read_stream(probe, calls, call, response)
    except UpstreamError as error:
        probe.error = error.message
    return probe


def _read_unary(probe: Probe, content: bytes) -> None:
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        probe.error = "HTTP 200 with a body that is not a JSON object"
        return
    probe.capture.add(data)
    probe.completion_tokens = _usage_tokens(data)
    for choice in choices_of(data):
        message = choice.get("message")
        if choice.get("index", 0) == 0 and isinstance(message, dict):
            probe.tool_calls = _tool_names(message.get("tool_calls"))


async def _read_stream(probe: Probe, calls: Calls, call: Call, response: UpstreamResponse) -> None:
    async def take(chunk: dict) -> None:
        tokens = _usage_tokens(chunk)
        if tokens is not None:
            probe.completion_tokens = tokens
        for choice in choices_of(chunk):
            delta = choice.get("delta")
            if choice.get("index", 0) == 0 and isinstance(delta, dict):
                probe.tool_calls += _tool_names(delta.get("tool_calls"))

    probe.error = (await calls.events(call, response, take)).fatal


async def _model_name(calls: Calls) -> str:
    try:
        response = await calls.client.request("GET", "/models")
        try:
            content = await response.read()
        finally:
            response.close()
    except UpstreamError as error:
        raise PreflightError(
            f"preflight: cannot list the upstream's models: {error.message}; pass a model name"
        ) from None
    try:
        models = orjson.loads(content)["data"]
        return str(models[0]["id"])
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        raise PreflightError(
            f"preflight: GET {calls.config.upstream}/models answered HTTP {response.status} without a model list; "
            "pass a model name (--model)"
        ) from None


async def preflight(config: GatewayConfig) -> PreflightReport:
    """Probe `config.upstream` as the gateway would call it (its key, capture settings, CA file) and report.

    The model is `config.model_override`, else the first one `/models` lists. Nothing is traced."""
    calls = Calls(config.model_copy(update={"trace": None, "preflight": False}))
    try:
        model = config.model_override or await _model_name(calls)
        unary = await _probe(calls, model, "unary")
        stream = await _probe(calls, model, "stream")
    finally:
        await calls.aclose()
    probes = Probes(model=model, unary=unary, stream=stream)
    checks = [check(probes) for check in CHECKS]
    return PreflightReport(
        upstream=config.upstream,
        model=model,
        verdict=verdict_of(checks),
        checks=checks,
        rejected_fields=probes.rejected,
    )


def run_preflight(config: GatewayConfig) -> PreflightReport:
    """`preflight` from synchronous code (on its own event loop, in a worker thread if a loop is running)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(preflight(config))
    outcome: list[PreflightReport | BaseException] = []

    def work() -> None:
        try:
            outcome.append(asyncio.run(preflight(config)))
        except BaseException as exc:  # re-raised in the caller's thread
            outcome.append(exc)

    worker = threading.Thread(target=work, name="agentbake-preflight")
    worker.start()
    worker.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def require_capturable(config: GatewayConfig) -> PreflightReport:
    """Run the preflight; raise PreflightError (its message the whole report) when the verdict is
    `not capturable`, else log the report (a warning when partial) and return it."""
    report = run_preflight(config)
    if not report.ok:
        raise PreflightError(
            "preflight failed, the gateway will not start: this upstream's answers cannot be captured for "
            f"training (missing: {'; '.join(report.missing)})\n{report.summary()}",
            report=report,
        )
    (logger.warning if report.verdict == "partial" else logger.info)("preflight: %s", report.summary())
    return report
