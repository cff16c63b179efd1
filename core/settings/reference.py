"""The settings reference: every setting's environment variable, type, default and description,
grouped by subsystem and rendered as Markdown from the settings classes themselves.
docs/configuration.md is this text (`reprise config docs`); a test fails when it is stale."""

from __future__ import annotations

import inspect
import re
import sys
import types
from enum import Enum
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import annotated_types
from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from core.settings.loading import ENV_PREFIX, Settings

DOCS_COMMAND = "reprise config docs > docs/configuration.md"
GROUPS: tuple[type[BaseSettings], ...] = tuple(
    base for base in Settings.__bases__ if issubclass(base, BaseSettings)
)

_TAG_LIKE = re.compile(r"<(?=[A-Za-z/!?])")
_BOUNDS = (
    (annotated_types.Ge, "ge", ">="),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "<="),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.MultipleOf, "multiple_of", "a multiple of"),
)


def describe() -> str:
    """docs/configuration.md: an introduction, a contents list, and one table per subsystem."""
    lines = [
        "# Configuration",
        "",
        f"<!-- Generated from core/settings/ by `{DOCS_COMMAND}`; do not edit by hand. -->",
        "",
        f"Every Reprise process (API, workers, beat, `reprise` commands) reads its configuration from "
        f"environment variables named `{ENV_PREFIX}<SETTING>`. An empty variable counts as unset. An "
        "invalid value or combination stops the process at start with a message naming the variable "
        "and the fix. Each description says where its default comes from: a paper and its section, "
        "a standard, or a measurement (the README's sections and `reprise bench` commands). Code reads "
        "the settings as `core.settings.get_settings().<setting>`; each subsystem's are declared in "
        "one module of core/settings/.",
        "",
    ]
    lines += [f"- [{_title(group)}](#{_anchor(_title(group))})" for group in GROUPS]
    for group in GROUPS:
        lines += ["", *_group_section(group)]
    return "\n".join(lines) + "\n"


def _group_section(group: type[BaseSettings]) -> list[str]:
    """The subsystem's heading, its class docstring as the introduction, and its table."""
    first, *rest = _docstring_lines(group)
    summary = first.partition(":")[2].strip()
    about = " ".join([summary[:1].upper() + summary[1:], *rest]).split()
    lines = [f"## {_title(group)}", ""]
    if about:
        lines += [_escape(" ".join(about)), ""]
    lines += [f"Declared in `{_source_path(group)}`.", ""]
    lines += ["| Variable | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for name, field in _own_fields(group).items():
        cells = (f"`{ENV_PREFIX}{name.upper()}`", type_of(field), default_of(field), field.description or "")
        lines.append("| " + " | ".join(_cell(text) for text in cells) + " |")
    return lines


def _own_fields(group: type[BaseSettings]) -> dict[str, FieldInfo]:
    return {name: field for name, field in group.model_fields.items() if name in group.__annotations__}


def _docstring_lines(group: type[BaseSettings]) -> list[str]:
    return (inspect.getdoc(group) or group.__name__).splitlines()


def _title(group: type[BaseSettings]) -> str:
    """The subsystem's name: its class docstring's first line, up to the colon."""
    return _docstring_lines(group)[0].partition(":")[0].rstrip(".")


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces as hyphens."""
    kept = "".join(char for char in title.lower() if char.isalnum() or char in " -_")
    return kept.replace(" ", "-")


def _source_path(group: type[BaseSettings]) -> str:
    return "core/settings/" + Path(inspect.getfile(sys.modules[group.__module__])).name


def type_of(field: FieldInfo) -> str:
    """The type as an operator writes it: the choices of an enum, a comma list, and the bounds."""
    annotation, optional = _unwrap_optional(field.annotation)
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        text = f"comma list of {_plain_type(item)}"
    else:
        text = _plain_type(annotation)
    bounds = [
        f"{symbol} {_number(getattr(item, attribute))}"
        for kind, attribute, symbol in _BOUNDS
        for item in field.metadata
        if isinstance(item, kind)
    ]
    if bounds:
        text += f" ({', '.join(bounds)})"
    return text + (", optional" if optional else "")


def default_of(field: FieldInfo) -> str:
    """The default as the variable would be written; a secret's is never shown."""
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, SecretStr) or _unwrap_optional(field.annotation)[0] is SecretStr:
        return "(secret, not shown)"
    if isinstance(value, list):
        return f"`{','.join(_scalar(item) for item in value)}`" if value else "empty"
    text = _scalar(value)
    return f"`{text}`" if text else "empty"


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    args = get_args(annotation)
    if get_origin(annotation) in (Union, types.UnionType) and type(None) in args:
        rest = [arg for arg in args if arg is not type(None)]
        return (rest[0] if len(rest) == 1 else annotation), True
    return annotation, False


def _plain_type(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(f"`{member.value}`" for member in annotation)
    names = {bool: "bool", int: "int", float: "float", str: "string", Path: "path", SecretStr: "secret"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, float | int):
        return _number(value)
    return str(value)


def _number(value: Any) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


def _cell(text: str) -> str:
    return _escape(" ".join(text.split())).replace("|", "\\|")


def _escape(text: str) -> str:
    """An angle bracket that opens a word outside code spans, which Markdown takes for HTML (<data_dir>)."""
    parts = text.split("`")
    return "`".join(part if index % 2 else _TAG_LIKE.sub("&lt;", part) for index, part in enumerate(parts))
