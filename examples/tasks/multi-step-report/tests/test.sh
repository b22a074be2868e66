#!/bin/bash
# Partial credit: a third of the reward per correct file.
expected_errors="$(grep ERROR /var/log/app/app.log)"
count="$(printf '%s\n' "$expected_errors" | wc -l)"
score=0
[ "$(cat report/errors.txt 2>/dev/null)" = "$expected_errors" ] && score=$((score + 1))
[ "$(tr -d '[:space:]' < report/count.txt 2>/dev/null)" = "$count" ] && score=$((score + 1))
[ "$(cat report/summary.md 2>/dev/null)" = "$(printf '# Error report\nTotal errors: %s' "$count")" ] && score=$((score + 1))
# -I: the workdir (cwd) is not on the path, so the agent's files cannot stand in for json.
python3 -I -c "import json; print(json.dumps({'reward': round($score / 3, 4), 'files_correct': $score}))" \
  > /logs/verifier/reward.json
