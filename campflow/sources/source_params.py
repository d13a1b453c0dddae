"""Params models built from a source's own knobs: dataclass fields, constructor and env kwargs.

An imported bootcamp's params are the source's knobs (a reasoning-gym config, a Gymnasium env's
keyword arguments, a task class's constructor arguments), so synthesis varies exactly what the
source lets vary. :func:`knob` maps one Python type and default to a :class:`Knob`; a field whose
type has no JSON form (a callable, an object) is not a knob and keeps the source's default.

Type mapping: ``bool``/``int``/``float``/``str`` as they are; ``Optional[X]`` as ``X | None``;
``Literal`` as it is; an ``Enum`` as a ``Literal`` of its values (converted back to members for the
source); lists, tuples and sequences as JSON lists (back to tuples where the source's default is one),
a list of dataclasses as a list of JSON objects (each built into the dataclass for the source);
dicts as JSON objects. An untyped parameter, or one whose default does not fit its annotation, takes
the type of its default.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, create_model, model_validator

from campflow.bootcamps.base import Params, format_validation_error

_SCALARS = (bool, int, float, str)


class SourceParams(Params):
    """Base of params models built from a source: knob names like ``model_size`` are allowed."""

    model_config = ConfigDict(protected_namespaces=())


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Knob:
    """One source knob as a params field: its type, default (JSON form), bounds and conversion back."""

    name: str
    annotation: Any
    default: Any
    description: str
    ge: float | None = None
    le: float | None = None
    to_source: Callable[[Any], Any] = field(default=_same, compare=False)


def knob(name: str, tp: Any, default: Any, description: str) -> Knob | None:
    """The knob for a field of type ``tp`` with ``default``, or None when it has no JSON form."""
    nullable = False
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(tp))
        if len(args) != 1:
            return None
        tp, origin = args[0], typing.get_origin(args[0])
    if tp is typing.Any or tp is None or isinstance(tp, str):
        tp, origin = (type(default), None) if default is not None else (None, None)
    mapped = _mapped(tp, origin, default)
    if mapped is not None and not _fits(mapped[0] | None if nullable or default is None else mapped[0], mapped[1]):
        # the annotation lies about the default (``symbols: tuple = "x"``): trust the default
        mapped = _mapped(type(default), None, default) if default is not None else None
    if mapped is None:
        return None
    annotation, json_default, to_source = mapped
    if nullable or default is None:
        annotation = annotation | None
    if not _json_able(json_default) or not _fits(annotation, json_default):
        return None
    return Knob(name, annotation, json_default, description, to_source=to_source)


def _fits(annotation: Any, value: Any) -> bool:
    try:
        TypeAdapter(annotation).validate_python(value, strict=False)
    except (ValidationError, TypeError, ValueError):
        return False
    return True


def _mapped(tp: Any, origin: Any, default: Any) -> tuple[Any, Any, Callable[[Any], Any]] | None:
    if tp in _SCALARS:
        if default is not None and not isinstance(default, _SCALARS):
            return None
        if tp is float and isinstance(default, int) and not isinstance(default, bool):
            default = float(default)
        return tp, default, _same
    if origin is Literal:
        values = typing.get_args(tp)
        if not all(isinstance(v, _SCALARS) for v in values):
            return None
        return tp, default, _same
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = tuple(m.value for m in tp)
        if not all(isinstance(v, _SCALARS) for v in values):
            return None
        enum_cls = tp
        return (
            Literal[values],  # type: ignore[valid-type]
            default.value if isinstance(default, enum.Enum) else default,
            lambda v: enum_cls(v) if v is not None else None,
        )
    seq_origin = origin or (tp if tp in (list, tuple) else None)
    if seq_origin in (list, tuple, Sequence, typing.Sequence) or (
        isinstance(seq_origin, type) and issubclass(seq_origin, (list, tuple))
    ):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        item: Any = args[0] if len(args) == 1 and args[0] in _SCALARS else Any
        member: Callable[[Any], Any] = _same
        if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], enum.Enum):
            item, member = Literal[tuple(m.value for m in args[0])], args[0]  # type: ignore[misc]
        elif len(args) == 1 and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            item_cls = args[0]
            item, member = dict[str, Any], lambda x: item_cls(**x) if isinstance(x, dict) else x
        as_tuple = isinstance(default, tuple) or seq_origin is tuple

        def convert(v: Any) -> Any:
            if v is None:
                return None
            items = [member(x) for x in v]
            return tuple(items) if as_tuple else items

        return list[item], json_form(default), convert
    if tp is dict or origin is dict or origin is Mapping:
        return dict[str, Any], default, _same
    return None


def _json_able(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def params_model(
    name: str,
    knobs: Sequence[Knob],
    *,
    doc: str,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> type[SourceParams]:
    """A :class:`Params` subclass with one field per knob (plus ``level``).

    ``check`` receives the source kwargs of every validated value (see :func:`source_kwargs`) and
    raises ``ValueError`` or ``AssertionError`` when the source itself rejects the combination (a
    config's own ``validate()``); the message becomes part of the InvalidParamsError.
    """
    fields: dict[str, Any] = {
        k.name: (k.annotation, Field(k.default, description=k.description, ge=k.ge, le=k.le)) for k in knobs
    }
    validators: dict[str, Any] = {}
    if check is not None:
        by_name = {k.name: k for k in knobs}

        def _source_accepts(self: SourceParams) -> SourceParams:
            try:
                check(source_kwargs(self, by_name.values()))
            except (AssertionError, ValueError, TypeError) as exc:
                raise ValueError(f"the source rejects these values: {exc or type(exc).__name__}") from None
            return self

        validators["_source_accepts"] = model_validator(mode="after")(_source_accepts)
    model = create_model(name, __base__=SourceParams, __validators__=validators, **fields)
    model.__doc__ = doc
    return model


def source_kwargs(params: Params, knobs: Sequence[Knob] | typing.Iterable[Knob]) -> dict[str, Any]:
    """The source's keyword arguments for validated params (enum members, tuples restored)."""
    values = params.model_dump(mode="python")
    return {k.name: k.to_source(values[k.name]) for k in knobs if k.name in values}


def json_form(value: Any) -> Any:
    """A source value in the form params hold (enum -> value, tuple -> list), recursively for lists."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_form(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: json_form(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [json_form(v) for v in value]
    return value


def explain(exc: ValidationError) -> str:
    """A validation error on one line: field errors as ``key = value: expected``, whole-model ones by message."""
    whole = [e["msg"].removeprefix("Value error, ") for e in exc.errors() if not e["loc"]]
    if not whole:
        return format_validation_error(exc)
    return "; ".join(whole)
