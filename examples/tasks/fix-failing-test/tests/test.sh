#!/bin/bash
# The project's tests, then the verifier's own (hidden from the agent), against the agent's workdir.
# Nothing is written into the workdir: the verifier only reads what the agent left.
workdir="$PWD"
export PYTHONDONTWRITEBYTECODE=1
if python3 -m unittest -q test_calc && (cd /tests && PYTHONPATH="$workdir" python3 -m unittest -q test_hidden); then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
