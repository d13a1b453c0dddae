"""Function-calling rows: loading, checking and turning JSON-schema tools into argument models.

A row is one task: the conversation so far, the tools on offer and the calls a correct assistant
makes. In a JSONL file (one row per line) or a Hugging Face dataset saved with
``Dataset.save_to_disk`` (fields may hold JSON text, as Arrow cannot store free-form schemas)::

    {"messages": [{"role": "user", "content": "Weather in Paris and Rome?"}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "description": "...",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}}],
     "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "get_weather", "arguments": {"city": "Rome"}}],
     "order_sensitive": false}

Tools may also be bare ``{"name", "description", "parameters"}`` objects, and expected calls may be
OpenAI ``tool_calls`` entries (``{"function": {"name", "arguments": "<json>"}}``). ``order_sensitive``
defaults to false. Every row is checked when the source is loaded; the first bad one is reported
with its line (or row) number and what is wrong, as one ImportSourceError. A file must be UTF-8, and
a row may nest at most 64 levels deep (:data:`MAX_DEPTH`).

Argument models: each tool's JSON schema becomes a pydantic model with one field per property
(``string`` -> str, ``integer`` -> int, ``number`` -> float, ``boolean`` -> bool, ``array`` ->
list, ``object`` -> dict, ``enum`` -> Literal, type lists -> unions; the Python-flavoured names some
benchmarks use -- ``dict``, ``float``, ``tuple``, ``any`` -- too). Required properties are required,
optional ones default to their schema ``default`` or None. pydantic rather than a JSON-schema
validator, because the engine already validates every call through ``Tool.args_model``, and because
validating expected and made calls through the same model normalizes both (``5`` and ``5.0`` for a
number, an omitted optional and its default) so matching compares meaning, not spelling. Nested
object schemas are checked as objects, not property by property.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import ConfigDict, Field, ValidationError, create_model

from campflow.bootcamps.base import ToolArgs, format_validation_error
from campflow.errors import ImportSourceError

REQUIRED = ("messages", "tools", "expected_calls")
# How deep a row's JSON may nest: real rows nest a handful of levels, and the readers downstream
# (pydantic's serializer, orjson for transcripts) stop at a few hundred.
MAX_DEPTH = 64
_TYPES: dict[str, Any] = {
    "string": str,
    "str": str,
    "integer": int,
    "int": int,
    "number": float,
    "float": float,
    "boolean": bool,
    "bool": bool,
    "object": dict[str, Any],
    "dict": dict[str, Any],
    "array": list,
    "list": list,
    "tuple": list,
    "null": type(None),
    "any": Any,
}


class RowArgs(ToolArgs):
    """Base of argument models built from a row's JSON schema (fields carry the property names as aliases)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False)


@dataclass(frozen=True)
class Row:
    """One checked row: tools as ``{"name", "description", "parameters"}``; each expected call as
    ``{"name", "arguments", "given"}``: arguments normalized for matching, and as the row gave them."""

    where: str  # "line 7" in a JSONL file, "row 6" in a dataset: for messages
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    expected_calls: list[dict[str, Any]]
    order_sensitive: bool


def load_rows(source: str, split: str | None = None) -> tuple[list[Row], str]:
    """Every row of a JSONL file or a saved Hugging Face dataset, checked; and a content hash of the source.

    Raises:
        ImportSourceError: a missing source, a line that is not JSON, or a row missing a field or
            naming a tool it does not offer; the message names the line (or row) and the problem.
    """
    path = Path(source)
    if not path.exists():
        raise ImportSourceError(
            f"function-calling source {source} does not exist (expected a .jsonl file or a "
            "folder written by datasets' save_to_disk)"
        )
    if path.is_dir():
        raw, digest, where = _dataset_rows(path, split)
    else:
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()[:12]
        raw, where = _jsonl_rows(path, data), "line"
    rows = [check_row(obj, number, where, path) for number, obj in raw]
    if not rows:
        raise ImportSourceError(f"function-calling source {source} holds no rows")
    return rows, digest


