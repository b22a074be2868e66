"""The verifier's own sandbox B on Docker, made from the agent's sandbox A once the agent is stopped.

- `snapshot`: `docker commit` of A, started with A's network namespace (services answer on 127.0.0.1) but its
  own pid and mount namespaces.
- `fresh`: a new container of the task's image; `copy_into` hands it the artifacts as data (files, directories
  and links only, within a `CopyBudget`).

B's hardening and limits are read back from A, so the two cannot drift. B carries the rollout's labels: its `kill`
and `agentbake gc` remove it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import io
import json
import posixpath
import secrets
import tarfile
import tempfile
from typing import TYPE_CHECKING

import docker.errors
import requests.exceptions

from agentbake.errors import SandboxError
from agentbake.runner.docker import labels
from agentbake.runner.docker.engine import ImageInfo, Limits, slug
from agentbake.runner.docker.sandbox import DockerSandbox
from agentbake.runner.sandbox.copyout import ArchiveTooLarge, ChunkReader, CopyBudget
from agentbake.tasks.bundle import BUNDLE_MOUNT

if TYPE_CHECKING:
    from agentbake.runner.docker.backend import DockerBackend

SNAPSHOT_REPOSITORY = "agentbake-snapshot"
"""Where the snapshots of agents' sandboxes are committed (`<repository>:<rollout>-<random>`)."""
_CHUNK = 1024 * 1024
_ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


def snapshot(backend: DockerBackend, agent: DockerSandbox) -> DockerSandbox:
    """B from a commit of `agent` (paused while it is taken), sharing its network namespace only."""
    api = backend.engine.api
    tag = f"{slug(agent.rollout_id).lower()}-{secrets.token_hex(4)}"
    own = labels.sandbox_labels(agent.rollout_id, backend.config.ttl_s, backend.config.runtime_dir / "none")
    try:
        image_id = api.commit(
            agent.sandbox_id, repository=SNAPSHOT_REPOSITORY, tag=tag, pause=True, changes=_label_changes(own)
        )["Id"]
    except _ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot snapshot sandbox {agent.name} for its verifier: {exc}") from None
    image = dataclasses.replace(agent.image, ref=f"{SNAPSHOT_REPOSITORY}:{tag}", id=image_id)
    try:
        verifier = _start(backend, agent, image, f"container:{agent.sandbox_id}", None, image_id)
    except BaseException:
        _remove_image(backend, image_id)
        raise
    verifier.network_of = agent  # the namespace's owner is the one a network is connected to
    return verifier


def fresh(backend: DockerBackend, agent: DockerSandbox, image: ImageInfo, limits: Limits | None) -> DockerSandbox:
    """B from `image` (the task's, or the verifier's own: with the agent bundle `image.bundle`), no link to
    `agent`: network-less, or on the verifier's network (disconnected until `connect_network`) when A was made
    for one. `limits` over A's (the verifier environment's resources)."""
    return _start(backend, agent, image, agent.network or "none", limits, None)


def _start(
    backend: DockerBackend,
    agent: DockerSandbox,
    image: ImageInfo,
    network_mode: str,
    limits: Limits | None,
    snapshot_id: str | None,
) -> DockerSandbox:
    api = backend.engine.api
    name = f"agentbake-{slug(agent.rollout_id)}-verifier-{secrets.token_hex(4)}"
    try:
        host = api.inspect_container(agent.sandbox_id)["HostConfig"]
        binds = [b for b in host.get("Binds") or [] if b.split(":")[1:2] == [BUNDLE_MOUNT]]
        if image.bundle is not None and not binds:
            binds = [f"{image.bundle}:{BUNDLE_MOUNT}:ro"]
        memory = f"{limits.memory_mb}m" if limits else host["Memory"]
        host_config = api.create_host_config(
            init=True,
            network_mode=network_mode,
            cap_drop=host.get("CapDrop") or ["ALL"],
            cap_add=host.get("CapAdd") or [],
            security_opt=host.get("SecurityOpt") or ["no-new-privileges"],
            privileged=False,
            pids_limit=host["PidsLimit"],
            mem_limit=memory,
            memswap_limit=memory,
            nano_cpus=limits.nano_cpus if limits else host["NanoCpus"],
            binds=binds,
        )
        container = api.create_container(
            image.id,
            command=["sleep", "infinity"],
            user="root",
            name=name,
            labels=labels.sandbox_labels(agent.rollout_id, backend.config.ttl_s, backend.config.runtime_dir / name),
            host_config=host_config,
        )
        if network_mode not in ("none",) and not network_mode.startswith("container:"):
            api.disconnect_container_from_network(container["Id"], network_mode)
        api.start(container["Id"])
    except _ENGINE_ERRORS as exc:
        backend.engine.discard(name)
        raise SandboxError(f"cannot start the verifier's sandbox from {image.ref!r}: {exc}") from None
    except BaseException:
        backend.engine.discard(name)
        raise

    def remove(sandbox: DockerSandbox) -> None:
        try:
            backend.remove(sandbox)
        finally:
            if snapshot_id is not None:
                _remove_image(backend, snapshot_id)

    verifier = DockerSandbox(
        backend.engine, container["Id"], name, image, agent.user, agent._envs, None, agent.rollout_id, remove
    )
    verifier.storage_limit_mb = agent.storage_limit_mb
    if network_mode == agent.network:
        verifier.network = agent.network
    backend.adopt(verifier)
    return verifier


