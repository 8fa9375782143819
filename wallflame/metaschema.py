"""``meta.json``'s JSON Schema, made from its typed record (``rundir.RunMeta``, its nested
records and ``TypedDict`` s): one property per field, described by the field's docstring.

The schema of each version is kept in the package (``wallflame/schema/meta-N.schema.json``);
``tests/unit/hub/test_metaschema.py`` holds the current one equal to what this module makes,
so the record and the file cannot drift.  After a change to the record:

    .venv/bin/python -m wallflame.metaschema > wallflame/schema/meta-1.schema.json

Every key is optional but ``version`` (a newer writer of the same version may add keys; an
older one lacks them), and keys the schema does not name are allowed.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import itertools
import json
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

from wallflame.rundir import META_VERSION, RunMeta

#: The schema of the ``meta.json`` version this wallflame writes.
SCHEMA_PATH = Path(__file__).with_name("schema") / f"meta-{META_VERSION}.schema.json"

_SCALARS: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``meta.json`` version ``META_VERSION``."""
    out: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"wallflame meta.json, version {META_VERSION}",
    }
    out.update(_record(RunMeta))
    out["properties"]["version"] = {**out["properties"]["version"], "const": META_VERSION}
    out["required"] = ["version"]
    return out


def schema_json() -> str:
    """``schema()`` as the file keeps it."""
    return json.dumps(schema(), indent=2) + "\n"


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring (the string after its annotation), on one line."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _record(cls: type) -> dict[str, Any]:
    """A dataclass or a ``TypedDict``: an object with a property per field."""
    hints = typing.get_type_hints(cls)
    names = ([f.name for f in dataclasses.fields(cls) if f.init and f.name != "problems"]
             if dataclasses.is_dataclass(cls) else list(hints))
    docs = field_docs(cls)
    props = {}
    for name in names:
        prop = _schema_of(hints[name])
        if name in docs:  # the field's own words, before its type's
            prop = {"description": docs[name], **{k: v for k, v in prop.items()
                                                  if k != "description"}}
        props[name] = prop
    out: dict[str, Any] = {"type": "object"}
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split("\n\n")[0].split())
    out["properties"] = props
    required = sorted(getattr(cls, "__required_keys__", ()))
    if required:
        out["required"] = required
    return out


def _schema_of(hint: Any) -> dict[str, Any]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return {"anyOf": [_schema_of(h) for h in typing.get_args(hint)]}
    if hint is type(None):
        return {"type": "null"}
    if hint is Any:
        return {}
    if dataclasses.is_dataclass(hint) or typing.is_typeddict(hint):
        return _record(typing.cast("type", hint))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"type": "string", "enum": [m.value for m in hint]}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        items = _schema_of(args[0]) if args else {}
        return {"type": "array", **({"items": items} if items else {})}
    if origin is dict:
        values = _schema_of(args[1]) if args else {}
        return {"type": "object", **({"additionalProperties": values} if values else {})}
    raise TypeError(f"no JSON Schema for {hint!r}")


if __name__ == "__main__":
    sys.stdout.write(schema_json())


__all__ = ["SCHEMA_PATH", "field_docs", "schema", "schema_json"]
