"""Local stand-ins for the Docker Hub bases Terminal-Bench 2.0's Dockerfiles start FROM.

    .venv/bin/python bench/tb2/standins.py                          # every stand-in this recipe knows
    .venv/bin/python bench/tb2/standins.py --tasks-dir TB2/          # only the bases those tasks name
    .venv/bin/python bench/tb2/standins.py ubuntu:24.04 --force      # rebuild one

No registry answers on this machine, so `python:3.13-slim-bookworm`, `ubuntu:24.04`, ... cannot be pulled.
The engine's legacy builder uses a local image of the same name as it is, so each is built here from the
local Debian bases (`agentbake base debian`) under the exact name, and the task folders stay unchanged:
- `python:3.13*` from trixie (CPython 3.13), `python:3.11*` from bookworm (3.11): Debian's python3, pip
  reinstalled by pip into /usr/local (so a Dockerfile's `pip install --upgrade pip` can replace it, as in
  the real image) and no EXTERNALLY-MANAGED marker (the real images have none);
- `ubuntu:24.04` from trixie with Ubuntu's uid-1000 `ubuntu` user; `debian:13.0-slim` is trixie;
- in every one, `uv`/`uvx` on PATH (TB2's test.sh fetches uv from astral.sh, unreachable here, and carries
  on to `uvx -p 3.13`, which then finds the system 3.13: ubuntu and debian get a python3 for it although
  the real images have none), the host's CA bundle trusted (`--ca-cert`, else SSL_CERT_FILE & co., as
  `agentbake build` finds it) with UV_NATIVE_TLS=1, SSL_CERT_FILE, REQUESTS_CA_BUNDLE and PIP_CERT set.
An existing tag is left alone unless --force; one that is not a stand-in (e.g. the real image, pulled) is
never replaced. Prints a table: name, base, status, seconds, image id, how the stand-in differs.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tarfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import docker

from agentbake.buildkit.builders import Progress, run_build
from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.buildkit.engine import connect, image_id
from agentbake.buildkit.render import APT_CA_CONF
from agentbake.errors import BuildError
from agentbake.tasks.image import DOCKERFILE, base_images

RECIPE_LABEL = "dev.agentbake.standin.recipe"
"""On every stand-in: the hash of the recipe (Dockerfile, CA bundle, base image id) it was built from."""
UV_VERSION = "0.9.5"  # the version TB2's test.sh installs
PIP_VERSION = "25.2"
BUILD_TIMEOUT_S = 900.0
CA_FILE = "extra-ca.crt"
APT_CONF_FILE = "apt.conf"
CA_ENV = (
    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
    "REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
    "PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
    "NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt",
    "UV_NATIVE_TLS=1",
)
PY311_PIP = ("setuptools==79.0.1", "wheel==0.45.1")
PYTHON_PACKAGES = ("python3", "python3-dev", "python3-pip", "python3-venv", "python-is-python3")


@dataclass(frozen=True)
class StandIn:
    """One Docker Hub image this recipe builds locally under the same name."""

    name: str
    """The reference TB2's Dockerfiles start FROM, e.g. `python:3.13-slim-bookworm`."""
    base: str
    """The local Debian image it is built from."""
    kind: str
    """`python` (the official python images), `ubuntu` or `debian`."""
    differs: str
    """How it differs from the real image in ways a task can notice."""
    pip_packages: tuple[str, ...] = ()
    """Installed by pip beside pip and uv, as the real image has them (the python:3.11 images: setuptools, wheel)."""


STANDINS = (
    StandIn("python:3.13-slim-bookworm", "debian:trixie-slim", "python", "trixie userland (gcc 14, OpenSSL 3.5)"),
    StandIn("python:3.13-slim", "debian:trixie-slim", "python", "Debian's CPython in /usr/bin"),
    StandIn("python:3.13-slim-trixie", "debian:trixie-slim", "python", "Debian's CPython in /usr/bin"),
    StandIn(
        "python:3.11-slim", "debian:bookworm-slim", "python", "bookworm userland; no python3.13 for uvx", PY311_PIP
    ),
    StandIn("python:3.11-slim-bookworm", "debian:bookworm-slim", "python", "no python3.13 for uvx", PY311_PIP),
    StandIn("ubuntu:24.04", "debian:trixie-slim", "ubuntu", "Debian trixie packages; python3 + uv added"),
    StandIn("debian:13.0-slim", "debian:trixie-slim", "debian", "python3 + uv added"),
)
UNSUPPORTED = {
    "python:3.10-slim-bookworm": "no Debian suite here ships CPython 3.10",
    "python:3.12-slim-bookworm": "no Debian suite here ships CPython 3.12",
}


