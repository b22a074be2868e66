"""The warm pool: started sandboxes handed out by `create`, refilled, gc-labelled, removed on close."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import docker

from agentbake.runner.docker import labels
from agentbake.runner.docker.backend import DockerBackend
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.sandbox import SandboxRequest
from agentbake.serve import serve_in_thread
from tests.runner.docker.test_isolation import echo_app, wait_for_model

RUN = secrets.token_hex(3)  # rollout ids unique per session: other sessions share the engine


def warm_ids(engine: docker.DockerClient, owner: str) -> set[str]:
    found = engine.containers.list(
        filters={"label": [f"{labels.ROLLOUT}={labels.WARM_ROLLOUT}", f"{labels.OWNER}={owner}"]}, ignore_removed=True
    )
    return {c.id for c in found}


def test_create_takes_a_started_sandbox_and_the_pool_refills(
    image: str, tmp_path: Path, engine: docker.DockerClient
) -> None:
    backend = DockerBackend(DockerConfig(warm=2, memory_mb=512, cpus=1, runtime_dir=tmp_path / "sandboxes"))
    owner = labels.this_process()
    request = SandboxRequest(image=image, rollout_id="test-pool", envs={"ROLLOUT_VAR": "one"})
    try:
        backend.warm_up(request)
        waiting = warm_ids(engine, owner)
        assert len(waiting) == 2

        with serve_in_thread(echo_app, uds=tmp_path / "gw.sock") as gateway:
            sandbox = backend.create(
                SandboxRequest(
                    image=image, rollout_id="test-pool", envs={"ROLLOUT_VAR": "one"}, gateway_socket=str(gateway.uds)
                )
            )
            assert sandbox.sandbox_id in waiting
            assert sandbox.exec("echo $ROLLOUT_VAR").stdout == "one\n"  # the request's env, on a pooled container
            wait_for_model(sandbox)
            answer = sandbox.exec(["curl", "-sS", f"{sandbox.model_url}/from-pool"], timeout=30)
            assert json.loads(answer.stdout)["path"] == "/from-pool"

        for _ in range(100):  # the pool refills in the background
            if len(warm_ids(engine, owner) - {sandbox.sandbox_id}) == 2:
                break
            time.sleep(0.1)
        assert len(warm_ids(engine, owner) - {sandbox.sandbox_id}) == 2
        other = backend.create(SandboxRequest(image=image, rollout_id=f"test-pool-2-{RUN}", memory_mb=256))
        # other limits: another pool key, none ready yet, so one is started on demand for this rollout
        assert (
            engine.api.inspect_container(other.sandbox_id)["Config"]["Labels"][labels.ROLLOUT] == f"test-pool-2-{RUN}"
        )

        assert backend.pool.errors == []
    finally:
        backend.close()
    assert warm_ids(engine, owner) == set()
    assert engine.containers.list(all=True, filters={"label": f"{labels.ROLLOUT}=test-pool-2-{RUN}"}) == []
    assert list((tmp_path / "sandboxes").iterdir()) == []
