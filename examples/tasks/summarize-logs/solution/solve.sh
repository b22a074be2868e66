#!/bin/bash
cd /app
{
  echo "service,errors"
  for log in logs/*.log; do
    echo "$(basename "$log" .log),$(grep -c ERROR "$log")"
  done
} > summary.csv
cat summary.csv
