"""task.toml's keys: each one Harbor defines is honoured (a typed value on `Task`) or refused naming the file,
the key and the fix; nothing is ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbake.errors import TaskError
from agentbake.tasks.task import load_task
from agentbake.tasks.task_parts import Artifact, CollectHook
from agentbake.tasks.task_toml import read_task_toml
from tests.tasks.test_task import make_task


def refused(tmp_path: Path, toml: str) -> str:
    root = make_task(tmp_path, toml)
    with pytest.raises(TaskError) as info:
        load_task(root)
    message = str(info.value)
    assert message.startswith(f"{root / 'task.toml'}: ")
    return message


def test_a_schema_1_x_file_with_every_section_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AB_TEST_TOKEN", "s3cret-value")
    toml = """
schema_version = "1.4"
source = "terminal-bench"
split = "test"
artifacts = ["/app/out.txt", { source = "logs", destination = "run/logs", exclude = ["*.tmp"] }]
[task]
name = "acme/fix-things"
version = "2.1.0"
description = "Fix the things."
authors = [{ name = "Ada", email = "ada@example.com" }]
keywords = ["git", "python"]
[metadata]
anything = { nested = [1, 2] }
[agent]
timeout_sec = 120
setup_timeout_sec = 360
user = 0
[environment]
workdir = "//srv/work/./repo/"
cpus = 2
memory_mb = 4096
storage_mb = 8192
gpus = 0
os = "Linux"
mcp_servers = []
env = { TOKEN = "${AB_TEST_TOKEN}", MODE = "${AB_UNSET_MODE:-fast}", LITERAL = "x-${AB_TEST_TOKEN}" }
[verifier]
timeout_sec = 30
user = "tester"
env = { CHECK = "${AB_TEST_TOKEN:-none}" }
[[verifier.collect]]
command = "git diff > /logs/artifacts/model.patch"
timeout_sec = 20
user = "root"
[solution]
env = { HINT = "1" }
"""
    task = load_task(make_task(tmp_path, toml))
    assert (task.schema_version, task.package_name, task.package_version) == ("1.4", "acme/fix-things", "2.1.0")
    assert task.agent_timeout_sec == 120.0 and task.agent_user == "root" and task.verifier_user == "tester"
    assert task.workdir == "/srv/work/repo" and (task.cpus, task.memory_mb, task.storage_mb) == (2.0, 4096, 8192)
    assert task.environment_env == {"TOKEN": "s3cret-value", "MODE": "fast", "LITERAL": "x-${AB_TEST_TOKEN}"}
    assert task.verifier_env == {"CHECK": "s3cret-value"} and task.solution_env == {"HINT": "1"}
    assert "s3cret-value" not in repr(task)  # expanded values may be secrets
    assert task.verifier_collect == (CollectHook("git diff > /logs/artifacts/model.patch", 20.0, "root"),)
    assert task.artifacts == (Artifact("/app/out.txt"), Artifact("logs", "run/logs", ("*.tmp",)))
    assert task.warnings == (
        f"{task.path / 'task.toml'}: [agent] setup_timeout_sec: has no effect here: agentbake "
        "installs nothing in a sandbox per rollout (the agent comes from its bundle), so there is no setup to time",
    )


def test_defaults_are_harbors(tmp_path: Path) -> None:
    config = read_task_toml(tmp_path / "missing.toml")
    assert config.agent_timeout_sec == config.verifier_timeout_sec == 600.0
    assert config.environment.build_timeout_sec == 600.0 and config.verifier_mode == "shared"
    assert config.agent_network.mode == config.verifier_network.mode == "public"
    assert config.verifier_collect == () and config.artifacts == () and config.verifier_environment is None


def test_env_templates_come_from_the_given_environment_and_a_missing_one_is_named(tmp_path: Path) -> None:
    file = tmp_path / "task.toml"
    file.write_text('[verifier]\nenv = { KEY = "${AB_KEY}" }\n')
    assert read_task_toml(file, {"AB_KEY": ""}).verifier_env == {"KEY": ""}  # set but empty is set
    with pytest.raises(TaskError) as info:
        read_task_toml(file, {})
    assert str(info.value) == (
        f"{file}: [verifier] env: KEY = ${{AB_KEY}}, but AB_KEY is not set in agentbake's environment; export "
        "AB_KEY before the run, or give a default: ${AB_KEY:-value}"
    )


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("bogus = 1", "bogus: unknown key; the top level takes: agent, artifacts, environment, metadata, "),
        ("[agent]\nsetup = 1", "[agent] setup: unknown key; [agent] takes: allowed_hosts, network_mode, "),
        ("[environment]\nram = 1", "[environment] ram: unknown key; [environment] takes: allow_internet, "),
        ("[verifier.environment]\nfoo = 1", "[verifier.environment] foo: unknown key; [verifier.environment] takes"),
        ("[[steps]]\nname = 'a'", "steps: multi-step tasks ([[steps]]) are not supported; split the task into"),
        ("multi_step_reward_strategy = 'mean'", "multi_step_reward_strategy: multi-step tasks are not supported"),
        ("[environment]\nmcp_servers = [{ name = 'x' }]", "[environment] mcp_servers: MCP servers for the agent"),
        ("[environment]\nhealthcheck = { command = 'true' }", "[environment] healthcheck: healthchecks are not"),
        ("[verifier.environment]\ntpu = { type = 'v6e' }", "[verifier.environment] tpu: agentbake has no TPU"),
        ("schema_version = '2.0'", "schema_version: schema '2.0' has a major version agentbake does not know"),
        ("version = 1.0", 'version: expected a version string like "1.0" (quoted), got 1.0'),
        ("schema_version = '1.1'\nversion = '1.0'", "version: differs from schema_version; keep one of them"),
        ("[task]\nversion = '1'", '[task] name: expected "org/name"'),
        ("[task]", '[task] name: expected "org/name" (letters, digits, ".", "_", "-"), got None'),
        ("[task]\nname = 'plain'", '[task] name: expected "org/name" (letters, digits'),
        ("[task]\nname = 'a/../b'", '[task] name: expected "org/name"'),
        ("[task]\nname = 'a/b'\nversion = ''", "[task] version: expected a non-empty string"),
        ("[task]\nname = 'a/b'\nkeywords = 'x'", "[task] keywords: expected a list of strings"),
        ("[task]\nname = 'a/b'\nauthors = [{ email = 'e' }]", "[task.authors] name: missing; every author needs"),
        ("[task]\nname = 'a/b'\nauthors = [{ name = 'A', org = 'o' }]", "[task.authors] org: unknown key"),
        ("[task]\nname = 'a/b'\ndescription = 3", "[task] description: expected a string, got 3"),
        ("source = 3", "source: expected a string, got 3"),
        ("metadata = 3", "[metadata] must be a table"),
        ("[agent]\nsetup_timeout_sec = 0", "[agent] setup_timeout_sec: expected a positive number of seconds"),
        ("[agent]\nuser = 'a b'", '[agent] user: expected a user name like "tester" or a uid like 1000'),
        ("[agent]\nuser = -3", "[agent] user: expected a user name"),
        ("[environment]\ngpus = 1", "[environment] gpus: 1: agentbake has no GPU sandboxes; a task here needs gpus"),
        ("[environment]\ngpus = -1", "[environment] gpus: expected a number of GPUs (0), got -1"),
        ("[environment]\ngpu_types = ['H100']", "[environment] gpu_types: agentbake has no GPU sandboxes"),
        ("[environment]\nos = 'windows'", "[environment] os: Windows tasks are not supported"),
        ("[environment]\nos = 'macos'", "[environment] os: expected \"linux\", got 'macos'"),
        ("[environment]\nmemory = '2G'\nmemory_mb = 1024", "[environment] memory: '2G' differs from memory_mb"),
        ("[environment]\nenv = { 'A-B' = '1' }", "[environment] env: 'A-B' is not a variable name"),
        ("[solution]\nenv = { A = 1 }", "[solution] env: expected a table of strings"),
        ("[solution]\nfiles = 1", "[solution] files: unknown key; [solution] takes: env"),
        ("[verifier]\nenvironment_mode = 'own'", '[verifier] environment_mode: expected "shared" or "separate"'),
        (
            "[verifier]\nenvironment_mode = 'shared'\n[verifier.environment]\ncpus = 1",
            '[verifier] environment_mode: "shared" runs the verifier in the agent\'s container',
        ),
        ("[verifier]\ncollect = 'x'", "[verifier] collect: expected [[verifier.collect]] tables"),
        ("[[verifier.collect]]\ntimeout_sec = 1", "[verifier.collect] command: expected a shell command"),
        ("[[verifier.collect]]\ncommand = 'x'\nservice = 'db'", "[verifier.collect] service: 'db': only the agent"),
        ("[[verifier.collect]]\ncommand = 'x'\ntimeout_sec = 0", "[verifier.collect] timeout_sec: expected a posi"),
        ("[[verifier.collect]]\ncommand = 'x'\nwhen = 1", "[verifier.collect] when: unknown key"),
        ("artifacts = '/app'", "artifacts: expected a list like"),
        ("artifacts = ['/app/../etc']", "[artifacts] source: expected a path in the container without '..'"),
        ("artifacts = [{ source = '/a', destination = '/abs' }]", "[artifacts] destination: expected a relative"),
        ("artifacts = [{ source = '/a', destination = 'manifest.json' }]", "(not manifest.json)"),
        ("artifacts = [{ source = '/a', service = 'db' }]", "[artifacts] service: 'db': only main"),
        ("artifacts = [{ source = '/a', exclude = 'x' }]", "[artifacts] exclude: expected a list of patterns"),
        ("artifacts = [3]", "artifacts: expected a path or a table with source = ..., got 3"),
    ],
)
def test_each_bad_key_is_refused_naming_file_key_and_fix(tmp_path: Path, toml: str, expected: str) -> None:
    assert expected in refused(tmp_path, toml)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("'/app'", "/app"),
        ("'/app/'", "/app"),
        ("'/srv//x/./y'", "/srv/x/y"),
        ("'/testsuite'", "/testsuite"),  # only /tests itself and below are the harness's
    ],
)
def test_workdir_is_normalized(tmp_path: Path, value: str, expected: str) -> None:
    assert load_task(make_task(tmp_path, f"[environment]\nworkdir = {value}")).workdir == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("'app'", "expected an absolute path like \"/app\", got 'app'"),
        ("''", "expected an absolute path"),
        ("3", "expected an absolute path"),
        ("'/app dir'", "expected an absolute path"),
        ("'/app/../etc'", "'/app/../etc' goes through '..'; write the directory itself"),
        ("'/'", "is / or under /proc, /sys, /dev, /tests, /logs, /solution"),
        ("'//'", "is / or under"),
        ("'/proc/self'", "is / or under"),
        ("'/sys'", "is / or under"),
        ("'/dev/shm'", "is / or under"),
        ("'/tests'", "is / or under"),
        ("'/logs/verifier'", "is / or under"),
        ("'/solution/'", "is / or under"),
    ],
)
def test_a_bad_workdir_is_refused(tmp_path: Path, value: str, expected: str) -> None:
    message = refused(tmp_path, f"[environment]\nworkdir = {value}")
    assert "[environment] workdir: " in message and expected in message


def test_verifier_environment_makes_the_verifier_separate_with_its_own_image_and_resources(tmp_path: Path) -> None:
    toml = """
[environment]
network_mode = "no-network"
[verifier.environment]
docker_image = "acme/verifier:1"
cpus = 1
memory = "1G"
workdir = "/work"
env = { MODE = "strict" }
"""
    task = load_task(make_task(tmp_path, toml))
    own = task.verifier_environment
    assert task.verifier_mode == "separate" and own is not None
    assert (own.docker_image, own.cpus, own.memory_mb, own.workdir) == ("acme/verifier:1", 1.0, 1024, "/work")
    assert own.env == {"MODE": "strict"} and own.network.mode == "public"  # its own default, not inherited
    assert task.agent_network.mode == "no-network" and task.verifier_network.mode == "public"


def test_separate_without_its_own_table_runs_a_copy_of_the_environment(tmp_path: Path) -> None:
    toml = '[verifier]\nenvironment_mode = "separate"\n[environment]\nnetwork_mode = "no-network"\n'
    task = load_task(make_task(tmp_path, toml))
    assert task.verifier_mode == "separate" and task.verifier_environment is None
    assert task.verifier_network.mode == "no-network"
