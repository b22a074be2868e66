"""`agentbake doctor`: is this machine ready to build? Each problem comes with its fix."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agentbake.buildkit.ca import detect_ca_bundle
from agentbake.buildkit.catalog import Catalog
from agentbake.buildkit.engine import connect, image_id
from agentbake.errors import AgentbakeError

MIN_FREE_BYTES = 10 * 1024**3


@dataclass(frozen=True)
class Check:
    """One finding: `ok` false means `fix` says what to do."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


def run_checks(catalog: Catalog) -> list[Check]:
    checks: list[Check] = []
    try:
        client = connect(timeout=10)
    except AgentbakeError as exc:
        checks.append(Check("engine", False, str(exc), "on Debian as root: apt-get install docker.io && dockerd &"))
        client = None
    if client is not None:
        info = client.info()
        checks.append(Check("engine", True, f"Docker engine {info.get('ServerVersion')} ({info.get('Driver')})"))
        root = Path(info.get("DockerRootDir", "/var/lib/docker"))
        free = shutil.disk_usage(root if root.exists() else "/").free
        checks.append(
            Check(
                "disk",
                free >= MIN_FREE_BYTES,
                f"{free / 1024**3:.1f} GiB free under {root}",
                "free space (`docker image prune`, `docker builder prune`): a cold build of all images needs ~10 GiB",
            )
        )
        for spec in catalog.load_all():
            present = image_id(client, spec.base.image) is not None
            checks.append(
                Check(
                    f"base {spec.base.image}",
                    present,
                    f"needed by {spec.name}: {'present' if present else 'missing'}",
                    f"docker pull {spec.base.image}, or offline: agentbake base debian --suite {spec.base.suite}",
                )
            )
    checks.append(_buildx())
    bundle = detect_ca_bundle()
    checks.append(
        Check(
            "ca-bundle",
            True,
            f"builds will trust {bundle} (from the environment)"
            if bundle
            else "no extra CA in SSL_CERT_FILE/REQUESTS_CA_BUNDLE/NODE_EXTRA_CA_CERTS; pass --ca-cert behind a proxy",
        )
    )
    return checks


def _buildx() -> Check:
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        return Check("buildx", True, "no docker CLI: builds use the engine API (legacy builder) only")
    found = subprocess.run([docker_cli, "buildx", "version"], capture_output=True, text=True, check=False)
    if found.returncode == 0:
        return Check("buildx", True, found.stdout.strip())
    return Check(
        "buildx",
        True,
        "not installed: agentbake builds with the legacy builder (fine); "
        "install docker-buildx for BuildKit builds of `agentbake render` output",
    )
