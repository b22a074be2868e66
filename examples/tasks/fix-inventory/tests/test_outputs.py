"""The verifier's tests (hidden from the agent): the agent's function runs in a child process, so nothing it
does at import time can change how these tests judge it."""

import json
import subprocess

CASES = [
    ([], []),
    ([{"name": "a", "stock": 0, "reorder_at": 0}], ["a"]),
    ([{"name": "a", "stock": 5, "reorder_at": 2}, {"name": "b", "stock": 2, "reorder_at": 2}], ["b"]),
    (
        [
            {"name": "x", "stock": 1, "reorder_at": 3},
            {"name": "y", "stock": 9, "reorder_at": 3},
            {"name": "z", "stock": 3, "reorder_at": 3},
        ],
        ["x", "z"],
    ),
]


def reorder(products: list[dict]) -> list[str]:
    code = "import json, sys; from inventory import to_reorder; print(json.dumps(to_reorder(json.load(sys.stdin))))"
    done = subprocess.run(
        ["python3", "-c", code], input=json.dumps(products), capture_output=True, text=True, cwd="/app", timeout=30
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_to_reorder() -> None:
    for products, expected in CASES:
        assert reorder(products) == expected, products


def test_inputs_are_not_changed() -> None:
    products = [{"name": "a", "stock": 1, "reorder_at": 2}]
    assert reorder(products) == ["a"]
