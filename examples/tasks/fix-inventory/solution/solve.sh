#!/bin/bash
cd /app
sed -i 's/if p\["stock"\] > p\["reorder_at"\]/if p["stock"] <= p["reorder_at"]/' inventory.py
grep -n reorder_at inventory.py
