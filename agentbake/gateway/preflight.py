"""Preflight: does an upstream answer in a form the gateway can capture for training?

It sends a tiny chat call as the gateway sends its own, unary and streaming, then one prompt at two temperatures
(`preflight_probes.py`). Each check in `CHECKS` reads the answers. The verdict is `not capturable` when a check is
missing, `partial` when one is partial, else `capturable`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass

from agentbake.errors import PreflightError
from agentbake.gateway.calls import Calls
from agentbake.gateway.config import LOGPROBS_MODES, SAMPLING_FIELDS, GatewayConfig, LogprobsMode
from agentbake.gateway.preflight_checks import CHECKS, Check, Probes, Verdict, verdict_of
from agentbake.gateway.preflight_probes import SAMPLING_TEMPERATURES, SAMPLING_TOP_LOGPROBS, model_name, probe

logger = logging.getLogger("agentbake.gateway")


@dataclass
class PreflightReport:
    upstream: str
    model: str
    verdict: Verdict
    checks: list[Check]
    rejected_fields: list[str]
    """vLLM-only capture fields the server refused (the gateway sends its calls without them)."""
    logprobs_mode: LogprobsMode | None = None
    """What the upstream's logprobs are: as the sampling probes showed, else as the gateway was told
    (`GatewayConfig.logprobs_mode`); None when neither says."""

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


async def preflight(config: GatewayConfig) -> PreflightReport:
    """Probe `config.upstream` as the gateway would call it (key, capture settings, CA file) and report.

    The model is `config.model_override`, else the first one `/models` lists. Nothing is traced. The probes set their
    own temperatures, leaving out the config's sampling settings."""
    unset = dict.fromkeys(SAMPLING_FIELDS)
    quiet = config.model_copy(update={"trace": None, "preflight": False, **unset})
    calls = Calls(quiet)
    # The sampling probes ask for a few alternatives per position: more tokens to compare than one.
    wide = Calls(quiet.model_copy(update={"top_logprobs": max(config.top_logprobs, SAMPLING_TOP_LOGPROBS)}))
    try:
        model = config.model_override or await model_name(calls)
        unary = await probe(calls, model, "unary")
        stream = await probe(calls, model, "stream")
        cool, hot = [await probe(wide, model, "unary", temperature) for temperature in SAMPLING_TEMPERATURES]
    finally:
        await calls.aclose()
        await wide.aclose()
    probes = Probes(model, unary, stream, (cool, hot), configured_logprobs_mode=config.logprobs_mode)
    checks = [check(probes) for check in CHECKS]
    sampled_as = probes.sampling_evidence.sampled_as
    return PreflightReport(
        upstream=config.upstream,
        model=model,
        verdict=verdict_of(checks),
        checks=checks,
        rejected_fields=probes.rejected,
        logprobs_mode=sampled_as if sampled_as in LOGPROBS_MODES else config.logprobs_mode,
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
    """Run the preflight and return its report; raise PreflightError when it is `not capturable`.

    The report is logged, as a warning when partial. Its `logprobs_mode` is what records get stamped with."""
    report = run_preflight(config)
    if not report.ok:
        raise PreflightError(
            "preflight failed, the gateway will not start: this upstream's answers cannot be captured for "
            f"training (missing: {'; '.join(report.missing)})\n{report.summary()}",
            report=report,
        )
    (logger.warning if report.verdict == "partial" else logger.info)("preflight: %s", report.summary())
    return report
