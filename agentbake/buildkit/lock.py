"""`agentbake lock`: resolve every floating version of an image to exact, hashed artifacts.

images/<name>/lock.json pins the agent CLI and its dependencies, npm when fetched, and the gateway's Python
packages, all with hashes. Builds install exactly that. `inputs` records what it was resolved from, so a changed
spec or dependency makes the lock stale instead of silently ignored.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from agentbake import __version__
from agentbake.buildkit.catalog import builtin_root
from agentbake.buildkit.spec import ImageSpec
from agentbake.errors import LockError

LOCK_SCHEMA = 1
PLATFORM = "x86_64-unknown-linux-gnu"
_REQUIREMENT = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+)")


def gateway_requirements() -> list[str]:
    """The `gateway` extra of agentbake, from the checkout's pyproject.toml, else installed metadata.

    Both are written back one canonical way, so lock inputs agree between a checkout and an installed wheel."""
    pyproject = builtin_root() / "pyproject.toml"
    if pyproject.is_file():
        extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
        requirements = [
            _parse_requirement(text, f"{pyproject}: optional-dependencies.gateway") for text in extras["gateway"]
        ]
        for requirement in requirements:
            if requirement.marker is not None:
                raise LockError(
                    f"{pyproject}: optional-dependencies.gateway entry {str(requirement)!r} has an environment "
                    "marker; the extra is compiled for each image's Python and platform, so list it without one"
                )
    else:
        source = f"installed agentbake {__version__} metadata (Requires-Dist)"
        installed = [_parse_requirement(text, source) for text in metadata.requires("agentbake") or []]
        requirements = [r for r in installed if r.marker is not None and _only_for_gateway(r.marker)]
    return sorted(_canonical(requirement) for requirement in requirements)


def _parse_requirement(text: str, where: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        raise LockError(f"{where}: {text!r} is not a valid requirement ({exc})") from None


def _only_for_gateway(marker: Any) -> bool:
    """True for a Requires-Dist marker that holds with the `gateway` extra and not without any extra."""
    return bool(marker.evaluate({"extra": "gateway"})) and not marker.evaluate({"extra": ""})


def _canonical(requirement: Requirement) -> str:
    """`name[extras]specifier`, the name normalised (PEP 503), extras sorted; the extra's marker dropped."""
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return f"{canonicalize_name(requirement.name)}{extras}{requirement.specifier}"


def lock_inputs(spec: ImageSpec) -> dict[str, Any]:
    """Everything a lock is resolved from; a lock whose `inputs` differ is stale."""
    agent = spec.agent
    inputs: dict[str, Any] = {
        "agent": {"package": agent.package, "version": agent.version, "install": agent.install},
        "python": {"version": spec.base.python, "platform": PLATFORM, "requirements": gateway_requirements()},
    }
    if agent.install == "native":
        inputs["agent"]["native_package"] = agent.native_package
    elif agent.install == "npm":
        inputs["agent"]["npm"] = agent.npm
    elif agent.exclude:
        inputs["agent"]["exclude"] = sorted(agent.exclude)
    return inputs


def read_lock(spec: ImageSpec) -> dict[str, Any]:
    """The spec's lock, checked for staleness; errors say to run `agentbake lock`."""
    path = spec.lock_path
    fix = _lock_fix(spec)
    try:
        lock = json.loads(path.read_text())
    except FileNotFoundError:
        raise LockError(f"{path}: no lock for image {spec.name!r}; {fix}") from None
    except json.JSONDecodeError as exc:
        raise LockError(f"{path}: not valid JSON ({exc}); {fix}") from None
    if not isinstance(lock, dict) or lock.get("schema_version") != LOCK_SCHEMA:
        raise LockError(f"{path}: lock schema is not {LOCK_SCHEMA}; {fix}")
    current = lock_inputs(spec)
    if lock.get("inputs") != current:
        changed = _first_difference(lock.get("inputs"), current)
        raise LockError(f"{path}: stale lock, {changed} changed since it was written; {fix}")
    return lock


