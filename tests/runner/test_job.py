"""Job directories: the layout, what a resume refuses, and `agentbake rollout --resume` continuing a batch
interrupted by SIGTERM with real oracle rollouts on the engine (finished rollouts are not run again)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
from click.testing import CliRunner

from agentbake.buildkit.catalog import builtin_root
from agentbake.cli import main
from agentbake.errors import JobError
from agentbake.report.render import REPORT_FILE
from agentbake.runner.docker import labels
from agentbake.runner.docker.config import DockerConfig
from agentbake.runner.job import CONFIG_FILE, SUMMARY_FILE, Job, JobBackend, JobConfig, JobTask
from agentbake.runner.remote.e2b_config import E2BConfig
from agentbake.runner.remote.relay_config import RelayConfig
from agentbake.runner.result import RESULT_FILE, RolloutResult, Status
from agentbake.runner.runner_config import RunnerConfig
from agentbake.tasks import discover_tasks
from tests.runner.cli.test_commands import AGENTBAKE, agentbake
from tests.runner.rollouts import leftovers, reward_if, write_task


def _tasks(root: Path) -> Path:
    for name in ("alpha", "beta"):
        write_task(root, name, solve=f"echo {name} > out.txt\n", test=reward_if("grep -q . out.txt"))
    return root


def _config(job_dir: Path, tasks_root: Path, **changes: object) -> JobConfig:
    runner = RunnerConfig(image="agentbake/claude-code:000000000000", oracle=True, out_dir=job_dir)
    fields: dict = {
        "runner": runner,
        "backend": JobBackend(config=DockerConfig()),
        "tasks": tuple(JobTask.of(task) for task in discover_tasks([tasks_root])),
        "n_attempts": 2,
        "n_concurrent": 2,
    }
    return JobConfig(**{**fields, **changes})


def test_the_layout_is_config_one_folder_per_task_and_attempt_and_a_summary(tmp_path: Path) -> None:
    tasks_root = _tasks(tmp_path / "tasks")
    job = Job.start(tmp_path / "job", _config(tmp_path / "job", tasks_root))
    assert [(name, attempt, folder.name) for name, attempt, folder in job.rollouts()] == [
        ("alpha", 0, "alpha__0"),
        ("beta", 0, "beta__0"),
        ("alpha", 1, "alpha__1"),
        ("beta", 1, "beta__1"),
    ]
    assert Job.open(job.dir).config == job.config
    written = (job.dir / CONFIG_FILE).read_text()
    assert json.loads(written)["runner"]["agent_user"] is None
    assert written == json.dumps(json.loads(written), indent=2, sort_keys=True) + "\n"  # stable bytes

    finished = job.dir / "beta__1"
    finished.mkdir()
    RolloutResult("beta-1", "beta", Status.OK, 1.0, "img", "oracle", out_dir=finished).write()
    unfinished = job.dir / "alpha__0"
    (unfinished / "agent").mkdir(parents=True)  # what a rollout cut short leaves
    pending = job.pending(discover_tasks([tasks_root]))
    assert [(task.name, folder.name) for task, folder in pending] == [
        ("alpha", "alpha__0"),
        ("beta", "beta__0"),
        ("alpha", "alpha__1"),
    ]
    assert not unfinished.exists()
    summary = job.write_summary()
    assert json.loads((job.dir / SUMMARY_FILE).read_text()) == summary
    assert (summary["complete"], summary["finished"], summary["total"]) == (False, 1, 4)
    assert summary["rollouts"] == [
        {"task": "beta", "attempt": 1, "folder": "beta__1", "rollout_id": "beta-1", "status": "ok", "reward": 1.0}
    ]


def test_a_rollout_lost_with_its_node_is_pending_again(tmp_path: Path) -> None:
    tasks_root = _tasks(tmp_path / "tasks")
    job = Job.start(tmp_path / "job", _config(tmp_path / "job", tasks_root, n_attempts=1))
    for name, status in (("alpha", Status.OK), ("beta", Status.NODE_LOST)):
        folder = job.dir / f"{name}__0"
        folder.mkdir()
        RolloutResult(name, name, status, 0.0, "img", "oracle", node="w1", out_dir=folder).write()
    summary = job.write_summary()
    assert (summary["complete"], summary["finished"], summary["total"]) == (False, 1, 2)
    assert [r["status"] for r in summary["rollouts"]] == ["ok", "node_lost"]  # listed, not counted finished
    assert [folder.name for _, folder in job.pending(discover_tasks([tasks_root]))] == ["beta__0"]
    assert not (job.dir / "beta__0").exists() and RolloutResult.read(job.dir / "alpha__0").node == "w1"


def test_a_job_needs_a_folder_of_its_own(tmp_path: Path) -> None:
    tasks_root = _tasks(tmp_path / "tasks")
    Job.start(tmp_path / "job", _config(tmp_path / "job", tasks_root))
    with pytest.raises(JobError, match=r"job: holds a job already; `--resume .*job` continues it"):
        Job.start(tmp_path / "job", _config(tmp_path / "job", tasks_root))
    with pytest.raises(JobError, match=r"tasks: not an empty folder; a job writes into a folder of its own"):
        Job.start(tasks_root, _config(tasks_root, tasks_root))


def test_a_resume_with_other_settings_is_refused_naming_each(tmp_path: Path) -> None:
    tasks_root = _tasks(tmp_path / "tasks")
    job = Job.start(tmp_path / "job", _config(tmp_path / "job", tasks_root))
    # How fast and from where it runs may change.
    runtime = job.config.runner.model_copy(update={"out_dir": tmp_path / "moved"})
    warm = JobBackend(config=DockerConfig(warm=3, runtime_dir=tmp_path / "elsewhere"))  # another machine's temp dir
    job.check(_config(tmp_path / "job", tasks_root, n_concurrent=8, runner=runtime, backend=warm))

    (tasks_root / "beta" / "instruction.md").write_text("Another prompt.\n")
    write_task(tasks_root, "gamma", solve="true\n", test="true\n")
    runner = job.config.runner.model_copy(update={"oracle": False, "model": "scripted", "agent_user": "root"})
    with pytest.raises(JobError) as info:
        job.check(_config(tmp_path / "job", tasks_root, n_attempts=3, runner=runner))
    message = str(info.value)
    assert message.startswith(f"{job.dir / CONFIG_FILE}: the job was started with other settings (")
    assert "n_attempts: 2 -> 3" in message
    assert "runner.agent_user: (none) -> 'root'" in message
    assert "runner.model: (none) -> 'scripted'; runner.oracle: True -> False" in message
    assert "tasks: ['alpha', 'beta'] -> ['alpha', 'beta', 'gamma']" in message
    assert "tasks.beta.digest: '" in message and "tasks.gamma" not in message
    assert f"`agentbake rollout --resume {job.dir}` alone takes them from config.json" in message
    with pytest.raises(JobError, match=r"beta: changed since the job .* started"):
        job.load_tasks()


def test_the_backend_is_its_name_and_its_own_config(tmp_path: Path) -> None:
    config = _config(tmp_path / "job", _tasks(tmp_path / "tasks"), backend=JobBackend(config=DockerConfig(warm=2)))
    job = Job.start(tmp_path / "job", config)
    written = json.loads((job.dir / CONFIG_FILE).read_text())["backend"]
    assert written["name"] == "docker" and written["config"]["warm"] == 2
    assert written["config"] == json.loads(DockerConfig(warm=2).model_dump_json())  # every field written out
    assert Job.open(job.dir).config.backend.config == DockerConfig(warm=2)

    remote = JobBackend(name="e2b", config=E2BConfig(relay=RelayConfig(listen_host="0.0.0.0", listen_port=8900)))
    with pytest.raises(JobError) as info:
        job.check(_config(job.dir, tmp_path / "tasks", backend=remote))
    assert "(backend.name: 'docker' -> 'e2b'); resume it" in str(info.value)  # not each key of both configs
    with pytest.raises(ValueError, match="DockerConfig is not the e2b backend's config"):
        JobBackend(name="e2b", config=DockerConfig())
    (job.dir / CONFIG_FILE).write_text(
        json.dumps({**json.loads(job.config.model_dump_json()), "backend": {"name": "k8s", "config": {}}})
    )
    with pytest.raises(JobError, match=r"backend.name: Value error, 'k8s' is no sandbox backend; expected one of doc"):
        Job.open(job.dir)


def _old_config(tmp_path: Path, backend: dict, **runner: object) -> Path:
    """A config.json as the previous release wrote it: `backend` holds the CLI's options."""
    tmp_path.mkdir()
    (tmp_path / CONFIG_FILE).write_text(
        json.dumps(
            {
                "backend": backend,
                "n_attempts": 2,
                "n_concurrent": 2,
                "runner": {
                    "api_key_env": "AGENTBAKE_UPSTREAM_API_KEY",
                    "cpus": None,
                    "expect_logprobs": "raw",
                    "gateway": "host",
                    "image": "agentbake/claude-code:000000000000",
                    "logprobs_mode": None,
                    "memory_mb": None,
                    "model": None,
                    "model_name": None,
                    "model_settings": {
                        "disable_thinking": False,
                        "inner_system_as_user": False,
                        "min_p": None,
                        "repetition_penalty": None,
                        "temperature": None,
                        "top_k": None,
                        "top_p": None,
                    },
                    "oracle": True,
                    "out_dir": "/jobs/old",
                    "preflight": True,
                    "storage_mb": None,
                    "verifier_network": "none",
                    **runner,
                },
                "schema_version": 1,
                "tasks": [{"digest": "0" * 64, "name": "alpha", "path": "/tasks/alpha"}],
            },
            indent=2,
            sort_keys=True,
        )
    )
    return tmp_path