@dataclass
class Row:
    """One line of the table."""

    name: str
    base: str
    status: str
    """built, present, stale (present, recipe changed: --force rebuilds), foreign (not a stand-in, left
    alone), failed, unsupported, no-base."""
    seconds: float
    image: str
    tasks: int
    """How many tasks of --tasks-dir start FROM it (0 without --tasks-dir)."""
    note: str


def dockerfile(standin: StandIn, *, with_ca: bool) -> str:
    """The stand-in's Dockerfile: the CA first (apt trusts it at once), then the packages, then pip and uv."""
    lines = [f"FROM {standin.base}"]
    if with_ca:
        lines += [
            f"COPY {CA_FILE} /usr/local/share/ca-certificates/agentbake-extra.crt",
            f"COPY {APT_CONF_FILE} /etc/apt/apt.conf.d/99agentbake-extra-ca",
        ]
    lines.append("ENV LANG=C.UTF-8 " + " ".join(CA_ENV))
    packages = ("ca-certificates", *PYTHON_PACKAGES) if standin.kind == "python" else ("ca-certificates", "python3")
    if standin.kind != "python":
        packages += ("python3-pip",)
    lines.append(
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        + " ".join(packages)
        + " && update-ca-certificates && rm -rf /var/lib/apt/lists/*"
    )
    if standin.kind == "python":
        # Debian's pip, wheel and setuptools have no RECORD, so a Dockerfile's `pip install --upgrade wheel`
        # could not replace them: pip installs its own into /usr/local, then Debian's go.
        wanted = " ".join((f"pip=={PIP_VERSION}", f"uv=={UV_VERSION}", *standin.pip_packages))
        lines.append(
            "RUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED && python3 -m pip install --no-cache-dir "
            f"--ignore-installed {wanted} && apt-get purge -y python3-pip && apt-get autoremove -y "
            "&& pip --version && uvx --version"
        )
        lines.append('CMD ["python3"]')
    else:
        lines.append(
            f"RUN python3 -m pip install --no-cache-dir --break-system-packages uv=={UV_VERSION} "
            "&& apt-get purge -y python3-pip && apt-get autoremove -y && uvx --version"
        )
        if standin.kind == "ubuntu":
            lines.append("RUN groupadd -g 1000 ubuntu && useradd -m -u 1000 -g 1000 -s /bin/bash ubuntu")
        lines.append('CMD ["/bin/bash"]')
    return "\n".join(lines) + "\n"


def recipe_hash(text: str, ca: bytes | None, base_id: str) -> str:
    """What a stand-in is built from, hashed: a changed Dockerfile, CA bundle or base image changes it."""
    digest = hashlib.sha256()
    for part in (text.encode(), ca or b"", base_id.encode()):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()[:16]


def context_tar(text: str, ca: bytes | None) -> bytes:
    """The build context: the Dockerfile and, with a CA, the bundle and apt's CAInfo line."""
    files = {DOCKERFILE: text.encode()}
    if ca is not None:
        files |= {CA_FILE: ca, APT_CONF_FILE: APT_CA_CONF}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class _StepPrinter(Progress):
    """Build steps to stderr, so a long apt or pip step shows it is alive."""

    def __init__(self, name: str) -> None:
        self.name = name

    def step(self, index: int, total: int, instruction: str) -> None:
        print(f"  {self.name}: step {index}/{total} {instruction[:100]}", file=sys.stderr, flush=True)


