"""Failure mining: a run's model failures become categorized, signed and featured rows of ``failures``.

Only model failures are mined (:data:`~campflow.rollout.episode.MODEL_FAILURES`); ``infra_error`` and
``timeout`` episodes say nothing about the model and are never learned from. For each failure:

- the **category** is the termination plus what went wrong. Where the run's ``divergences`` name the
  step that left the oracle's path (:mod:`campflow.synthesis.divergence`, recorded first by
  :func:`~campflow.synthesis.pipeline.analyze_run`), that is its kind (``wrong_answer:operator_flipped``,
  ``wrong_answer:argument:path:collateral``), or ``max_turns:path_right_budget_spent`` where the path
  was right; otherwise the reward layer's ``details.reason`` for ``wrong_answer`` and ``max_turns``
  (``wrong_answer:carry``), the parser's ``error_kind`` of the last invalid call for
  ``invalid_tool_call`` (``invalid_tool_call:missing_argument``), what was wrong with the reply for
  ``format_error`` (``format_error:no_tool_call``);
- the **signature** is the category, the tool called where the episode diverged (else the last one)
  and the ending error text with numbers and quoted names blanked, so failures that look alike share it;
- the **features** are the instance's params, level, turns, call counts, reward, last tool and error,
  and the divergence (kind, turn, both calls).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from campflow.bootcamps import registry
from campflow.bootcamps.base import Tool
from campflow.errors import RunNotFoundError
from campflow.rollout.episode import MODEL_FAILURES, Termination
from campflow.rollout.parsing import TOOL_CALL_OPEN, parse_turn
from campflow.serialization import to_json
from campflow.storage.store import Store
from campflow.synthesis.divergence import PATH_RIGHT_BUDGET_SPENT

FAILURE_TERMINATIONS = tuple(sorted(t.value for t in MODEL_FAILURES))
_MAX_ERROR_CHARS = 300

# The tail of each transcript is pulled out in SQL, so Python never parses whole transcripts (images).
_FAILURE_ROWS_SQL = f"""
    SELECT e.episode_id, e.run_id, e.bootcamp, e.instance_id, e.termination, e.turns, e.tool_calls,
           e.invalid_calls, e.reward, e.level, e.details, e.error,
           list_filter(json_extract_string(e.transcript, '$[*].content'),
                       lambda x: starts_with(x, 'Error:'))[-1] AS last_error,
           list_filter(json_extract(e.transcript, '$[*]'), lambda m: m->>'role' = 'assistant')[-1]
               AS last_assistant,
           i.params, i.seed,
           d.kind AS divergence_kind, d.turn AS divergence_turn, d.reason AS divergence_reason,
           d.model_tool AS divergence_model_tool, d.model_arguments AS divergence_model_arguments,
           d.oracle_tool AS divergence_oracle_tool, d.oracle_arguments AS divergence_oracle_arguments
    FROM episodes e LEFT JOIN instances i USING (instance_id)
         LEFT JOIN divergences d ON d.run_id = e.run_id AND d.episode_id = e.episode_id
    WHERE e.run_id = ? AND e.termination IN ({", ".join(f"'{t}'" for t in FAILURE_TERMINATIONS)})
