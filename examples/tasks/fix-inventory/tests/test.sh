#!/bin/bash
# Terminal-Bench style: pytest on the verifier's tests, pytest baked into the image (no network here).
# -P keeps the agent's /app (the working directory) off the test runner's import path.
if python3 -P -m pytest -q -p no:cacheprovider /tests/test_outputs.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
