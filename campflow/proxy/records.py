"""The proxy's calls in the store (``proxy_calls``), and how an episode's calls become token sequences.

Every call is written before it is answered. Calls arriving together are written together: the first
waiting call starts a write of everything pending (one Arrow batch, the file opened and closed for it,
on a worker thread), and each call is answered once the batch holding it is committed. A call whose
write fails is answered with an error, never unrecorded.

:func:`merge_calls` turns recorded calls into training sequences: a call whose prompt ids begin with an
earlier sequence's ids (its prompts and completions so far) extends it; any other call (a history
rewritten, a summary) starts a sequence of its own. Only calls whose ids are the model's own are used.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


def calls_to_arrow(calls: Sequence[ProxyCall]) -> pa.Table:
    """Calls as an Arrow table in the ``proxy_calls`` column layout."""
    recorded = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for c in calls:
        for name in SCHEMA.names:
            if name == "recorded_at":
                value: Any = recorded
            elif name in ("request", "response", "requested_sampling", "applied_sampling"):
                raw = getattr(c, name)
                value = None if raw is None else to_json(raw)
            else:
                value = getattr(c, name)
            columns[name].append(value)
    return pa.Table.from_pydict(columns, schema=SCHEMA)


class CallLog:
    """Writes calls to a store in batches; :meth:`record` returns once the call is committed.

    Args:
        store: the workspace's :class:`~campflow.storage.store.Store` (the process that owns it).
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self._pending: list[tuple[ProxyCall, asyncio.Future]] = []
        self._writing: asyncio.Task | None = None
        self.batches = 0

    async def record(self, call: ProxyCall) -> None:
        """Write ``call`` (with whatever else is waiting) and return when it is in the store.

        Raises:
            StoreError: the write failed; the call is not recorded.
        """
        future = asyncio.get_running_loop().create_future()
        self._pending.append((call, future))
        if self._writing is None or self._writing.done():
            self._writing = asyncio.create_task(self._drain())
        await asyncio.shield(future)

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await asyncio.to_thread(
                    self.store.insert, TABLE, calls_to_arrow([c for c, _ in batch]), on_conflict="error"
                )
                self.batches += 1
            except Exception as exc:  # noqa: BLE001  (every waiting call hears about it)
                for _, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            for _, f in batch:
                if not f.done():
                    f.set_result(None)

    async def aclose(self) -> None:
        """Wait for the writes in progress."""
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)


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