def _lock_fix(spec: ImageSpec) -> str:
    """How to make a missing or stale lock current: lock and commit it, or, for the catalog an installed agentbake
    ships, make a catalog of one's own."""
    root = builtin_root()
    if (root / "pyproject.toml").is_file() or not spec.source_dir.is_relative_to(root):
        return f"run `agentbake lock {spec.name}` and commit {spec.lock_path.name}"
    return (
        f"the lock shipped with agentbake {__version__} does not match this installation (please report it); "
        f"reinstall agentbake, or lock the image yourself: in a folder of your own, write "
        f'images/{spec.name}/image.toml containing `extends = "{spec.name}"`, then run '
        f"`pip install uv && agentbake lock {spec.name}` there (npm must be on PATH) and use agentbake from that folder"
    )


def _first_difference(old: Any, new: Any, key: str = "inputs") -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new)):
            if old.get(k) != new.get(k):
                return _first_difference(old.get(k), new.get(k), f"{key}.{k}")
    return f"{key} ({old!r} -> {new!r})"


def write_lock(spec: ImageSpec) -> dict[str, Any]:
    """Resolve and write the spec's lock.json (sorted keys, stable bytes); returns it."""
    lock = resolve(spec)
    spec.lock_path.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    return lock


def resolve(spec: ImageSpec) -> dict[str, Any]:
    agent = spec.agent
    lock: dict[str, Any] = {"schema_version": LOCK_SCHEMA, "image": spec.name, "inputs": lock_inputs(spec)}
    if agent.install == "native":
        version = _max_version(_npm_view(f"{agent.package}@{agent.version}", "version"))
        optional = _npm_view(f"{agent.package}@{version}", "optionalDependencies") or {}
        if agent.native_package not in optional:
            raise LockError(
                f"{spec.source_dir / 'image.toml'}: agent.native_package {agent.native_package!r} is not an "
                f"optional dependency of {agent.package}@{version}; pick one of: {', '.join(sorted(optional))}"
            )
        lock["agent"] = {"package": agent.package, "version": version}
        lock["native"] = _artifact(*_aliased(agent.native_package, optional[agent.native_package]))
    elif agent.install == "pip":
        requirement = agent.package + (f"=={agent.version}" if agent.version[:1].isdigit() else agent.version)
        lock["agent_python"] = _python_requirements(
            spec.base.python, [requirement], f"{agent.package} wheels", exclude=agent.exclude
        )
        name = canonicalize_name(agent.package)
        version = next(p["version"] for p in lock["agent_python"]["packages"] if canonicalize_name(p["name"]) == name)
        lock["agent"] = {"package": agent.package, "version": version}
    else:
        lock["npm"] = _artifact("npm", _max_version(_npm_view(f"npm@{agent.npm}", "version")))
        lockfile = _npm_lockfile(agent.package, agent.version)
        version = lockfile["packages"][f"node_modules/{agent.package}"]["version"]
        lock["agent"] = {"package": agent.package, "version": version}
        lock["npm_lockfile"] = lockfile
    lock["python"] = _python_requirements(spec.base.python, gateway_requirements(), "gateway dependencies")
    return lock


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise LockError("`agentbake lock` needs npm on PATH to query the npm registry; install Node.js and npm")
    return npm


def _run(cmd: list[str], what: str, **kwargs: Any) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise LockError(f"{what} failed (exit {result.returncode}): " + " | ".join(detail))
    return result.stdout


def _npm_view(spec: str, field: str) -> Any:
    out = _run([_npm(), "view", spec, field, "--json"], f"npm view {spec} {field}")
    if not out.strip():
        raise LockError(f"npm view {spec}: no version matches; check the version in image.toml")
    return json.loads(out)


