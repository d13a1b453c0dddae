"""The proxy's calls in the store (``proxy_calls``), and how an episode's calls become token sequences.

Every call is on disk before it is answered: appended to the proxy's spool (:mod:`campflow.proxy.spool`, one
JSON line, fsync'd; calls arriving together share one write) in a folder beside the store. A background copy
moves the spool into ``proxy_calls`` in batches (one Arrow batch a transaction, each call once by its id), and
:meth:`CallLog.flush` waits for it before anything reads an episode's calls. Opening the store for every
call cost more than the tiny model's generation (``benchmarks/bench_proxy.py``); an fsync costs a
millisecond. A call whose spool write fails is answered with an error, never unrecorded; a spool a killed
process left is copied in by the next proxy on that store.

:func:`merge_calls` turns recorded calls into training sequences: a call whose prompt ids begin with an
earlier sequence's ids (its prompts and completions so far) extends it; any other call (a history
rewritten, a summary) starts a sequence of its own. Only calls whose ids are the model's own are used.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from campflow.serialization import to_json

TABLE = "proxy_calls"


@dataclass(slots=True)
class ProxyCall:
    """One call through the proxy, as the store records it (columns of ``proxy_calls``)."""

    call_id: str
    episode_id: str
    seq: int  # order of arrival within the episode
    backend: str  # local, vllm, endpoint
    model_id: str  # the policy that answered (or would have)
    status: int  # the HTTP status answered
    started_at: dt.datetime
    request: Any = None  # the body as sent (a dict), or {"unparsed": text} when it was not JSON
    model: str | None = None  # the model the request named
    stream: bool = False
    retry_of: str | None = None  # the earlier call this one repeats (same body, same episode)
    attempt: int | None = None  # the client's own retry count (x-stainless-retry-count), if it sent one
    response: Any = None  # the reply as a non-streamed chat completion, or the error body
    error_code: str | None = None
    error_param: str | None = None
    error: str | None = None
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    trainable: bool = False  # the ids are the ones the model saw and sampled
    continued_from: str | None = None  # the call whose prompt and completion ids begin this prompt
    requested_sampling: dict[str, Any] = field(default_factory=dict)
    applied_sampling: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0


SCHEMA = pa.schema(
    [
        ("call_id", pa.string()),
        ("episode_id", pa.string()),
        ("seq", pa.int32()),
        ("retry_of", pa.string()),
        ("attempt", pa.int32()),
        ("backend", pa.string()),
        ("model", pa.string()),
        ("model_id", pa.string()),
        ("stream", pa.bool_()),
        ("status", pa.int32()),
        ("error_code", pa.string()),
        ("error_param", pa.string()),
        ("error", pa.string()),
        ("request", pa.string()),
        ("response", pa.string()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("completion_ids", pa.list_(pa.int32())),
        ("logprobs", pa.list_(pa.float64())),
        ("trainable", pa.bool_()),
        ("continued_from", pa.string()),
        ("requested_sampling", pa.string()),
        ("applied_sampling", pa.string()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        ("latency_s", pa.float64()),
        ("started_at", pa.timestamp("us")),
        ("recorded_at", pa.timestamp("us")),
    ]
)


_JSON_COLUMNS = ("request", "response", "requested_sampling", "applied_sampling")


def call_row(call: ProxyCall) -> dict[str, Any]:
    """A call as a ``proxy_calls`` row without ``recorded_at`` (its JSON columns as text)."""
    row: dict[str, Any] = {}
    for name in SCHEMA.names:
        if name == "recorded_at":
            continue
        value = getattr(call, name)
        row[name] = None if value is None else to_json(value) if name in _JSON_COLUMNS else value
    return row


def calls_to_arrow(calls: Sequence[ProxyCall]) -> pa.Table:
    """Calls as an Arrow table in the ``proxy_calls`` column layout."""
    recorded = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    return pa.Table.from_pylist([{**call_row(c), "recorded_at": recorded} for c in calls], schema=SCHEMA)


SPOOLS = "proxy-spool"  # beside the store: one folder per running proxy
COPY_INTERVAL_S = 1.0


class CallLog:
    """Records calls in a store through a spool: :meth:`record` returns once the call is on disk.

    Args:
        store: the workspace's :class:`~campflow.storage.store.Store` (the process that owns it).
    """

    def __init__(self, store: Any) -> None:
        import uuid

        from campflow.proxy.spool import Spool, SpoolWriter

        self.store = store
        root = Path(store.path).parent / SPOOLS
        self.spool = Spool(root / uuid.uuid4().hex[:12])
        self._held = _hold(self.spool.folder)
        # a copy opens the store (tens of ms of CPU): once a second, and whenever a reader flushes, not per call
        self.writer = SpoolWriter(self.spool, self._write, interval_s=COPY_INTERVAL_S)
        self._leftovers = [p for p in root.iterdir() if p.is_dir() and p != self.spool.folder]
        self._copying = False
        self.batches = 0

    async def record(self, call: ProxyCall) -> None:
        """Append ``call`` to the spool (with whatever else is waiting); return once it is on disk."""
        if not self._copying:
            self._copying = True
            for folder in self._leftovers:  # a killed proxy's calls, before this one's
                await _copy_leftover(folder, self._write)
            self.writer.start()
        await self.spool.append(call_row(call))

    def _write(self, rows: Sequence[dict[str, Any]]) -> None:
        table = spooled_rows_to_arrow(rows)
        with self.store.transaction(_cf_calls=table) as con:
            con.execute(f"INSERT INTO {TABLE} BY NAME SELECT * FROM _cf_calls ANTI JOIN {TABLE} USING (call_id)")
        self.batches += 1

    async def flush(self) -> None:
        """Wait until the store holds every call recorded so far.

        Raises:
            StoreError: the store cannot be written now (the calls stay in the spool).
        """
        from campflow.errors import StoreError

        if not await self.writer.flush():
            raise StoreError(f"the proxy's calls wait in {self.spool.path}: {self.writer.last_error}")

    async def aclose(self) -> None:
        """Copy what the spool holds into the store and release it (a spool the store refused stays)."""
        await self.writer.aclose(final_flush=True)
        if self.spool.pending_bytes() == 0:
            _release(self._held, self.spool.folder)


def spooled_rows_to_arrow(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Spooled ``proxy_calls`` rows (JSON: times as ISO text) as an Arrow table, stamped as recorded now."""
    recorded = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    out = []
    for row in rows:
        started = row.get("started_at")
        out.append(
            {**row, "started_at": dt.datetime.fromisoformat(started) if started else None, "recorded_at": recorded}
        )
    return pa.Table.from_pylist(out, schema=SCHEMA)


