#!/bin/bash
# Terminal-Bench style (pytest, baked into the image: no network here), with the agent's code kept away from
# root: tests/probe.py runs it as the workdir's owner (the agent's user) and prints what it computes; root's
# pytest only compares that output with expected.json, which that user cannot read (/tests is root's).
# Exiting early, printing a forged report or leaving a process behind earns nothing.
set -u
workdir=$PWD
uid=$(stat -c %u "$workdir") gid=$(stat -c %g "$workdir")
[ "$uid" != 0 ] || uid=65534 gid=65534  # a root-owned workdir: nobody, never root
as_agent() { setpriv --reuid="$uid" --regid="$gid" --clear-groups env -i PATH=/usr/local/bin:/usr/bin:/bin "$@"; }
scratch=$(mktemp -d) && chmod 711 "$scratch"  # the probe's output stays root's
install -d -m 755 "$scratch/probe" && install -m 644 /tests/probe.py "$scratch/probe/"
as_agent timeout -s KILL 30 python3 -I -B "$scratch/probe/probe.py" "$workdir" > "$scratch/got.json"
as_agent sh -c 'kill -KILL -1' 2>/dev/null  # what the agent's code left running
# -P keeps the working directory (the agent's) off the test runner's import path.
if PROBE_OUTPUT="$scratch/got.json" python3 -P -m pytest -q -p no:cacheprovider /tests/test_outputs.py; then
  reward=1
else
  reward=0
fi
echo "$reward" > /logs/verifier/reward.txt