def _version_key(version: str) -> tuple[Any, ...]:
    core, _, pre = version.partition("-")
    return (*(int(p) for p in core.split(".")), pre == "", pre)


def _max_version(found: str | list[str]) -> str:
    return max(found, key=_version_key) if isinstance(found, list) else found


def _aliased(name: str, version: str) -> tuple[str, str]:
    """The (package, version) an optional dependency resolves to: an npm alias names another package."""
    if not version.startswith("npm:"):
        return name, version
    package, _, aliased = version.removeprefix("npm:").rpartition("@")
    return package, aliased


def _artifact(package: str, version: str) -> dict[str, str]:
    dist = _npm_view(f"{package}@{version}", "dist")
    integrity = dist["integrity"]
    if not integrity.startswith("sha512-"):
        raise LockError(f"{package}@{version}: registry gave no sha512 integrity ({integrity!r})")
    sha512 = base64.b64decode(integrity.removeprefix("sha512-")).hex()
    return {
        "package": package,
        "version": version,
        "tarball": dist["tarball"],
        "integrity": integrity,
        "sha512": sha512,
    }


def _npm_lockfile(package: str, version: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentbake-lock-") as tmp:
        Path(tmp, "package.json").write_text(
            json.dumps({"name": "agentbake-agent", "private": True, "dependencies": {package: version}})
        )
        _run(
            [_npm(), "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund"],
            f"npm install --package-lock-only {package}@{version}",
            cwd=tmp,
        )
        lockfile = json.loads(Path(tmp, "package-lock.json").read_text())
    # Pin the exact resolved version in the root too, so `npm ci` sees package.json and lock agree.
    resolved = lockfile["packages"][f"node_modules/{package}"]["version"]
    lockfile["packages"][""]["dependencies"] = {package: resolved}
    return lockfile


def _python_requirements(
    python: str, requirements: list[str], what: str, *, exclude: list[str] | None = None
) -> dict[str, Any]:
    """`requirements` and their dependencies (but `exclude`), compiled to exact versions with each wheel's sha256 for
    the image's python and platform."""
    try:
        from uv import find_uv_bin
    except ImportError:
        raise LockError(
            "locking Python dependencies needs uv: pip install 'agentbake[dev]' (or pip install uv)"
        ) from None
    cmd = [
        find_uv_bin(),
        "pip",
        "compile",
        "-",
        "--generate-hashes",
        "--python-version",
        python,
        "--python-platform",
        PLATFORM,
        "--only-binary",
        ":all:",
        "--no-header",
        "--no-annotate",
    ]
    # Native TLS: uv then trusts the system's CA store, as pip and npm do (proxies, corporate CAs).
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NATIVE_TLS": "1"}
    with tempfile.TemporaryDirectory(prefix="agentbake-lock-") as tmp:
        if exclude:
            # An override whose marker never holds drops the distribution from the resolution.
            overrides = Path(tmp, "overrides.txt")
            overrides.write_text("".join(f'{name} ; python_version < "0"\n' for name in exclude))
            cmd += ["--overrides", str(overrides)]
        out = _run(cmd, f"uv pip compile ({what})", input="\n".join(requirements), env=env)
    packages: list[dict[str, Any]] = []
    for line in out.replace("\\\n", " ").splitlines():
        match = _REQUIREMENT.match(line.strip())
        if match:
            hashes = sorted(re.findall(r"--hash=(sha256:[0-9a-f]{64})", line))
            packages.append({"name": match[1], "version": match[2], "hashes": hashes})
    return {"version": python, "packages": packages}


def requirements_txt(locked: dict[str, Any]) -> str:
    """pip's --require-hashes file for locked Python packages (the lock's `python` or `agent_python`)."""
    lines = []
    for pkg in locked["packages"]:
        hashes = " ".join(f"--hash={h}" for h in pkg["hashes"])
        lines.append(f"{pkg['name']}=={pkg['version']} {hashes}")
    return "\n".join(lines) + "\n"
