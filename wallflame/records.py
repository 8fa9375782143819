"""The run directory's records to and from JSON: a dataclass as a dict (``plain``) and back
(``record_from_json``), each field taken when it has its type and defaulted (and named) when not.

``wallflame.rundir`` reads and writes ``capture.json`` and ``meta.json`` through these.  A
field's type is one of: a record (dataclass), a union with ``None``, an enum, a scalar, a
list, a dict or a ``TypedDict`` (taken as any dict: its keys are the readers' to test).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import asdict, dataclass
from typing import Any, TypeVar


def plain(value: Any) -> Any:
    """``dataclasses.asdict`` for the run directory's records: the same result (dataclasses
    as dicts, containers copied), without copying each number and string as ``asdict``
    does.  ``collect`` writes ``raw/capture.json`` four times a second: ``asdict`` took 1.2
    ms of a 1.4 ms write of a 16 KB capture."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {plain(k): plain(v) for k, v in value.items()}
    if kind is list:
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return asdict(_Box(value))["value"]  # anything else exactly as asdict gives it


_ATOMS = frozenset({str, int, float, bool, type(None)})


@dataclass
class _Box:
    value: Any


R = TypeVar("R")


def record_from_json(cls: type[R], data: dict[str, Any], where: str, problems: list[str]) -> R:
    """A record from its JSON: each field of the right type taken, anything else the
    field's default (named in ``problems``); keys the record does not know are ignored
    (a newer minor writer), a missing ``version`` is 0."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init or f.name == "problems":
            continue
        if f.name not in data:
            if f.name == "version":
                values["version"] = 0
            continue
        ok, value = _typed(hints[f.name], data[f.name], f"{where}: {f.name}", problems)
        if ok:
            values[f.name] = value
        else:
            problems.append(f"{where}: {f.name} is not {_describe(hints[f.name])}: the "
                            "default was used")
    return cls(**values)


def _typed(hint: Any, value: Any, where: str, problems: list[str]) -> tuple[bool, Any]:
    """``value`` as ``hint`` (a record, a union with None, a scalar, a list or a dict)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if value == {} and type(None) in typing.get_args(hint):
            return True, None  # an empty report: none (``pmp`` without snapshots)
        for option in typing.get_args(hint):
            ok, v = _typed(option, value, where, problems)
            if ok:
                return True, v
        return False, None
    if hint is type(None):
        return value is None, None
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            return False, None
        return True, record_from_json(typing.cast("type[Any]", hint), value, where, problems)
    if hint is Any:
        return True, value
    if typing.is_typeddict(hint):
        return isinstance(value, dict), value
    origin = typing.get_origin(hint) or hint
    if isinstance(origin, type) and issubclass(origin, enum.Enum):
        try:
            return True, origin(value)
        except ValueError:
            return False, None
    if origin is bool:
        return isinstance(value, bool), value
    if origin is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else None
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if origin is str:
        return isinstance(value, str), value
    if origin is list:
        return isinstance(value, list), value
    if origin is dict:
        return isinstance(value, dict), value
    return False, None


def _describe(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("wallflame.rundir.", "")


__all__ = ["plain", "record_from_json"]
