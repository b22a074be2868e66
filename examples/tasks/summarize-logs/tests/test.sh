#!/bin/bash
# Bash only: the task image has no python. The expected counts are the verifier's own, not the agent's.
expected='service,errors
api,4
billing,8
db,12
web,16'
logs_ok=$(cd /app/logs && sha256sum api.log billing.log db.log web.log | sha256sum | cut -c1-16)
echo "logs digest $logs_ok"
if [ "$(cat /app/summary.csv 2>/dev/null)" = "$expected" ] && [ "$logs_ok" = "11a5cf772bcf1698" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "summary.csv:"; cat /app/summary.csv 2>/dev/null
  echo 0 > /logs/verifier/reward.txt
fi
