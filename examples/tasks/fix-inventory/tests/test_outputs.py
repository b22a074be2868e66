"""The verifier's tests (pytest, as Terminal-Bench's), run as root on what the agent's code printed as its own
user (probe.py): no code of the agent's runs in this process."""

import json
import os


def test_every_case_is_reordered_right() -> None:
    with open(os.environ["PROBE_OUTPUT"]) as printed, open("/tests/expected.json") as expected:
        want = json.load(expected)
        got = json.load(printed)
    assert isinstance(got, list) and len(got) == len(want)
    for index, (answer, right) in enumerate(zip(got, want, strict=True)):
        assert answer == right, f"case {index}"
