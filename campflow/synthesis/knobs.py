"""Knobs: the fields of a bootcamp's params model, seen as axes to measure, cluster and perturb.

Everything synthesis knows about a bootcamp's params comes from its pydantic model's JSON schema, so
mining, clustering, traits and mutation work for every registered bootcamp without per-bootcamp code.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from campflow.bootcamps.base import Params
from campflow.serialization import canonical_json

NUMERIC_KINDS = ("int", "float", "bool")


@dataclass(frozen=True)
class Knob:
    """One field of a params model.

    Attributes:
        name: the field name.
        kind: ``int``, ``float``, ``bool``, ``choice`` (an enum or Literal: ``choices`` lists the values)
            or ``other`` (free strings, lists, objects: compared by their JSON text).
        lo, hi: inclusive bounds from the schema (``ge``/``le``; ``gt``/``lt`` are nudged inside), or None.
        choices: the allowed values of a ``choice`` knob.
        default: the field's default, if the schema gives one.
    """

    name: str
    kind: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[Any, ...] = ()
    default: Any = None

    @property
    def numeric(self) -> bool:
        """Whether values are numbers (ints, floats and bools as 0/1)."""
        return self.kind in NUMERIC_KINDS

    def number(self, value: Any) -> float:
        """``value`` as a float for a numeric knob; NaN when missing or not a number."""
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, int | float) and math.isfinite(value):
            return float(value)
        return math.nan

    def token(self, value: Any) -> str:
        """``value`` as a categorical token (``name=value``), for non-numeric knobs."""
        text = value if isinstance(value, str) else canonical_json(value)
        return f"{self.name}={text}"

    def category(self, value: Any) -> str:
        """``value`` as a hashable label (its JSON text unless it is a string)."""
        return value if isinstance(value, str) else canonical_json(value)


@functools.cache
def knobs_of(params_model: type[Params]) -> tuple[Knob, ...]:
    """The knobs of ``params_model``, in field order."""
    schema = params_model.model_json_schema()
    defs = schema.get("$defs", {})
    knobs = []
    for name, prop in schema.get("properties", {}).items():
        knobs.append(_knob(name, _resolve(prop, defs)))
    return tuple(knobs)


def _resolve(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Follow ``$ref`` and take the non-null branch of ``anyOf`` (an Optional field)."""
    out = dict(prop)
    if "$ref" in out:
        out = {**defs.get(out.pop("$ref").split("/")[-1], {}), **out}
    if "anyOf" in out:
        branches = [_resolve(b, defs) for b in out.pop("anyOf") if b.get("type") != "null"]
        if len(branches) == 1:
            out = {**branches[0], **out}
    if "allOf" in out and len(out["allOf"]) == 1:
        out = {**_resolve(out.pop("allOf")[0], defs), **out}
    return out


def _knob(name: str, prop: Mapping[str, Any]) -> Knob:
    default = prop.get("default")
    if "enum" in prop or "const" in prop:
        return Knob(name, "choice", choices=tuple(prop.get("enum", [prop.get("const")])), default=default)
    kind = {"integer": "int", "number": "float", "boolean": "bool"}.get(prop.get("type", ""), "other")
    if kind == "bool":
        return Knob(name, "bool", 0.0, 1.0, default=default)
    if kind in ("int", "float"):
        step = 1.0 if kind == "int" else 1e-9
        lo = prop.get("minimum", prop.get("exclusiveMinimum"))
        hi = prop.get("maximum", prop.get("exclusiveMaximum"))
        if lo is not None and "minimum" not in prop:
            lo += step
        if hi is not None and "maximum" not in prop:
            hi -= step
        return Knob(name, kind, None if lo is None else float(lo), None if hi is None else float(hi), default=default)
    return Knob(name, "other", default=default)
