#!/bin/bash
# The agent's code is hostile input, so it never runs as root here: tests/probe.py runs it as the
# workdir's owner (the agent's user) and only prints what calc computes for the verifier's inputs
# (the project's own tests and hidden ones); root compares that with expected.json, which that user
# cannot read (/tests is root's), and writes the reward. Exiting early (os._exit), printing a forged
# report or leaving a process behind earns nothing. Needs root's CAP_SETUID/SETGID (setpriv).
set -u
workdir=$PWD
uid=$(stat -c %u "$workdir") gid=$(stat -c %g "$workdir")
[ "$uid" != 0 ] || uid=65534 gid=65534  # a root-owned workdir: nobody, never root
as_agent() { setpriv --reuid="$uid" --regid="$gid" --clear-groups env -i PATH=/usr/local/bin:/usr/bin:/bin "$@"; }
scratch=$(mktemp -d) && chmod 711 "$scratch"  # the probe's output stays root's
install -d -m 755 "$scratch/probe" && install -m 644 /tests/probe.py "$scratch/probe/"
as_agent timeout -s KILL 30 python3 -I -B "$scratch/probe/probe.py" "$workdir" > "$scratch/got.json"
as_agent sh -c 'kill -KILL -1' 2>/dev/null  # what the agent's code left running (it may hold got.json open)
if python3 -I - "$scratch/got.json" /tests/expected.json <<'PY'
import json
import sys

try:
    got = json.load(open(sys.argv[1]))
except ValueError:
    got = None
want = json.load(open(sys.argv[2]))
print("probe:", json.dumps(got))
sys.exit(0 if got == want else 1)
PY
then reward=1; else reward=0; fi
echo "$reward" > /logs/verifier/reward.txt
