#!/bin/bash
# Deterministic logs: in the i-th service's log, line n is an ERROR when n % 5 < i (4, 8, 12, 16 errors).
set -euo pipefail
mkdir -p /app/logs
i=0
for service in api billing db web; do
  i=$((i + 1))
  for n in $(seq 1 20); do
    if [ $((n % 5)) -lt "$i" ]; then level=ERROR outcome=failed; else level=INFO outcome="ok (no error)"; fi
    echo "2025-01-0$i 10:00:$(printf %02d "$n") $service $level request $n $outcome" >> "/app/logs/$service.log"
  done
done
