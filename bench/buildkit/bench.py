"""Build-kit benchmark: no-op rebuilds, cold builds, image sizes, each beside its baseline.

    .venv/bin/python bench/buildkit/bench.py            # everything (cold builds take minutes)
    .venv/bin/python bench/buildkit/bench.py --quick    # no-op rebuilds and sizes only

Baselines, measured in the same run on the same engine:
- no-op rebuild: the legacy builder given the same context with a warm layer cache
  (what a tool that always calls the builder pays) vs `agentbake build --all` finding the tag.
- size: claude-code installed the naive way (Debian nodejs + npm, `npm install -g`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from agentbake.buildkit import Catalog, build, connect, plan
from agentbake.buildkit.build import context_tar
from agentbake.buildkit.builders import run_build
from agentbake.buildkit.ca import detect_ca_bundle

AGENTBAKE = Path(sys.executable).with_name("agentbake")
NAIVE_TAG = "agentbake-bench/naive-claude-code:latest"


def naive_dockerfile(version: str, with_ca: bool) -> str:
    ca = "COPY ca.crt /usr/local/share/ca-certificates/extra.crt\n" if with_ca else ""
    return (
        f"FROM debian:bookworm-slim\n{ca}"
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        "ca-certificates nodejs npm && rm -rf /var/lib/apt/lists/*\n"
        "ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt\n"
        f"RUN npm install -g @anthropic-ai/claude-code@{version}\n"
    )


def median_seconds(action, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip cold builds (no-op rebuilds and sizes only)")
    parser.add_argument("--runs", type=int, default=5, help="repetitions of each no-op measurement")
    args = parser.parse_args()

    engine, catalog, ca = connect(), Catalog.discover(), detect_ca_bundle()
    specs = catalog.load_all()
    plans = {spec.name: plan(engine, spec, catalog.templates_dir, ca_cert=ca) for spec in specs}
    results = {name: build(engine, p) for name, p in plans.items()}  # make sure every image exists
    rows: list[tuple[str, str, str]] = []

    def noop_cli() -> None:
        subprocess.run([str(AGENTBAKE), "build", "--all", "--json"], check=True, capture_output=True)

    def noop_builder() -> None:
        for name, p in plans.items():
            run_build(engine, context_tar(p.rendered.context_files()), f"agentbake-bench/{name}:warm")

    def noop_library() -> None:
        for spec in specs:
            assert build(engine, plan(engine, spec, catalog.templates_dir, ca_cert=ca)).cached

    builder_seconds = f"{median_seconds(noop_builder, args.runs):.2f} (builder, warm layer cache)"
    rows.append(
        ("no-op rebuild, 3 images, CLI end to end (s)", f"{median_seconds(noop_cli, args.runs):.2f}", builder_seconds)
    )
    rows.append(
        ("no-op rebuild, 3 images, in process (s)", f"{median_seconds(noop_library, args.runs):.2f}", builder_seconds)
    )

    if not args.quick:
        for name, p in plans.items():
            started = time.perf_counter()
            results[name] = build(engine, p, no_cache=True)
            rows.append((f"cold build {name} (s)", f"{time.perf_counter() - started:.1f}", "-"))

    for name, result in results.items():
        rows.append((f"size {name} (MB)", f"{result.size_bytes / 1e6:.0f}", "-"))

    version = json.loads(plans["claude-code"].rendered.spec.lock_path.read_text())["agent"]["version"]
    naive_files = {"Dockerfile": naive_dockerfile(version, ca is not None).encode()}
    if ca is not None:
        naive_files["ca.crt"] = ca.read_bytes()
    started = time.perf_counter()
    naive_id = run_build(engine, context_tar(naive_files), NAIVE_TAG, no_cache=not args.quick)
    naive_seconds = time.perf_counter() - started
    naive_size = engine.images.get(naive_id).attrs["Size"]
    ours = results["claude-code"].size_bytes
    if not args.quick:
        rows.append(
            (
                "cold build claude-code vs naive npm -g (s)",
                f"{results['claude-code'].seconds:.1f}",
                f"{naive_seconds:.1f}",
            )
        )
    rows.append(("size claude-code vs naive npm -g (MB)", f"{ours / 1e6:.0f}", f"{naive_size / 1e6:.0f}"))
    rows.append(("size ratio naive / ours", f"{naive_size / ours:.2f}x", "-"))

    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'agentbake':>10}  baseline")
    for measure, ours_value, baseline in rows:
        print(f"{measure:<{width}}  {ours_value:>10}  {baseline}")
    for name in plans:
        engine.images.remove(f"agentbake-bench/{name}:warm", noprune=False)


if __name__ == "__main__":
    main()
