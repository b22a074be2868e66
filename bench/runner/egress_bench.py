"""The verifier phase of a Terminal-Bench-shaped task through the rollout's egress proxy: the first rollout
(cold cache) vs later ones (served from the cache), beside the same test.sh with everything pre-installed.

    .venv/bin/python bench/runner/egress_bench.py [--runs 4] [--packages 6] [--mib 2] [--latency-ms 50]
    .venv/bin/python bench/runner/egress_bench.py --real-pypi [--requirements "pytest==8.4.1"]

test.sh does what TB2's do (fetch uv, then install the test tools from PyPI) and imports them, reward 1:
- fetch uv: `curl` through the proxy from a fake "astral.sh" on loopback (plain HTTP, this venv's uv binary;
  not a cached path: CONNECT and plain downloads outside the archive rules are never cached, as TB2's
  `curl https://astral.sh/uv/...` is not);
- `uv pip install --target` through the proxy's PyPI mirror route (cached against the index's sha256): a
  fake PyPI on loopback serving `--packages` random wheels of `--mib` MiB each, every request delayed
  `--latency-ms`; with `--real-pypi` the real PyPI (the default requirements are TB2's pytest).
The floor: the same import with the packages already in tests/ (installed on the host), no network at all;
and a row with uv shipped in tests/ (the cache's own part: only the install goes through the proxy).
Oracle rollouts on the Docker backend, one at a time; the verifier phase is `result.timings["verifier"]`
(tests/ upload, test.sh, the kill and the reward read). Upstream fetches are counted at the fake.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agentbake.egress import EgressConfig  # noqa: E402
from agentbake.runner import DockerConfig, Runner, RunnerConfig  # noqa: E402
from agentbake.runner.images import resolve_image  # noqa: E402
from agentbake.tasks import load_task  # noqa: E402
from tests.egress.conftest import FakeUpstream, serve_fake  # noqa: E402
from tests.runner.rollouts import reward_if, write_task  # noqa: E402

UV = Path(sys.executable).with_name("uv")


def wheel(name: str, size: int) -> tuple[bytes, str]:
    """A pure-python wheel `name` holding `size` random bytes (incompressible, like real archives)."""
    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 1\n",
        f"{name}/blob.bin": os.urandom(size),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return out.getvalue(), f"{name}-1.0-py3-none-any.whl"


def fake_pypi(fake: FakeUpstream, names: list[str], size: int, floor_site: Path) -> None:
    for name in names:
        data, filename = wheel(name, size)
        path = f"/packages/{name}/{filename}"
        page = {
            "meta": {"api-version": "1.1"},
            "name": name,
            "versions": ["1.0"],
            "files": [
                {"filename": filename, "url": fake.url + path, "hashes": {"sha256": hashlib.sha256(data).hexdigest()}}
            ],
        }
        fake.put(
            f"/simple/{name}/", json.dumps(page).encode(), **{"Content-Type": "application/vnd.pypi.simple.v1+json"}
        )
        fake.put(path, data)
        with zipfile.ZipFile(io.BytesIO(data)) as archive:  # a pure-python wheel installed = unpacked
            archive.extractall(floor_site)


def real_site(requirements: list[str], floor_site: Path) -> None:
    subprocess.run(
        [str(UV), "pip", "install", "--no-cache", "--quiet", "--target", str(floor_site), "--python", sys.executable,
         "--index-url", "https://pypi.org/simple", *requirements],
        check=True,
    )  # fmt: skip


def p50(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=4, help="rollouts per row (the first one is the cold row)")
    parser.add_argument("--packages", type=int, default=6)
    parser.add_argument("--mib", type=float, default=2.0, help="size of each fake wheel")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="delay of each fake upstream answer")
    parser.add_argument("--real-pypi", action="store_true", help="install --requirements from the real PyPI")
    parser.add_argument("--requirements", default="pytest==8.4.1")
    parser.add_argument("--image", default="claude-code")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="egress-bench-"))
    image = resolve_image(args.image)
    names = [f"benchpkg{i}" for i in range(args.packages)]
    with serve_fake(host="127.0.0.2") as fake:
        fake.delay_s = args.latency_ms / 1000
        floor_site = work / "floor-site"
        if args.real_pypi:
            requirements = args.requirements.split()
            imports = [r.split("=")[0].split("[")[0].replace("-", "_") for r in requirements]
            real_site(requirements, floor_site)
            egress = EgressConfig(cache_dir=work / "cache")
            allowed = '["127.0.0.2", "pypi.org", "files.pythonhosted.org"]'
        else:
            requirements = imports = names
            fake_pypi(fake, names, int(args.mib * 1024 * 1024), floor_site)
            egress = EgressConfig(
                cache_dir=work / "cache", ca_file=None, pypi_index=fake.url + "/simple", pypi_files=fake.url
            )
            allowed = '["127.0.0.2"]'
        fake.put("/uv/uv", UV.read_bytes())
        check = reward_if(f"python3 -c 'import {', '.join(imports)}'")
        install = (
            "pip install --no-cache --quiet --python /usr/bin/python3 --target /tmp/site "
            f"{' '.join(requirements)}\nexport PYTHONPATH=/tmp/site\n{check}"
        )
        toml = f"[verifier]\nallowed_hosts = {allowed}\n"
        fetch_uv = f"curl -sSf {fake.url}/uv/uv -o /tmp/uv && chmod +x /tmp/uv\n"
        fetching = write_task(work, "tb2-shaped", solve="true\n", test=f"{fetch_uv}/tmp/uv {install}", toml=toml)
        with_uv = write_task(work, "uv-in-tests", solve="true\n", test=f"/tests/uv {install}", toml=toml)
        shutil.copy(UV, with_uv / "tests" / "uv")
        floor = write_task(work, "pre-installed", solve="true\n", test=f"export PYTHONPATH=/tests/site\n{check}")
        shutil.copytree(floor_site, floor / "tests" / "site")

        rows: dict[str, list[float]] = {"floor": [], "first": [], "later": [], "uv": []}
        fetched: dict[str, list[int]] = {"first": [], "later": [], "uv": []}
        # The runner builds the backend (and closes it) and starts the egress service from its config.
        config = RunnerConfig(image=image, oracle=True, out_dir=work / "out")
        with Runner(config, DockerConfig(cpus=1), egress=egress) as runner:
            for run in range(args.runs):
                later = (with_uv, "uv") if run else (floor, "floor")  # the floor runs one more time instead
                for task, row in ((floor, "floor"), (fetching, "later" if run else "first"), later):
                    before = sum(fake.hits.values())
                    result = runner.run(load_task(task))
                    if result.reward != 1.0:
                        raise SystemExit(f"{task.name}: {result.status} {result.error} {result.notes}")
                    rows[row].append(result.timings["verifier"])
                    if row != "floor":
                        fetched[row].append(sum(fake.hits.values()) - before)
    source = "real PyPI" if args.real_pypi else f"fake PyPI: {args.packages} x {args.mib:g} MiB, {args.latency_ms:g} ms"
    print(f"verifier phase (s), oracle rollouts one at a time, {source}; uv {UV.stat().st_size >> 20} MiB")
    print(f"{'':<44}{'runs':>5}{'p50':>7}{'min':>7}{'x floor':>9}  requests reaching the upstream")
    floor_p50 = statistics.median(rows["floor"])
    for row, label in (
        ("floor", "pre-installed in tests/ (floor)"),
        ("first", "first rollout: fetch uv, install (cold)"),
        ("later", "later rollouts: fetch uv, install (cache)"),
        ("uv", "later, uv in tests/, install (cache)"),
    ):
        values = rows[row]
        counts = f"{statistics.median(fetched[row]):g}" if fetched.get(row) else "-"
        ratio = statistics.median(values) / floor_p50
        print(f"{label:<44}{len(values):>5}{p50(values):>7}{min(values):>7.2f}{ratio:>8.1f}x  {counts}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