"""


@dataclass
class Failure:
    """One mined model failure (a row of ``failures``)."""

    episode_id: str
    run_id: str
    bootcamp: str
    instance_id: str
    category: str
    signature: str
    features: dict[str, Any]


@dataclass
class MiningSummary:
    """What mining a run found: failures per bootcamp and per category."""

    run_id: str
    failures: int = 0
    by_bootcamp: Counter[str] = field(default_factory=Counter)
    by_category: Counter[str] = field(default_factory=Counter)


def mine_failures(store: Store, run_id: str, bootcamps: Sequence[str] | None = None) -> MiningSummary:
    """Mine the model failures of ``run_id`` and upsert them into ``failures`` (cluster ids are kept).

    Raises:
        RunNotFoundError: the run has no episodes in the store.
    """
    if not store.scalar("SELECT count(*) FROM episodes WHERE run_id = ?", [run_id]):
        raise RunNotFoundError(
            f"run {run_id!r} has no episodes in the store at {store.path}; `campflow runs` lists the runs"
        )
    sql, params = _FAILURE_ROWS_SQL, [run_id]
    if bootcamps:
        sql += f" AND e.bootcamp IN ({', '.join('?' for _ in bootcamps)})"
        params += list(bootcamps)
    rows = store.query(sql + " ORDER BY e.episode_id", params)
    failures = mine_rows(rows)
    write_failures(store, failures)
    summary = MiningSummary(run_id, len(failures))
    for f in failures:
        summary.by_bootcamp[f.bootcamp] += 1
        summary.by_category[f"{f.bootcamp}/{f.category}"] += 1
    return summary


def mine_rows(rows: Iterable[Mapping[str, Any]]) -> list[Failure]:
    """Failures from episode rows as :data:`_FAILURE_ROWS_SQL` reads them (pure: no store)."""
    tools = _ToolCache()
    out = []
    for r in rows:
        termination = Termination(r["termination"])
        if not termination.is_model_failure:
            continue
        details = _json(r.get("details")) or {}
        last_assistant = _json(r.get("last_assistant")) or {}
        params = _json(r.get("params"))
        reason = failure_reason(
            termination,
            details,
            r.get("error"),
            last_assistant,
            lambda: tools.get(r["bootcamp"], r["instance_id"], params, r.get("seed")),  # noqa: B023 -- called in this iteration
        )
        divergence = _divergence(r)
        reason = divergence_reason(divergence) or reason
        category = f"{termination.value}:{reason}" if reason else termination.value
        last_tool = _last_tool(last_assistant)
        last_error = _error_text(r.get("last_error"))
        # An earlier, recovered-from error says little about why a wrong answer was wrong, so only
        # episodes that ended on an error carry it (the engine's own message) in their signature.
        ending = _error_text(r.get("error")) if termination in _ERROR_ENDS else ""
        # Where the episode left the oracle's path, the tool it called there signs it, not the last one.
        signed_tool = slug(divergence["model_tool"] or "") if divergence and divergence.get("kind") else last_tool
        out.append(
            Failure(
                episode_id=r["episode_id"],
                run_id=r["run_id"],
                bootcamp=r["bootcamp"],
                instance_id=r["instance_id"],
                category=category,
                signature=signature(category, signed_tool, ending),
                features={
                    "params": params if isinstance(params, dict) else {},
                    "level": r.get("level"),
                    "turns": r.get("turns"),
                    "tool_calls": r.get("tool_calls"),
                    "invalid_calls": r.get("invalid_calls"),
                    "reward": r.get("reward"),
                    "termination": termination.value,
                    "reason": reason,
                    "last_tool": last_tool,
                    "last_error": last_error,
                    "divergence": divergence,
                },
            )
        )
    return out


_ERROR_ENDS = (Termination.INVALID_TOOL_CALL, Termination.FORMAT_ERROR, Termination.CONTEXT_OVERFLOW)

# Divergence kinds that only restate what the parser's error kind says more precisely.
_PARSER_KINDS = frozenset({"invalid_call", "no_call"})
BUDGET_SPENT = "path_right_budget_spent"


def _divergence(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The failure's row of ``divergences`` as a feature (None where none was recorded)."""
    if row.get("divergence_kind") is None and row.get("divergence_reason") is None:
        return None
    return {
        "kind": row.get("divergence_kind"),
        "turn": row.get("divergence_turn"),
        "model_tool": row.get("divergence_model_tool"),
        "model_arguments": _json(row.get("divergence_model_arguments")),
        "oracle_tool": row.get("divergence_oracle_tool"),
        "oracle_arguments": _json(row.get("divergence_oracle_arguments")),
        "reason": row.get("divergence_reason"),
    }


def divergence_reason(divergence: Mapping[str, Any] | None) -> str | None:
    """The part of the category the divergence names: its kind (``operator_flipped``,
    ``argument:path:collateral``), or ``path_right_budget_spent`` where the path was right and the turns ran
    out; None where it says nothing the termination's own reason does not (no divergence recorded, an
    invalid call or a turn without one, which the parser names more precisely)."""
    if not divergence:
        return None
    kind = divergence.get("kind")
    if kind:
        return None if kind in _PARSER_KINDS else str(kind).replace("|", "_")
    return BUDGET_SPENT if divergence.get("reason") == PATH_RIGHT_BUDGET_SPENT else None


def failure_reason(
    termination: Termination,
    details: Mapping[str, Any],
    error: str | None,
    last_assistant: Mapping[str, Any],
    tools: Mapping[str, Tool] | Callable[[], Mapping[str, Tool] | None] | None = None,
) -> str:
    """The part of the category after the termination ('' when there is nothing more to say).

    ``tools`` are the instance's tools by name, or a callable that builds them (None when unknown); they
    are only needed for ``invalid_tool_call``, whose last reply is parsed again for the parser's
    ``error_kind``.
    """
    if termination in (Termination.WRONG_ANSWER, Termination.MAX_TURNS):
        return slug(details.get("reason") or "")
    if termination == Termination.INVALID_TOOL_CALL:
        available = tools() if callable(tools) else tools
        return _invalid_call_kind(last_assistant, available) if available is not None else "unknown"
    if termination == Termination.FORMAT_ERROR:
        return _format_error_kind(error or "")
    return ""


