"""Start-up of the command line: `agentbake --help` beside `agentbake run --help` and a bare `python -c pass`.

    .venv/bin/python bench/cli/help_bench.py [--runs 21]

Each row is the median (and min, max) wall time of N fresh processes, bytecode already cached (as after an
install). `agentbake --help` lists every command from a table without importing any; the target is 0.15 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_S = 0.15
AGENTBAKE = [str(Path(sys.executable).parent / "agentbake")]  # the console script an install makes


def _time(argv: list[str], runs: int) -> list[float]:
    subprocess.run(argv, capture_output=True, check=True)  # warm the bytecode and page caches
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        walls.append(time.perf_counter() - start)
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="processes per row (the median is printed)")
    runs = parser.parse_args().runs
    rows = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "agentbake --help": [*AGENTBAKE, "--help"],
        "agentbake run --help": [*AGENTBAKE, "run", "--help"],
    }
    print(f"{'command':<26} {'median s':>9} {'min s':>7} {'max s':>7}  target {TARGET_S} s, {runs} runs each")
    for label, argv in rows.items():
        walls = _time(argv, runs)
        verdict = "" if label.startswith("python") else ("ok" if statistics.median(walls) <= TARGET_S else "SLOW")
        print(f"{label:<26} {statistics.median(walls):>9.3f} {min(walls):>7.3f} {max(walls):>7.3f}  {verdict}")


if __name__ == "__main__":
    main()
