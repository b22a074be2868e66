#!/bin/bash
mkdir -p report

grep ERROR /var/log/app/app.log > report/errors.txt

wc -l < report/errors.txt | tr -d ' ' > report/count.txt

printf '# Error report\nTotal errors: %s\n' "$(cat report/count.txt)" > report/summary.md
