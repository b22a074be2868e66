#!/bin/bash
# Runs as root before the agent starts: a log the agent can read but not change.
set -euo pipefail
mkdir -p /var/log/app
for i in $(seq 1 40); do
  if [ $((i % 7)) -eq 0 ]; then
    echo "2026-01-01T00:00:$(printf %02d "$i") ERROR worker-$((i % 3)) job $i failed"
  else
    echo "2026-01-01T00:00:$(printf %02d "$i") INFO worker-$((i % 3)) job $i done"
  fi
done > /var/log/app/app.log
chmod 0644 /var/log/app/app.log