def test_a_config_json_of_the_previous_layout_still_opens(tmp_path: Path) -> None:
    e2b = {
        "gateway": "host",
        "manifest": "published.json",
        "name": "e2b",
        "relay_listen": "0.0.0.0:8900",
        "relay_url": "https://relay.example",
        "warm": 0,
    }
    opened = Job.open(_old_config(tmp_path / "e2b", e2b)).config
    assert opened.backend == JobBackend(
        name="e2b",
        config=E2BConfig(
            manifest=Path("published.json"),
            relay=RelayConfig(listen_host="0.0.0.0", listen_port=8900, public_url="https://relay.example"),
        ),
    )
    docker_options = {**e2b, "name": "docker", "warm": 2}
    assert Job.open(_old_config(tmp_path / "docker", docker_options)).config.backend.config == DockerConfig(warm=2)
    # Older still: the warm pool under runner.
    older = {key: value for key, value in docker_options.items() if key != "warm"}
    opened = Job.open(_old_config(tmp_path / "older", older, warm=3)).config
    assert (opened.backend.config, opened.runner.warm) == (DockerConfig(warm=3), 0)
    with pytest.raises(
        JobError,
        match=r"config.json: not a job's config.json \(: Value error, backend.relay_listen: 'nowhere': expected HOST",
    ):
        Job.open(_old_config(tmp_path / "bad", {**e2b, "relay_listen": "nowhere"}))