def _jsonl_rows(path: Path, data: bytes) -> list[tuple[int, Any]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ImportSourceError(
            f"{path}, line {line}: not UTF-8 text (byte {data[exc.start : exc.start + 1]!r}); "
            "expected JSON lines in UTF-8"
        ) from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        out.append((number, _parse_json(line, f"{path}, line {number}: not valid JSON")))
    return out


def _parse_json(text: str, what: str) -> Any:
    """``json.loads``, with every way it refuses text as one ImportSourceError starting with ``what``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportSourceError(f"{what} ({exc.msg})") from None
    except RecursionError:
        raise ImportSourceError(f"{what} (nested too deeply)") from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit conversion limit
        raise ImportSourceError(f"{what} ({str(exc).split(';')[0]})") from None


def _dataset_rows(path: Path, split: str | None) -> tuple[list[tuple[int, Any]], str, str]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise ImportSourceError(f"{path} is not a dataset saved with save_to_disk: {exc}") from None
    if isinstance(loaded, datasets.DatasetDict):
        names = list(loaded)
        chosen = split or ("train" if "train" in names else names[0] if len(names) == 1 else None)
        if chosen not in loaded:
            raise ImportSourceError(f"{path} has splits {', '.join(names)}; choose one with --set split=NAME")
        loaded = loaded[chosen]
    return list(enumerate(loaded)), str(loaded._fingerprint)[:12], "row"


def check_row(obj: Any, number: int, where: str, path: Path) -> Row:
    """A checked :class:`Row` from one parsed row (see the module docstring for the format)."""
    at = f"{path}, {where} {number}"
    if not isinstance(obj, dict):
        raise ImportSourceError(f"{at}: expected a JSON object with fields {', '.join(REQUIRED)}")
    for key in REQUIRED:
        if obj.get(key) is None:
            raise ImportSourceError(f"{at}: missing field {key!r} (each row needs {', '.join(REQUIRED)})")
    _check_depth(obj, at)
    messages, tools, calls = (_check_depth(_json_field(obj[k], k, at), at) for k in REQUIRED)
    if not (isinstance(messages, list) and messages and all(isinstance(m, dict) and "role" in m for m in messages)):
        raise ImportSourceError(f"{at}: 'messages' must be a non-empty list of {{role, content}} messages")
    if not (isinstance(tools, list) and tools):
        raise ImportSourceError(f"{at}: 'tools' must be a non-empty list of function schemas")
    if not isinstance(calls, list):
        raise ImportSourceError(f"{at}: 'expected_calls' must be a list of {{name, arguments}} calls")
    specs = [_tool_spec(t, at) for t in tools]
    by_name = {t["name"]: t for t in specs}
    if len(by_name) != len(specs):
        raise ImportSourceError(f"{at}: two tools share a name")
    checked = [_expected_call(c, by_name, at) for c in calls]
    return Row(
        f"{where} {number}", [dict(m) for m in messages], specs, checked, bool(obj.get("order_sensitive", False))
    )


def _check_depth(value: Any, at: str) -> Any:
    """``value`` if its lists and objects nest at most :data:`MAX_DEPTH` levels (counted without
    recursion: the point is refusing what would overflow a recursive reader later)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise ImportSourceError(
                    f"{at}: nested more than {MAX_DEPTH} levels deep; rows, schemas and "
                    "arguments may nest at most that far"
                )
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return value


def _json_field(value: Any, key: str, at: str) -> Any:
    if isinstance(value, str):
        return _parse_json(value, f"{at}: field {key!r} is text but not JSON")
    return value


def _tool_spec(tool: Any, at: str) -> dict[str, Any]:
    fn = tool.get("function", tool) if isinstance(tool, dict) else None
    if not (isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"]):
        raise ImportSourceError(
            f"{at}: every tool needs a 'name' (as {{name, parameters}} or {{type: function, function: {{...}}}})"
        )
    parameters = fn.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise ImportSourceError(f"{at}: tool {fn['name']!r} has parameters that are not a JSON schema object")
    properties, required = parameters.get("properties") or {}, parameters.get("required") or []
    if not isinstance(properties, dict):
        raise ImportSourceError(
            f"{at}: tool {fn['name']!r} has 'properties' that are a {type(properties).__name__}; "
            "expected an object mapping each parameter name to its schema"
        )
    if not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        raise ImportSourceError(f"{at}: tool {fn['name']!r} has 'required' that is not a list of parameter names")
    spec = {"name": fn["name"], "description": str(fn.get("description") or ""), "parameters": parameters}
    try:
        args_model(spec)
    except (TypeError, ValueError) as exc:
        raise ImportSourceError(f"{at}: tool {fn['name']!r} has a schema campflow cannot read: {exc}") from None
    return spec


def _expected_call(call: Any, tools: dict[str, dict[str, Any]], at: str) -> dict[str, Any]:
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not (isinstance(fn, dict) and isinstance(fn.get("name"), str)):
        raise ImportSourceError(f"{at}: every expected call needs a 'name'")
    name = fn["name"]
    if name not in tools:
        raise ImportSourceError(f"{at}: expected call {name!r} names no tool of the row; tools: {', '.join(tools)}")
    arguments = _check_depth(_json_field(fn.get("arguments") or {}, "arguments", at), at)
    try:
        normalized = normalize(args_model(tools[name]), arguments)
    except ValidationError as exc:
        raise ImportSourceError(
            f"{at}: expected call {name!r} does not fit its tool's schema: {format_validation_error(exc)}"
        ) from None
    return {"name": name, "arguments": normalized, "given": arguments}


def normalize(model: type[RowArgs], arguments: Any) -> dict[str, Any]:
    """Arguments as the args model reads them, by property name (the form calls are matched in)."""
    return model.model_validate(arguments).model_dump(mode="json", by_alias=True)


_MODELS: dict[str, type[RowArgs]] = {}


def args_model(spec: dict[str, Any]) -> type[RowArgs]:
    """The argument model of a tool spec (cached by schema: rows that share a tool share a model)."""
    key = json.dumps([spec["name"], spec["parameters"]], sort_keys=True)
    model = _MODELS.get(key)
    if model is None:
        params = spec["parameters"]
        properties = params.get("properties") or {}
        required = set(params.get("required") or [])
        fields: dict[str, Any] = {}
        for i, (prop, schema) in enumerate(properties.items()):
            schema = schema if isinstance(schema, dict) else {}
            annotation = _annotation(schema)
            if prop in required:
                fields[f"p{i}"] = (annotation, Field(alias=prop, description=schema.get("description")))
            else:
                fields[f"p{i}"] = (
                    annotation | None if annotation is not Any else Any,
                    Field(schema.get("default"), alias=prop, description=schema.get("description")),
                )
        model = create_model(f"{_identifier(spec['name'])}Args", __base__=RowArgs, **fields)
        _MODELS[key] = model
    return model


def _annotation(schema: dict[str, Any]) -> Any:
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        values = tuple(schema["enum"])
        if all(isinstance(v, str | int | float | bool) or v is None for v in values):
            return Literal[values]  # type: ignore[valid-type]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return Union[tuple(_annotation(s if isinstance(s, dict) else {}) for s in schema[key])]  # noqa: UP007
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        return Union[tuple(_annotation({**schema, "type": k}) for k in kind)]  # noqa: UP007
    if kind is None:
        return Any
    if not isinstance(kind, str) or kind.lower() not in _TYPES:
        raise ValueError(f"unknown JSON schema type {kind!r}")
    mapped = _TYPES[kind.lower()]
    if mapped is list and isinstance(schema.get("items"), dict):
        return list[_annotation(schema["items"])]  # type: ignore[misc]
    return mapped


def _identifier(name: str) -> str:
    text = "".join(c if c.isalnum() else "_" for c in name)
    return text[:1].upper() + text[1:] if text else "Tool"