def copy_into(
    source: DockerSandbox, target: DockerSandbox, path: str, exclude: tuple[str, ...], budget: CopyBudget
) -> bool:
    """`path` of `source` replaces `path` in `target` (its owners and modes as they were; what is neither a
    regular file, a directory nor a link is left out, with a note in `budget`). False when `source` has nothing
    there. SandboxError when it passes the budget (the verifier would judge part of it) or cannot be copied."""
    api = source._engine.api
    try:
        chunks, _stat = api.get_archive(source.sandbox_id, path, chunk_size=_CHUNK)
    except docker.errors.NotFound:
        return False
    except _ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot read {path} from sandbox {source.name}: {exc}") from None
    with tempfile.TemporaryFile() as spool:
        try:
            _repack(io.BufferedReader(ChunkReader(chunks, budget), buffer_size=_CHUNK), spool, path, exclude, budget)
        except ArchiveTooLarge:
            raise SandboxError(
                f"{path} holds more than the verifier's sandbox may receive (the hand-over's caps: "
                f"{budget.files} files and {budget.bytes} bytes left)"
            ) from None
        except (tarfile.TarError, *_ENGINE_ERRORS) as exc:
            raise SandboxError(f"cannot read {path} from sandbox {source.name}: {exc}") from None
        finally:
            chunks.close()
        parent = posixpath.dirname(path)
        cleared = target.exec(
            ["sh", "-c", 'rm -rf -- "$1" && mkdir -p -- "$2"', "sh", path, parent], user="root", timeout=120
        )
        if cleared.exit_code != 0:
            raise SandboxError(f"cannot make way for {path} in sandbox {target.name}: {cleared.stderr.strip()[:200]}")
        spool.seek(0)
        try:
            target._engine.api.put_archive(target.sandbox_id, parent, spool)
        except _ENGINE_ERRORS as exc:
            raise SandboxError(f"cannot copy {path} into sandbox {target.name}: {exc}") from None
    return True


def _repack(stream: io.BufferedReader, spool: object, path: str, exclude: tuple[str, ...], budget: CopyBudget) -> None:
    """The archive `stream` of `path` into `spool`, member by member, within `budget`."""
    root: str | None = None
    with tarfile.open(fileobj=stream, mode="r|") as tar, tarfile.open(fileobj=spool, mode="w|") as out:
        for member in tar:
            root = member.name.rstrip("/") if root is None else root
            inner = posixpath.relpath(member.name, root) if member.name != root else ""
            if inner.startswith("..") or posixpath.isabs(member.name):
                budget.skip(f"{path}: entry {member.name[:200]!r} has a name outside it, left out")
                continue
            if inner and any(
                fnmatch.fnmatch(inner, p) or fnmatch.fnmatch(posixpath.basename(inner), p) for p in exclude
            ):
                continue
            if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
                budget.skip(f"{path}/{inner}: not a file, folder or link, left out of the verifier's copy")
                continue
            budget.files -= 1
            budget.bytes -= member.size if member.isreg() else 0
            if budget.files < 0 or budget.bytes < 0:
                raise ArchiveTooLarge
            out.addfile(member, tar.extractfile(member) if member.isreg() else None)


def _label_changes(own: dict[str, str]) -> list[str]:
    return [f"LABEL {key}={json.dumps(value)}" for key, value in own.items()]


def _remove_image(backend: DockerBackend, image_id: str) -> None:
    with contextlib.suppress(*_ENGINE_ERRORS):
        backend.engine.api.remove_image(image_id, force=True, noprune=False)
