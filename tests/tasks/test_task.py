"""The Harbor-layout task loader: the shipped examples load, and each bad directory names what is wrong."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agentbake.errors import TaskError
from agentbake.tasks.task import DEFAULT_TIMEOUT_SEC, discover_tasks, load_task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def make_task(root: Path, toml: str | None = None, *, name: str = "t") -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Do the thing.\n")
    (task / "tests" / "test.sh").write_text("exit 0\n")
    if toml is not None:
        (task / "task.toml").write_text(toml)
    return task


def test_examples_load_with_their_settings() -> None:
    tasks = {task.name: task for task in discover_tasks([EXAMPLES])}
    assert sorted(tasks) == ["fix-failing-test", "fix-inventory", "multi-step-report", "summarize-logs", "write-file"]
    report = tasks["multi-step-report"]
    assert report.agent_timeout_sec == 240.0 and report.verifier_timeout_sec == 30.0
    assert report.cpus == 1.0 and report.memory_mb == 1024
    assert report.setup_script is not None and report.setup_script.name == "setup.sh"
    assert report.environment_files == []  # setup.sh runs as root; it is not copied into the workdir
    fix = tasks["fix-failing-test"]
    assert fix.environment_files == [Path("calc/__init__.py"), Path("test_calc.py")]
    assert all(task.solution_script and task.solution_script.is_file() for task in tasks.values())
    assert all(task.warnings == () for task in tasks.values())
    logs = tasks["summarize-logs"]  # brings its own image: environment/ is its build context
    assert logs.has_own_image and logs.build_timeout_sec == 300.0 and logs.environment_files == []
    assert logs.setup_script is None  # its Dockerfile runs setup.sh at build time


def test_defaults_without_task_toml(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path))
    assert task.agent_timeout_sec == task.verifier_timeout_sec == DEFAULT_TIMEOUT_SEC
    assert task.cpus is None and task.memory_mb is None and task.environment_dir is None
    assert task.solution_script is None


def test_digest_changes_with_any_byte(tmp_path: Path) -> None:
    root = make_task(tmp_path)
    before = load_task(root).digest
    (root / "tests" / "test.sh").write_text("exit 1\n")
    assert load_task(root).digest != before


def test_a_terminal_bench_2_task_toml_loads_with_every_key_honoured(tmp_path: Path) -> None:
    toml = """
