"""Pieces every agentbake command shares, so they all look and behave alike.

Kept to click, pydantic and the standard library: the gateway's lean entry point imports it in sandboxes.
pydantic is imported only by what takes a model: `agentbake run --help` imports this module without it.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin

import click

if TYPE_CHECKING:
    from pydantic import BaseModel

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound="BaseModel")

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON (one object per line).")


def tasks_option(help_text: str, *, required: bool = True) -> Callable[[F], F]:
    """`-p/--path DIR` (Harbor's), repeatable: task directories or folders of them, passed as `task_dirs`."""
    return click.option(
        "-p",
        "--path",
        "task_dirs",
        multiple=True,
        required=required,
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        help=help_text,
    )


Renamed = str | Callable[[str], list[str]]
"""An old option's new spelling, or a function of its value giving the arguments that replace it."""


class RenamedOptions(click.Command):
    """A command that still takes its options' old spellings (`renamed`, hidden from --help), rewriting each
    to the new one with a warning on stderr."""

    def __init__(self, *args: Any, renamed: Mapping[str, Renamed] = {}, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.renamed = dict(renamed)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, rename_options(args, self.renamed))


def rename_options(args: list[str], renamed: Mapping[str, Renamed]) -> list[str]:
    """`args` with each old option of `renamed` rewritten (both `--old V` and `--old=V`); stops at `--`."""
    out: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            out.append(arg)
            out.extend(rest)
            break
        old, eq, value = arg.partition("=")
        target = renamed.get(old)
        if target is None:
            out.append(arg)
            continue
        if isinstance(target, str):
            click.echo(f"warning: {old} is deprecated; use {target}", err=True)
            out.append(target + eq + value)
            continue
        if not eq:
            value = next(rest, "")
        replacement = target(value)
        if replacement[0] != old:
            flags = " ".join(a for a in replacement if a.startswith("-"))
            click.echo(f"warning: {old} {value} is deprecated; use {flags}", err=True)
        out.extend(replacement)
    return out


def print_json(obj: Any) -> None:
    """One JSON object per line on stdout; dataclass results (BuildResult, TraceSummary, ...) as their fields."""
    click.echo(json.dumps(dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj, sort_keys=True))


def option_name(field: str, names: Mapping[str, str]) -> str:
    """The command-line spelling of a model field: `names[field]`, else `--field-name`."""
    return names.get(field, "--" + field.replace("_", "-"))


def model_options(
    model: type[BaseModel], *, names: Mapping[str, str] = {}, skip: Collection[str] = ()
) -> Callable[[F], F]:
    """Decorator: one click option per field of `model`, in field order, passed to the command under the
    field's name. Name from `names` or the field (`--field-name`), type from its annotation, default from
    the model, help from the field's docstring. A bool is a `--x/--no-x` pair (`names` may spell both
    halves). Secret fields cannot become options (argv shows in `ps`): list them in `skip`."""
    from pydantic import SecretStr

    fields = {}
    for field, info in model.model_fields.items():
        if field in skip:
            continue
        if _not_none(info.annotation) is SecretStr:
            raise TypeError(f"{model.__name__}.{field} is a secret: it cannot be a command-line option")
        default = REQUIRED if info.is_required() else info.default
        fields[field] = (info.annotation, default, info.description or "")
    return field_options(model.__name__, fields, names=names)


REQUIRED = object()
"""`field_options`' default of a field the command line must give."""


def field_options(
    owner: str, fields: Mapping[str, tuple[Any, Any, str]], *, names: Mapping[str, str] = {}
) -> Callable[[F], F]:
    """Decorator: one click option per `field: (annotation, default or REQUIRED, help)`, in order.

    `model_options` passes a model's fields here; `owner` names their model in errors."""

    def decorate(command: F) -> F:
        for field, (annotation, default, help_text) in reversed(fields.items()):
            option = _field_option(f"{owner}.{field}", field, annotation, default, help_text, option_name(field, names))
            command = option(command)
        return command

    return decorate


def _not_none(annotation: Any) -> Any:
    """`X` of `X | None` (an option's type: None is its absence); any other annotation as it is."""
    if get_origin(annotation) in (Union, types.UnionType):
        return next(arg for arg in get_args(annotation) if arg is not type(None))
    return annotation


def _field_option(where: str, field: str, annotation: Any, default: Any, help_text: str, name: str) -> Callable[[F], F]:
    annotation = _not_none(annotation)
    settings: dict[str, Any] = {"help": " ".join(help_text.split()), "show_default": True}
    if default is REQUIRED:
        settings.update(required=True, show_default=False)
    else:
        settings["default"] = default
    if annotation is bool:
        if "/" not in name:
            name = f"{name}/--no-{name.removeprefix('--')}"
        return click.option(name, field, **settings)
    if get_origin(annotation) is tuple:
        (annotation, _) = get_args(annotation)
        settings["multiple"] = True
    if get_origin(annotation) is Literal:
        settings["type"] = click.Choice([str(choice) for choice in get_args(annotation)])
    elif annotation is Path:
        settings["type"] = click.Path(path_type=Path)
    elif annotation in (str, int, float):
        settings["type"] = annotation
    else:
        raise TypeError(f"{where}: no command-line type for {annotation!r}")
    return click.option(name, field, **settings)


def build_model(model: type[M], values: Mapping[str, Any], *, names: Mapping[str, str] = {}) -> M:
    """`model(**values)`, its validation errors turned into one click error naming each option at fault."""
    from pydantic import ValidationError

    try:
        return model(**values)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            where = option_name(field, names) if field in model.model_fields else field
            problems.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
        raise click.ClickException("; ".join(problems)) from exc