def test_a_docker_job_loads_no_remote_backends_config(tmp_path: Path) -> None:
    job = Job.start(tmp_path / "job", _config(tmp_path / "job", _tasks(tmp_path / "tasks")))
    remote = ("agentbake.runner.remote.e2b_config", "agentbake.runner.remote.hf_config")
    probe = (
        "import sys\nfrom pathlib import Path\nfrom agentbake.runner.job import Job\n"
        f"assert Job.open(Path({str(job.dir)!r})).config.backend.name == 'docker'\n"
        f"print(sorted(m for m in {remote!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_unreadable_job_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(JobError, match=r"config.json: missing; --resume takes the folder of a job"):
        Job.open(tmp_path)
    (tmp_path / CONFIG_FILE).write_text('{"schema_version": 1, "n_attempts": 0}')
    with pytest.raises(JobError, match=r"config.json: not a job's config.json \(.*runner: Field required"):
        Job.open(tmp_path)
    (tmp_path / RESULT_FILE).write_text('{"status": "fine"}')
    with pytest.raises(JobError, match=r"result.json: not a rollout's result .* remove .* to run that rollout again"):
        RolloutResult.read(tmp_path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--upstream", "scripted", "-k", "3"], "drop '--upstream', '-k' / '--n-attempts'"),
        (["--model", "scripted"], "drop '--upstream'"),  # the old spelling of --upstream, rewritten
        (["-o", "elsewhere"], "--resume DIR is the job's directory: drop --jobs-dir and --job-name"),
        (["--out", "elsewhere"], "--resume DIR is the job's directory: drop --jobs-dir and --job-name"),
    ],
)
def test_resume_alone_takes_the_settings_from_the_job(tmp_path: Path, args: list[str], message: str) -> None:
    job = Job.start(tmp_path / "job", _config(tmp_path / "job", _tasks(tmp_path / "tasks")))
    done = CliRunner().invoke(main, ["rollout", "--resume", str(job.dir), *args])
    assert done.exit_code == 2 and message in done.output, done.output