version = "1.0"
[metadata]
author_name = "x"
difficulty = "medium"
tags = ["git"]
[agent]
timeout_sec = 900.0
[verifier]
timeout_sec = 900.0
[environment]
build_timeout_sec = 600.0
docker_image = "alexgshaw/git-leak-recovery:20251031"
cpus = 1
memory = "2G"
storage = "10G"
"""
    task = load_task(make_task(tmp_path, toml))
    assert task.schema_version == "1.0" and task.package_name is None
    assert task.memory_mb == 2048 and task.storage_mb == 10240 and task.cpus == 1.0
    assert task.agent_timeout_sec == task.verifier_timeout_sec == 900.0
    assert task.docker_image == "alexgshaw/git-leak-recovery:20251031"
    assert task.agent_network.mode == task.verifier_network.mode == "public"  # Harbor's default
    assert task.verifier_mode == "shared" and task.agent_user is None


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[agent]\ntimeout_sec = 'soon'", "number of seconds up to 604800 (a week), got 'soon'"),
        ("[verifier]\ntimeout_sec = -1", "[verifier] timeout_sec: expected a positive number"),
        ("[environment]\ncpus = true", "[environment] cpus: expected a positive number of cores"),
        ("[environment]\nmemory_mb = 1.5", "[environment] memory_mb: expected an integer number of MiB"),
        ("[environment]\nmemory = 'lots'", '[environment] memory: expected a size like "2G"'),
        ("[agent]\ntimeout_sec = inf", "[agent] timeout_sec: expected a positive number of seconds up to 604800"),
        ("[agent]\ntimeout_sec = nan", "seconds up to 604800 (a week), got nan"),
        ("[verifier]\ntimeout_sec = 1e12", "[verifier] timeout_sec: expected a positive number of seconds up to"),
        ("[agent]\ntimeout_sec = 0", "[agent] timeout_sec: expected a positive number"),
        ("[environment]\ncpus = inf", "[environment] cpus: expected a positive number of cores up to 1024, got inf"),
        ("[environment]\ncpus = -2", "[environment] cpus: expected a positive number of cores"),
        ("[environment]\nmemory_mb = 1099511627776", "[environment] memory_mb: expected an integer number of MiB (16"),
        ("[environment]\nmemory = '99999999T'", '[environment] memory: expected a size like "2G" or "512M" up to 16T'),
        ("[environment]\nstorage_mb = 8", "[environment] storage_mb: expected an integer number of MiB (16 to"),
        ("[environment]\nstorage_mb = -1", "[environment] storage_mb: expected an integer number of MiB"),
        ("[environment]\nstorage = 'big'", '[environment] storage: expected a size like "2G"'),
        ("[environment]\nenv = { A = 1 }", "[environment] env: expected a table of strings"),
        ("[environment]\ndocker_image = 3", "[environment] docker_image: expected an image reference"),
        ("[environment]\ndocker_image = 'a b'", "[environment] docker_image: expected an image reference"),
        ("[environment]\nbuild_timeout_sec = 0", "[environment] build_timeout_sec: expected a positive number"),
        ("[verifier]\nuser = 'a b'", '[verifier] user: expected a user name like "tester" or a uid like 1000'),
        ("[verifier]\nuser = true", "[verifier] user: expected a user name"),
        ("[verifier]\nuser = -1", '[verifier] user: expected a user name like "tester" or a uid like 1000, got -1'),
        ("[verifier]\nuser = 1.5", "[verifier] user: expected a user name"),
        ("[verifier]\nuser = ''", "[verifier] user: expected a user name"),
        ("[environment]\nallow_internet = 'yes'", "[environment] allow_internet: expected true or false, got 'yes'"),
        ("agent = 3", "[agent] must be a table"),
        ("[agent\n", "not valid TOML"),
    ],
)
def test_bad_task_toml_names_file_key_and_expectation(tmp_path: Path, toml: str, expected: str) -> None:
    root = make_task(tmp_path, toml)
    with pytest.raises(TaskError) as info:
        load_task(root)
    assert str(root / "task.toml") in str(info.value) and expected in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"), [("'tester'", "tester"), ("1000", "1000"), ("'1000'", "1000"), ("'root'", None), ("0", None)]
)
def test_the_verifier_user_is_a_name_or_a_uid_and_root_is_the_default(
    tmp_path: Path, value: str, expected: str | None
) -> None:
    task = load_task(make_task(tmp_path, f"[verifier]\nuser = {value}"))
    assert task.verifier_user == expected
    assert load_task(make_task(tmp_path, name="plain")).verifier_user is None


def test_allow_internet_is_harbors_true_unless_the_task_says_false(tmp_path: Path) -> None:
    assert load_task(make_task(tmp_path, name="a")).allow_internet is True
    closed = load_task(make_task(tmp_path, "[environment]\nallow_internet = false", name="b"))
    assert closed.allow_internet is False and closed.verifier_network.mode == "no-network"
    assert closed.agent_network.mode == "no-network"
    opened = load_task(make_task(tmp_path, "[environment]\nallow_internet = true", name="c"))
    assert opened.allow_internet is True and opened.agent_network.mode == "public"
    listed = load_task(make_task(tmp_path, "[verifier]\nallowed_hosts = ['pypi.org']", name="d"))
    assert listed.allow_internet is False  # an allowlist is not the whole internet --verifier-network bridge gives


def test_storage_in_mib_or_as_a_size(tmp_path: Path) -> None:
    assert load_task(make_task(tmp_path, "[environment]\nstorage_mb = 2048", name="a")).storage_mb == 2048
    assert load_task(make_task(tmp_path, "[environment]\nstorage = '10G'", name="b")).storage_mb == 10240


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("instruction.md", "/proc/self/environ"),  # the runner's environment (API keys) as the prompt
        ("environment/setup.sh", "/etc/passwd"),  # a host file run as root in the sandbox
        ("tests/data", "../.."),  # a folder outside, uploaded to /tests
        ("solution/solve.sh", "../../other/solve.sh"),
    ],
)
def test_symlinks_out_of_the_task_are_refused_naming_the_link(tmp_path: Path, link: str, target: str) -> None:
    root = make_task(tmp_path)
    (root / "environment").mkdir()
    (root / "solution").mkdir()
    (root / link).unlink(missing_ok=True)
    (root / link).symlink_to(target)
    with pytest.raises(TaskError) as info:
        load_task(root)
    assert f"{root / link}: a symlink to {target}, outside the task directory" in str(info.value)
    assert "never followed out of it" in str(info.value)


def test_symlinks_inside_the_task_load_and_special_files_do_not(tmp_path: Path) -> None:
    root = make_task(tmp_path)
    (root / "environment").mkdir()
    (root / "environment" / "data.txt").write_text("x")
    (root / "environment" / "alias.txt").symlink_to("data.txt")
    (root / "tests" / "env").symlink_to("../environment")
    assert load_task(root).environment_files == [Path("alias.txt"), Path("data.txt")]
    (root / "environment" / "gone").symlink_to("missing.txt")
    with pytest.raises(TaskError, match=r"environment/gone: cannot be read .*a broken symlink\? remove it"):
        load_task(root)
    (root / "environment" / "gone").unlink()
    os.mkfifo(root / "environment" / "pipe")
    with pytest.raises(TaskError, match=r"environment/pipe: neither a file nor a directory \(a FIFO"):
        load_task(root)


def test_missing_parts(tmp_path: Path) -> None:
    root = make_task(tmp_path)
    (root / "tests" / "test.sh").unlink()
    with pytest.raises(TaskError, match=r"tests/test.sh: missing"):
        load_task(root)
    (root / "instruction.md").unlink()
    with pytest.raises(TaskError, match=r"instruction.md: missing"):
        load_task(root)
    with pytest.raises(TaskError, match="not a directory"):
        load_task(tmp_path / "nope")


def test_dockerfile_task_keeps_environment_as_its_build_context(tmp_path: Path) -> None:
    root = make_task(tmp_path, "[environment]\nbuild_timeout_sec = 42\n")
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "environment" / "setup.sh").write_text("echo built into the image\n")
    (root / "environment" / "data.txt").write_text("context\n")
    task = load_task(root)
    assert task.has_own_image and task.dockerfile == root / "environment" / "Dockerfile"
    assert task.build_timeout_sec == 42.0 and task.docker_image is None
    # Terminal-Bench runs setup.sh from its Dockerfile: agentbake neither copies the context nor runs it.
    assert task.environment_dir is None and task.setup_script is None and task.environment_files == []


def test_docker_image_task_keeps_the_copy_and_setup_conventions(tmp_path: Path) -> None:
    root = make_task(tmp_path, "[environment]\ndocker_image = 'alexgshaw/chess-best-move:20251031'\n")
    (root / "environment").mkdir()
    (root / "environment" / "setup.sh").write_text("true\n")
    (root / "environment" / "input.txt").write_text("x\n")
    task = load_task(root)
    assert task.has_own_image and task.dockerfile is None
    assert task.docker_image == "alexgshaw/chess-best-move:20251031"
    assert task.setup_script == root / "environment" / "setup.sh"
    assert task.environment_files == [Path("input.txt")]
    assert not load_task(make_task(tmp_path, name="plain")).has_own_image


@pytest.mark.parametrize("compose", ["docker-compose.yaml", "docker-compose.yml", "compose.yaml"])
def test_compose_tasks_are_refused_clearly(tmp_path: Path, compose: str) -> None:
    root = make_task(tmp_path)
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "environment" / compose).write_text("services: {}\n")
    with pytest.raises(TaskError) as info:
        load_task(root)
    message = str(info.value)
    assert str(root / "environment" / compose) in message
    assert "several services (docker compose) are not supported" in message and "environment/Dockerfile" in message


def test_discover_refuses_empty_folders_and_duplicate_names(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="neither a task"):
        discover_tasks([tmp_path])
    make_task(tmp_path / "a", name="same")
    make_task(tmp_path / "b", name="same")
    with pytest.raises(TaskError, match="two tasks share the name 'same'"):
        discover_tasks([tmp_path / "a", tmp_path / "b"])


def test_copied_examples_stay_valid(tmp_path: Path) -> None:
    copy = shutil.copytree(EXAMPLES / "write-file", tmp_path / "write-file")
    assert load_task(copy).instruction.startswith("Create a file named `hello.txt`")
