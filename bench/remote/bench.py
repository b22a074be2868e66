"""Remote backends' own overhead, on the loopback fakes of E2B and the Hub (tests/runner/fakes/).

    .venv/bin/python bench/remote/bench.py [--runs 10] [--image claude-code]

Each fake's sandbox is a local container, so absolute times are this machine's container start and exec,
not the clouds'. What is ours is the difference to the baseline, measured in the same run, same fake, same
image, interleaved run by run:
- create -> ready: the raw SDK call (`e2b.Sandbox.create`, `huggingface_hub.Sandbox.create`) vs our
  `create` (which adds the bounded-retry wrapper and asks the sandbox for the user's home; Hugging Face
  also makes the root-only folder background jobs report into);
- exec `echo ok`: the raw SDK command vs ours (E2B: deadline wrapper and `timeout=0`; Hugging Face: the
  `setpriv` drop to the image's user with the server's credential removed from the environment);
- kill: the raw SDK kill vs ours (Hugging Face: plus the check that the job ended).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the fakes live with the tests

import docker

from agentbake.buildkit import Catalog, build, connect, plan
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.runner import E2BBackend, E2BConfig, HFBackend, HFConfig, SandboxRequest
from agentbake.runner.remote.image_facts import ImageFacts
from agentbake.serve import serve_in_thread
from tests.runner.fakes.containers import LocalMachines
from tests.runner.fakes.e2b_fake import FakeE2B
from tests.runner.fakes.hf_fake import FakeHub


def timed(action: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    value = action()
    return time.perf_counter() - started, value


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def lifecycle(create: Callable[[], object], run: Callable[[object], object], kill: Callable[[object], object]):
    create_s, sandbox = timed(create)
    exec_s, _ = timed(lambda: run(sandbox))
    kill_s, _ = timed(lambda: kill(sandbox))
    return create_s, exec_s, kill_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--image", default="claude-code")
    args = parser.parse_args()

    client = connect()
    catalog = Catalog.discover()
    tag = build(client, plan(client, catalog.load(args.image), catalog.templates_dir, ca_cert=detect_ca_bundle())).tag
    facts = ImageFacts.from_labels(tag, docker.from_env().images.get(tag).labels)
    template = f"{args.image}:{tag.rsplit(':', 1)[1]}"
    machines = LocalMachines()
    e2b_fake = FakeE2B(machines, {template: (tag, facts.user)})
    hub = FakeHub(machines)
    samples: dict[str, list[tuple[float, float, float]]] = {k: [] for k in ("e2b raw", "e2b ours", "hf raw", "hf ours")}
    with serve_in_thread(e2b_fake) as e2b_served, serve_in_thread(hub) as hub_served:
        os.environ.update(e2b_fake.env(e2b_served.url))
        hub.url = hub_served.url
        os.environ.update({"HF_ENDPOINT": hub_served.url, "HF_TOKEN": "hf_fake_token_for_bench"})
        import e2b
        import huggingface_hub

        e2b_backend = E2BBackend(E2BConfig(template=template), image_facts=facts)
        hf_backend = HFBackend(HFConfig(image=tag), image_facts=facts)
        request = SandboxRequest(image=tag, rollout_id="bench")
        try:
            for _ in range(args.runs):
                samples["e2b raw"].append(
                    lifecycle(
                        lambda: e2b.Sandbox.create(template=template, timeout=600, metadata={"k": "v"}, retries=0),
                        lambda s: s.commands.run("echo ok", user=facts.user, timeout=0),
                        lambda s: s.kill(),
                    )
                )
                samples["e2b ours"].append(
                    lifecycle(lambda: e2b_backend.create(request), lambda s: s.exec("echo ok"), lambda s: s.kill())
                )
                samples["hf raw"].append(
                    lifecycle(
                        lambda: huggingface_hub.Sandbox.create(image=tag, idle_timeout=600),
                        lambda s: s.run("echo ok", check=False),
                        lambda s: s.kill(),
                    )
                )
                samples["hf ours"].append(
                    lifecycle(lambda: hf_backend.create(request), lambda s: s.exec("echo ok"), lambda s: s.kill())
                )
        finally:
            e2b_backend.close()
            hf_backend.close()
            machines.remove_all()

    print(f"image {tag}, {args.runs} runs each, interleaved; seconds (p50 / p95)")
    header = f"{'backend':<10} {'create->ready':>16} {'exec echo':>16} {'kill':>16}"
    print(header)
    print("-" * len(header))
    for name, runs in samples.items():
        cells = [
            f"{statistics.median([r[i] for r in runs]):.3f} / {p([r[i] for r in runs], 0.95):.3f}" for i in range(3)
        ]
        print(f"{name:<10} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16}")
    print()
    print("our overhead per rollout setup (create->ready + one exec), p50 of ours minus p50 of raw:")
    for cloud in ("e2b", "hf"):
        raw, ours = samples[f"{cloud} raw"], samples[f"{cloud} ours"]
        extra = [statistics.median([r[i] for r in ours]) - statistics.median([r[i] for r in raw]) for i in range(2)]
        print(f"  {cloud}: create {extra[0] * 1000:+.0f} ms, exec {extra[1] * 1000:+.0f} ms")


if __name__ == "__main__":
    main()
