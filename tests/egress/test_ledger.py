"""The bounds of a proxy's refusal and failure records: per phase, so a hostile agent naming many hosts neither grows
them nor hides the verifier's own."""

from __future__ import annotations

import json
from pathlib import Path

from agentbake.egress.ledger import OTHER_HOSTS, Ledger


def test_each_phase_counts_and_logs_its_own_hosts_up_to_the_bound(tmp_path: Path) -> None:
    log = tmp_path / "egress.jsonl"
    ledger = Ledger("failure", 2, log)
    for n in range(1000):
        ledger.record("agent", f"h{n}.example", f"cause {n}")
    ledger.record("verifier", "x" * 70_000, "y" * 70_000)
    ledger.record("verifier", "github.com", "connect timed out")
    ledger.record("verifier", "github.com", "connection refused")
    counted = ledger.counts()
    assert counted[:3] == [
        ("agent", "h0.example", "cause 0", 1),
        ("agent", "h1.example", "cause 1", 1),
        ("agent", OTHER_HOSTS, "cause 2", 998),
    ]
    assert counted[3][2:] == ("y" * 300, 1) and counted[3][1] == "x" * 300
    assert counted[4] == ("verifier", "github.com", "connect timed out", 2)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["kind"], line["phase"]) for line in lines] == [("failure", "agent")] * 2 + [
        ("failure", "verifier")
    ] * 2
    assert log.stat().st_size < 2000