def ensure(client: docker.DockerClient, standin: StandIn, ca: bytes | None, *, force: bool, tasks: int) -> Row:
    """Build one stand-in unless its tag exists (a foreign tag is never replaced)."""
    started = time.monotonic()
    base_id = image_id(client, standin.base)
    if base_id is None:
        suite = standin.base.split(":")[1].split("-")[0]
        note = f"{standin.base} is not on this engine: `agentbake base debian --suite {suite}`"
        return Row(standin.name, standin.base, "no-base", 0.0, "", tasks, note)
    text = dockerfile(standin, with_ca=ca is not None)
    recipe = recipe_hash(text, ca, base_id)
    found = image_id(client, standin.name)
    if found is not None:
        labels = client.images.get(found).labels or {}
        if RECIPE_LABEL not in labels:
            return Row(standin.name, standin.base, "foreign", 0.0, found[7:19], tasks, "not a stand-in: left alone")
        if not force:
            status = "present" if labels[RECIPE_LABEL] == recipe else "stale"
            note = standin.differs if status == "present" else "recipe, CA or base changed: --force rebuilds"
            return Row(standin.name, standin.base, status, 0.0, found[7:19], tasks, note)
    try:
        built = run_build(
            client,
            context_tar(text, ca),
            standin.name,
            labels={RECIPE_LABEL: recipe},
            progress=_StepPrinter(standin.name),
            timeout_s=BUILD_TIMEOUT_S,
        )
    except BuildError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "build failed"
        return Row(standin.name, standin.base, "failed", round(time.monotonic() - started, 1), "", tasks, first)
    seconds = round(time.monotonic() - started, 1)
    return Row(standin.name, standin.base, "built", seconds, built[7:19], tasks, standin.differs)


def task_bases(tasks_dir: Path) -> Counter[str]:
    """How many tasks under tasks_dir name each image in their environment/Dockerfile's FROM lines."""
    counts: Counter[str] = Counter()
    for path in sorted(tasks_dir.glob(f"*/environment/{DOCKERFILE}")):
        counts.update(base_images(path.read_text(encoding="utf-8", errors="replace")))
    return counts


def read_ca(path: Path | None) -> bytes | None:
    """The CA bundle's bytes, checked to hold a PEM certificate."""
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SystemExit(f"--ca-cert {path}: cannot read it ({exc.strerror}); pass a PEM CA bundle") from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise SystemExit(f"--ca-cert {path}: no PEM certificate in it; pass a PEM file (-----BEGIN CERTIFICATE-----)")
    return data


def print_table(rows: list[Row], ca: Path | None) -> None:
    print(f"stand-in bases (CA bundle: {ca or 'none'})")
    header = ("image", "from", "status", "s", "id", "tasks", "note")
    cells = [header, *((r.name, r.base, r.status, f"{r.seconds:g}", r.image, str(r.tasks), r.note) for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="stand-ins to build (default: all, or those --tasks-dir needs)")
    parser.add_argument("--tasks-dir", type=Path, help="only the bases these tasks' Dockerfiles start FROM")
    parser.add_argument("--force", action="store_true", help="rebuild stand-ins whose tag exists")
    parser.add_argument("--ca-cert", type=Path, help="PEM CA bundle to trust (default: as `agentbake build`)")
    parser.add_argument("--no-ca-cert", action="store_true", help="trust no extra CA")
    parser.add_argument("--json", action="store_true", help="one JSON object per stand-in instead of the table")
    args = parser.parse_args()
    if args.ca_cert and args.no_ca_cert:
        parser.error("--ca-cert and --no-ca-cert exclude each other")
    ca_path = None if args.no_ca_cert else (args.ca_cert or detect_ca_bundle())
    ca = read_ca(ca_path)
    by_name = {s.name: s for s in STANDINS}
    counts = task_bases(args.tasks_dir) if args.tasks_dir else Counter()
    if args.tasks_dir and not counts:
        parser.error(f"--tasks-dir {args.tasks_dir}: no */environment/Dockerfile under it")
    wanted = args.names or (sorted(counts) if args.tasks_dir else list(by_name))
    client = connect()
    rows = []
    for name in wanted:
        if name in by_name:
            rows.append(ensure(client, by_name[name], ca, force=args.force, tasks=counts[name]))
            continue
        present = image_id(client, name)
        note = UNSUPPORTED.get(name, "no stand-in recipe for it")
        status = "present" if present else "unsupported"
        rows.append(Row(name, "", status, 0.0, present[7:19] if present else "", counts[name], note))
    if args.json:
        for row in rows:
            print(json.dumps(asdict(row)))
    else:
        print_table(rows, ca_path)
    if any(row.status in ("failed", "no-base") for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
