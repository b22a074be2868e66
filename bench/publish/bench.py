"""Publish benchmark: claude-code into a local registry (Debian's docker-registry), cold and when skipped.

    .venv/bin/python bench/publish/bench.py [--image claude-code] [--runs 3]

Baseline, in the same run on the same engine: a plain engine push (`docker push`, what a pipeline
without a registry check runs) to a fresh registry, and again to the registry that already holds it.
Each cold case gets its own fresh registry so no blob is mounted from an earlier push.
Then the digest check: the digest the push reported, the registry's manifest digest, and the image
pulled back by that digest must all agree with the image that was built.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' registry service
# As in tests/conftest.py: no Ryuk reaper (it cannot be pulled offline), ports reached on loopback.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")

from agentbake.buildkit import Catalog, build, connect, plan
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.publish.registry import Distribution, Repository, engine_push, push_image
from tests.publish.registry_service import build_registry_image, run_registry


def timed(action) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", default="claude-code")
    parser.add_argument("--runs", type=int, default=3, help="repeats of the skipped / warm cases")
    args = parser.parse_args()
    client = connect()
    catalog = Catalog.discover()
    built = build(client, plan(client, catalog.load(args.image), catalog.templates_dir, ca_cert=detect_ca_bundle()))
    image = client.images.get(built.tag)
    tag = built.tag.split(":")[1]
    registry_image = build_registry_image(client)
    rows: list[tuple[str, str, float]] = []

    with run_registry(registry_image) as baseline:
        repo = Repository.parse(baseline.repository()).child(args.image)
        image.tag(repo.reference, tag)
        cold, _ = timed(lambda: engine_push(client, repo.reference, tag, None))
        warm = [timed(lambda: engine_push(client, repo.reference, tag, None))[0] for _ in range(args.runs)]
        client.images.remove(f"{repo.reference}:{tag}", noprune=True)
        rows += [("baseline: engine push", "cold", cold), ("baseline: engine push", "again", statistics.median(warm))]

    with run_registry(registry_image) as fresh:
        dist = Distribution(Repository.parse(fresh.repository()).child(args.image), None)
        cold, pushed = timed(lambda: push_image(client, image, dist, tag, dist.manifest(tag)))
        skips = [timed(lambda: push_image(client, image, dist, tag, dist.manifest(tag))) for _ in range(args.runs)]
        assert pushed.action == "pushed" and all(s[1].action == "skipped" for s in skips)
        rows += [
            ("agentbake publish", "cold (+latest)", cold),
            ("agentbake publish", "skipped", statistics.median(s[0] for s in skips)),
        ]

        remote = dist.manifest(tag)
        reference = dist.repository.reference
        original_id = image.id
        # By digest: the engine fetches and verifies the registry's manifest (the catalog image may be in use by
        # running containers, so it is not removed first; tests/publish removes a throwaway image instead).
        pulled = client.images.pull(f"{reference}@{pushed.digest}")
        checks = {
            "push-reported digest == registry manifest digest": pushed.digest == remote.digest,
            "registry config digest == built image id": remote.config_digest == original_id,
            "pulled image id == built image id": pulled.id == original_id,
            f"pulled RepoDigests holds {reference}@digest": f"{reference}@{pushed.digest}"
            in pulled.attrs["RepoDigests"],
        }
        for ref in pulled.tags:
            if ref.startswith(fresh.address):
                client.images.remove(ref, noprune=True)

    print(f"\n{args.image} ({built.size_bytes / 1e6:.0f} MB, {built.tag}) to a registry on 127.0.0.1\n")
    print(f"| {'what':<24} | {'case':<16} | {'seconds':>8} |")
    print(f"|{'-' * 26}|{'-' * 18}|{'-' * 10}|")
    for what, case, seconds in rows:
        print(f"| {what:<24} | {case:<16} | {seconds:>8.2f} |")
    print(f"\ndigest {pushed.digest}")
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    if not all(checks.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