def _invalid_call_kind(message: Mapping[str, Any], tools: Mapping[str, Tool]) -> str:
    content = message.get("content") if isinstance(message.get("content"), str) else ""
    parsed = parse_turn(content, message.get("tool_calls"), tools)
    kinds = [c.error_kind for c in parsed.calls if c.error_kind]
    if not kinds and TOOL_CALL_OPEN in content:  # calls without a name are kept only in the text
        kinds = [c.error_kind for c in parse_turn(content, None, tools).calls if c.error_kind]
    return kinds[-1] if kinds else "unknown"


def _format_error_kind(error: str) -> str:
    # The engine writes "Error: <what>. <note>" when the reply had a broken call structure, and only
    # the note when it had none at all.
    if not error.startswith("Error:"):
        return "no_tool_call"
    text = error.lower()
    if "characters" in text:
        return "overlong_reply"
    if "closing" in text:
        return "unclosed_tool_call"
    return "malformed_tool_calls"


def signature(category: str, last_tool: str, last_error: str) -> str:
    """``category|tool|error`` with numbers and quoted names blanked, so alike failures share it."""
    error = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", last_error)
    error = re.sub(r"-?\d+(\.\d+)?", "#", error)
    return f"{category}|{last_tool}|{error[:120]}".rstrip("|")


def slug(text: Any) -> str:
    """A short lowercase identifier: ``Wrong Cell!`` -> ``wrong_cell``."""
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_")[:40]


def _last_tool(message: Mapping[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    fn = calls[-1].get("function") if calls and isinstance(calls[-1], dict) else None
    return slug(fn.get("name") or "") if isinstance(fn, dict) else ""


def _error_text(text: Any) -> str:
    if not isinstance(text, str):
        return ""
    text = text.removeprefix("Error:").strip()
    return " ".join(text.split())[:_MAX_ERROR_CHARS]


def _json(value: Any) -> Any:
    if value is None or isinstance(value, dict | list):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return None


class _ToolCache:
    """The tools of each failing instance, rebuilt from its params and seed once per instance."""

    def __init__(self) -> None:
        self._by_instance: dict[str, dict[str, Tool] | None] = {}

    def get(self, bootcamp: str, instance_id: str, params: Any, seed: Any) -> dict[str, Tool] | None:
        if instance_id not in self._by_instance:
            self._by_instance[instance_id] = self._build(bootcamp, params, seed)
        return self._by_instance[instance_id]

    @staticmethod
    def _build(bootcamp: str, params: Any, seed: Any) -> dict[str, Tool] | None:
        if not isinstance(params, dict) or seed is None:
            return None  # the instance was never recorded; its tools are unknown
        try:
            b = registry.make(bootcamp)
            return {t.name: t for t in b.tools(b.generate(params, int(seed)))}
        except Exception:  # noqa: BLE001  (a bootcamp that changed or vanished: the kind is unknown)
            return None


FAILURE_SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("run_id", pa.string()),
        ("bootcamp", pa.string()),
        ("instance_id", pa.string()),
        ("category", pa.string()),
        ("signature", pa.string()),
        ("features", pa.string()),
    ]
)


def write_failures(store: Store, failures: Sequence[Failure]) -> int:
    """Upsert failures in one Arrow batch; a failure already clustered keeps its cluster id."""
    if not failures:
        return 0
    rows = pa.Table.from_pydict(
        {
            "episode_id": [f.episode_id for f in failures],
            "run_id": [f.run_id for f in failures],
            "bootcamp": [f.bootcamp for f in failures],
            "instance_id": [f.instance_id for f in failures],
            "category": [f.category for f in failures],
            "signature": [f.signature for f in failures],
            "features": [to_json(f.features) for f in failures],
        },
        schema=FAILURE_SCHEMA,
    )
    with store.connection() as con:
        con.register("_campflow_failures", rows)
        try:
            con.execute("""INSERT INTO failures BY NAME SELECT * FROM _campflow_failures
                           ON CONFLICT (episode_id) DO UPDATE SET category = excluded.category,
                               signature = excluded.signature, features = excluded.features""")
        finally:
            con.unregister("_campflow_failures")
    return len(failures)
