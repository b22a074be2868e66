#!/bin/bash
# Reward 1 when hello.txt holds exactly the requested line.
if [ "$(cat hello.txt 2>/dev/null)" = "Hello, agentbake!" ] && [ "$(wc -l < hello.txt)" -eq 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "hello.txt is missing or wrong: $(head -c 200 hello.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
