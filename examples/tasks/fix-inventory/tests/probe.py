"""Run as the agent's user, never root: the agent's `to_reorder` on the verifier's inputs, printed as one JSON list.
The verifier trusts nothing else this process does; root compares what it printed with expected.json."""

import json
import sys

sys.path.insert(0, sys.argv[1])  # the workdir (python -I keeps everything else off the path)
from inventory import to_reorder

CASES = [
    [],
    [{"name": "a", "stock": 0, "reorder_at": 0}],
    [{"name": "a", "stock": 5, "reorder_at": 2}, {"name": "b", "stock": 2, "reorder_at": 2}],
    [
        {"name": "x", "stock": 1, "reorder_at": 3},
        {"name": "y", "stock": 9, "reorder_at": 3},
        {"name": "z", "stock": 3, "reorder_at": 3},
    ],
]

print(json.dumps([to_reorder(products) for products in CASES]))
