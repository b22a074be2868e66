"""Spec validation and `extends`: every bad input names the file, the key and what was expected."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from agentbake.buildkit.catalog import Catalog, builtin_root
from agentbake.buildkit.spec import validate_spec
from agentbake.errors import SpecError
from tests.conftest import write_spec

VALID = """
description = "test image"
[base]
why = "testing"
[agent]
name = "Claude Code"
package = "@anthropic-ai/claude-code"
version = "2.1.332"
command = "claude"
install = "native"
native_package = "@anthropic-ai/claude-code-linux-x64"
native_binary = "claude"
"""


def load(folder: Path, text: str, name: str = "img"):
    path = write_spec(folder, name, text)
    with pytest.raises(SpecError) as info:
        Catalog.discover(folder).load(name)
    assert str(path) in str(info.value)
    return str(info.value)


def test_catalog_specs_load_with_their_defaults(catalog: Catalog) -> None:
    specs = {spec.name: spec for spec in catalog.load_all()}
    assert sorted(specs) == ["claude-code", "codex", "gemini-cli", "mini-swe-agent", "opencode", "pi", "qwen-code"]
    assert specs["pi"].base.suite == "trixie" and specs["pi"].agent.install == "npm"
    assert specs["claude-code"].agent.install == "native"
    assert all(spec.user.name == "agent" and spec.user.uid == 1000 for spec in specs.values())


def test_unknown_key_lists_the_allowed_keys(user_catalog: Path) -> None:
    message = load(user_catalog, VALID.replace("[agent]", "[agent]\nverison = '1'"))
    assert "unknown key 'agent.verison'" in message
    assert "version" in message and "native_package" in message


def test_unknown_top_level_key(user_catalog: Path) -> None:
    message = load(user_catalog, "descripton = 'x'\n" + VALID)
    assert "unknown key 'descripton'" in message and "allowed here: description" in message


def test_wrong_type_names_key_and_got_value(user_catalog: Path) -> None:
    message = load(user_catalog, VALID.replace('version = "2.1.332"', "version = 12"))
    assert "key 'agent.version'" in message and "valid string" in message and "got 12 of type int" in message


def test_missing_field(user_catalog: Path) -> None:
    message = load(user_catalog, VALID.replace('package = "@anthropic-ai/claude-code"\n', ""))
    assert "missing required key 'agent.package'" in message


def test_invalid_toml_names_the_line(user_catalog: Path) -> None:
    message = load(user_catalog, VALID + "\n[agent\n")
    assert "invalid TOML" in message and "line" in message


def test_native_install_needs_its_package(user_catalog: Path) -> None:
    message = load(user_catalog, VALID.replace('native_binary = "claude"\n', ""))
    assert 'install = "native" needs native_package and native_binary' in message


def test_literal_choices_are_named(user_catalog: Path) -> None:
    message = load(user_catalog, VALID.replace('install = "native"', 'install = "cargo"'))
    assert "key 'agent.install'" in message and "'native', 'npm' or 'pip'" in message


def test_exclude_is_for_pip_agents(user_catalog: Path) -> None:
    message = load(user_catalog, VALID.replace('install = "native"', 'install = "native"\nexclude = ["x"]'))
    assert 'exclude is for install = "pip"' in message


def test_bad_folder_name(user_catalog: Path) -> None:
    message = load(user_catalog, VALID, name="Bad Name")
    assert "image name 'Bad Name'" in message and "lowercase" in message


def test_extends_adds_packages_to_a_builtin_image(user_catalog: Path) -> None:
    write_spec(
        user_catalog,
        "claude-plus",
        'extends = "claude-code"\npackages = ["jq"]\n[agent]\nversion = "2.1.332"\n',
    )
    catalog = Catalog.discover(user_catalog)
    spec, parent = catalog.load("claude-plus"), catalog.load("claude-code")
    assert spec.packages == ["jq"] and spec.agent == parent.agent and spec.base == parent.base
    assert spec.source_dir == user_catalog / "claude-plus"
    assert catalog.names() == [
        "claude-code",
        "claude-plus",
        "codex",
        "gemini-cli",
        "mini-swe-agent",
        "opencode",
        "pi",
        "qwen-code",
    ]


def test_same_name_extends_the_builtin_one(user_catalog: Path) -> None:
    write_spec(user_catalog, "claude-code", 'extends = "claude-code"\nenv = { FOO = "bar" }\n')
    spec = Catalog.discover(user_catalog).load("claude-code")
    assert spec.env == {"FOO": "bar"} and spec.agent.command == "claude"


def test_extends_unknown_image(user_catalog: Path) -> None:
    path = write_spec(user_catalog, "child", 'extends = "nope"\n')
    with pytest.raises(SpecError, match="no image named 'nope'") as info:
        Catalog.discover(user_catalog).load("child")
    assert str(path) in str(info.value)


def test_extends_cycle(user_catalog: Path) -> None:
    write_spec(user_catalog, "a", 'extends = "b"\n')
    write_spec(user_catalog, "b", 'extends = "a"\n')
    with pytest.raises(SpecError, match="cycle"):
        Catalog.discover(user_catalog).load("a")


def test_missing_catalog_folder(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"--catalog .*no such folder"):
        Catalog.discover(tmp_path / "absent")


def test_spec_hash_changes_with_the_spec(user_catalog: Path) -> None:
    write_spec(user_catalog, "a", VALID)
    write_spec(user_catalog, "b", VALID.replace("test image", "test image!"))
    catalog = Catalog.discover(user_catalog)
    assert catalog.load("a").spec_hash != catalog.load("b").spec_hash


def test_builtin_catalog_is_the_checkout() -> None:
    assert (builtin_root() / "images" / "claude-code" / "image.toml").is_file()


def test_the_images_readme_example_is_a_valid_spec() -> None:
    """The spec shown in images/README.md validates, its extras as top-level keys (not under [agent])."""
    readme = (Path(__file__).parents[2] / "images" / "README.md").read_text(encoding="utf-8")
    example = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    data = tomllib.loads(example)
    data.pop("extends")
    spec = validate_spec(data, name="example", source=Path("images/example/image.toml"))
    assert spec.packages == ["jq"] and spec.run == ["pip --version"] and "PATH" in spec.env