@pytest.mark.docker
def test_resume_with_other_settings_on_the_command_line_is_refused(built_images: dict, tmp_path: Path) -> None:
    tasks_root = _tasks(tmp_path / "tasks")
    tag = built_images["claude-code"].tag
    config = _config(tmp_path / "job", tasks_root)
    job = Job.start(
        tmp_path / "job", config.model_copy(update={"runner": config.runner.model_copy(update={"image": tag})})
    )
    args = ["rollout", "claude-code", "--path", str(tasks_root), "--oracle", "-k", "3", "--resume", str(job.dir)]
    done = agentbake(*args)
    assert done.returncode == 1 and "the job was started with other settings (n_attempts: 2 -> 3)" in done.stderr


@pytest.mark.docker
def test_a_catalog_changed_since_the_job_started_is_refused_before_building(
    built_images: dict, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Resumed from a folder whose ./images makes claude-code another image: the tag differs, named, and the
    other image is not built."""
    tasks_root = _tasks(tmp_path / "tasks")
    tag = built_images["claude-code"].tag
    config = _config(tmp_path / "job", tasks_root)
    job = Job.start(
        tmp_path / "job", config.model_copy(update={"runner": config.runner.model_copy(update={"image": tag})})
    )
    user_image = tmp_path / "images" / "claude-code"
    user_image.mkdir(parents=True)
    (user_image / "image.toml").write_text('extends = "claude-code"\npackages = ["jq"]\n')
    shutil.copy(builtin_root() / "images" / "claude-code" / "lock.json", user_image / "lock.json")
    args = ["rollout", "claude-code", "--path", str(tasks_root), "--oracle", "-k", "2", "--resume", str(job.dir)]
    done = agentbake(*args, cwd=tmp_path)
    assert done.returncode == 1 and f"runner.image: '{tag}' -> 'agentbake/claude-code:" in done.stderr, done.stderr
    other = done.stderr.split(f"runner.image: '{tag}' -> '")[1].split("'")[0]
    assert "building" not in done.stderr and not engine.images.list(name=other)


GATE = "/tmp/agentbake-test-release"
"""The file the slow task's solve.sh waits for: only the test creates it, in the sandboxes of the resume."""


def _release(engine: docker.DockerClient, rollout_prefix: str) -> None:
    """Create GATE in each running sandbox whose rollout id starts with `rollout_prefix`."""
    for container in engine.containers.list(filters={"label": labels.ROLLOUT}, ignore_removed=True):
        if container.labels.get(labels.ROLLOUT, "").startswith(rollout_prefix):
            with contextlib.suppress(docker.errors.APIError):  # stopped meanwhile: its rollout is over
                container.exec_run(["touch", GATE], user="root")


@pytest.mark.docker
def test_an_interrupted_batch_resumes_without_redoing_finished_rollouts(
    built_images: dict, engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Oracle rollouts, two at once: SIGTERM once both attempts of the quick task are done and the slow task's
    are running (it waits for a file only the test creates); the resume runs only the slow task's two, released
    by the test, and a second resume runs nothing."""
    prefix = f"resume{os.getpid()}"
    write_task(tmp_path / "tasks", f"{prefix}-a", solve="echo done > out.txt\n", test=reward_if("grep -q done out.txt"))
    write_task(
        tmp_path / "tasks",
        f"{prefix}-b",
        solve=f"until [ -e {GATE} ]; do sleep 0.2; done; echo done > out.txt\n",
        test=reward_if("grep -q done out.txt"),
    )
    job = tmp_path / "job"
    command = [*AGENTBAKE, "rollout", "claude-code", "--path", str(tmp_path / "tasks"), "--oracle", "-k", "2"]
    batch = subprocess.Popen(
        [*command, "-n", "2", "-o", str(tmp_path), "--job-name", "job"], stderr=subprocess.PIPE, text=True
    )
    quick, slow = [job / f"{prefix}-a__{i}" for i in (0, 1)], [job / f"{prefix}-b__{i}" for i in (0, 1)]
    try:
        deadline = time.monotonic() + 120
        while not all((folder / RESULT_FILE).is_file() for folder in quick):
            assert batch.poll() is None, batch.communicate()
            assert time.monotonic() < deadline, "the quick rollouts never finished"
            time.sleep(0.2)
        batch.send_signal(signal.SIGTERM)
        _, stderr = batch.communicate(timeout=60)
    finally:
        if batch.poll() is None:
            batch.kill()
    assert batch.returncode == 143, stderr
    assert leftovers(engine, prefix) == []
    assert [(folder / RESULT_FILE).is_file() for folder in slow] == [False, False], "the slow ones were not cut short"
    summary = json.loads((job / SUMMARY_FILE).read_text())
    assert (summary["complete"], summary["finished"]) == (False, 2)
    kept = {folder: (folder / RESULT_FILE).read_bytes() for folder in quick}

    with (tmp_path / "stdout").open("w+") as out, (tmp_path / "stderr").open("w+") as err:
        resuming = subprocess.Popen([*AGENTBAKE, "rollout", "--resume", str(job), "--json"], stdout=out, stderr=err)
        try:
            deadline = time.monotonic() + 120
            while resuming.poll() is None:
                assert time.monotonic() < deadline, "the resume never finished"
                _release(engine, f"{prefix}-b")
                time.sleep(0.2)
        finally:
            if resuming.poll() is None:
                resuming.kill()
        out.seek(0)
        err.seek(0)
        resumed = subprocess.CompletedProcess(resuming.args, resuming.returncode, out.read(), err.read())
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {job}: 2 rollouts finished, 2 to run" in resumed.stderr
    *results, totals = [json.loads(line) for line in resumed.stdout.splitlines()]
    assert [(r["task"], r["status"], r["reward"]) for r in results] == [
        (f"{prefix}-a", "ok", 1.0),
        (f"{prefix}-a", "ok", 1.0),
        (f"{prefix}-b", "ok", 1.0),
        (f"{prefix}-b", "ok", 1.0),
    ]
    assert {folder: (folder / RESULT_FILE).read_bytes() for folder in quick} == kept  # not run again
    assert (totals["complete"], totals["summary"]["rollouts"], totals["job"]) == (True, 4, str(job))
    assert json.loads((job / SUMMARY_FILE).read_text())["complete"] is True
    assert totals["report"] == str(job / REPORT_FILE)
    names = sorted([CONFIG_FILE, SUMMARY_FILE, REPORT_FILE, *(f.name for f in quick + slow)])
    assert sorted(p.name for p in job.iterdir()) == names

    again = agentbake("rollout", "--resume", str(job), "-n", "1")
    assert again.returncode == 0 and f"resuming {job}: 4 rollouts finished, 0 to run" in again.stderr
    assert leftovers(engine, prefix) == []