def _hold(folder: Path) -> Any:
    """An exclusive lock on ``folder`` while its proxy lives (a spool without one was left by a dead process)."""
    import fcntl

    handle = open(folder / ".lock", "w")  # noqa: SIM115  (held until the proxy closes)
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return handle


def _release(handle: Any, folder: Path) -> None:
    import shutil

    handle.close()
    shutil.rmtree(folder, ignore_errors=True)


async def _copy_leftover(folder: Path, write: Any) -> None:
    """Copy a dead proxy's spool into the store and remove it; a live proxy's (locked) is left alone."""
    from campflow.proxy.spool import Spool, SpoolWriter

    try:
        handle = _hold(folder)
    except OSError:
        return
    spool = Spool(folder)
    if spool.pending_bytes() == 0 or await SpoolWriter(spool, write).flush():
        _release(handle, folder)
    else:
        handle.close()


# -- from calls to training sequences ----------------------------------------------------------------------


@dataclass(slots=True)
class TokenSequence:
    """One training sequence of an episode: the ids, which of them the model sampled, and their logprobs.

    Attributes:
        episode_id: the episode.
        call_ids: the calls merged into it, in order.
        ids: prompt and completion ids of every merged call, each token once.
        generated: per id, whether the model sampled it (1) or it came from the prompt (0).
        logprobs: per id, the sampled token's logprob (0.0 for prompt ids).
    """

    episode_id: str
    call_ids: list[str]
    ids: list[int]
    generated: list[int]
    logprobs: list[float]


def merge_calls(calls: Iterable[Mapping[str, Any]]) -> list[TokenSequence]:
    """The token sequences of recorded calls (rows of ``proxy_calls``, any episodes, any order).

    Only answered (status 200), trainable calls with a non-empty completion that no later call repeats
    (``retry_of``: the agent retried, so it went on with the repeat's reply) are used. Within an episode,
    in ``seq`` order, a call whose prompt ids begin with a sequence's ids so far extends the longest such
    sequence (the ids between are prompt ids: tool results, the template's turn headers); otherwise it
    starts a new one. Every sequence returned holds at least one sampled id.
    """
    calls = list(calls)
    # a call a later one repeats (the client retried: a timeout, a lost stream) was not what the agent went on with
    repeated = {c.get("retry_of") for c in calls}
    usable = sorted(
        (
            c
            for c in calls
            if c.get("status") == 200
            and c.get("trainable")
            and c.get("completion_ids")
            and c.get("prompt_ids")
            and c["call_id"] not in repeated
        ),
        key=lambda c: (c["episode_id"], c["seq"]),
    )
    out: list[TokenSequence] = []
    by_episode: dict[str, list[TokenSequence]] = {}
    for c in usable:
        prompt, completion = list(c["prompt_ids"]), list(c["completion_ids"])
        logprobs = [float(x) for x in c["logprobs"]]
        open_ = by_episode.setdefault(c["episode_id"], [])
        best = max(
            (s for s in open_ if len(s.ids) <= len(prompt) and prompt[: len(s.ids)] == s.ids),
            key=lambda s: len(s.ids),
            default=None,
        )
        if best is None:
            best = TokenSequence(c["episode_id"], [], [], [], [])
            open_.append(best)
            out.append(best)
        extra = prompt[len(best.ids) :]
        best.call_ids.append(c["call_id"])
        best.ids += extra + completion
        best.generated += [0] * len(extra) + [1] * len(completion)
        best.logprobs += [0.0] * len(extra) + logprobs
    return out


def read_calls(store: Any, episode_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Recorded calls as dicts (all, or those of ``episode_ids``), in episode and arrival order."""
    sql = f"SELECT * FROM {TABLE}"
    params: list[Any] = []
    if episode_ids is not None:
        sql += " WHERE list_contains(?, episode_id)"
        params.append(list(episode_ids))
    return store.query(sql + " ORDER BY episode_id, seq", params)
