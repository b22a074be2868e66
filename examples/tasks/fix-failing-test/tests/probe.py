"""Run by test.sh as the agent's own user, never root: imports the agent's `calc` and prints what it
computes for the verifier's inputs, as one JSON object. It decides nothing: root compares the output
with expected.json, which this user cannot read."""

import json
import os
import sys

# Only the final result goes to the real stdout; whatever the agent's code prints goes to stderr.
result_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.path.insert(0, sys.argv[1])

import calc  # noqa: E402  (the workdir is on the path only now)

CASES = {
    "mean([1.0, 2.0, 3.0])": lambda: calc.mean([1.0, 2.0, 3.0]),
    "mean([4.0])": lambda: calc.mean([4.0]),
    "mean([2.5, -0.5])": lambda: calc.mean([2.5, -0.5]),
    "mean([])": lambda: calc.mean([]),
    "clamp(5, 0, 3)": lambda: calc.clamp(5, 0, 3),
    "clamp(-1, 0, 3)": lambda: calc.clamp(-1, 0, 3),
}
results = {}
for name, case in CASES.items():
    try:
        results[name] = ["value", case()]
    except Exception as exc:
        results[name] = ["raises", type(exc).__name__]
result_out.write(json.dumps(results))
result_out.close()
