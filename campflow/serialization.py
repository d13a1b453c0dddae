"""JSON text for the store's JSON columns (a leaf module: every layer may use it)."""

from __future__ import annotations

import json
from typing import Any

import orjson


def to_json(value: Any) -> str:
    """JSON text of ``value``; values JSON cannot hold become strings rather than failing a batch.

    orjson, because serializing transcripts is most of the cost of writing episodes (the standard
    library's json is ~4x slower, measured in benchmarks/bench_store.py).
    """
    return to_json_bytes(value).decode()


def to_json_bytes(value: Any) -> bytes:
    """:func:`to_json` as UTF-8 bytes (what Arrow columns are built from without another copy)."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # e.g. lone surrogates, which orjson refuses
        return json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "replace")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no spaces and ASCII only: the form that content hashes (instance ids,
    variant ids) are taken over, so it must never change."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def from_json(data: str | bytes) -> Any:
    """Parse JSON text: orjson, or the standard library where orjson refuses valid-but-odd JSON such as
    escaped lone surrogates (``"\\ud800"``), which servers relaying broken model output do send."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
