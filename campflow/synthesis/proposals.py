"""What synthesizers read and write: a cluster's context in, proposed params out.

A :class:`Synthesizer` gets a :class:`ClusterContext` (the cluster's label and traits, its failing
instances' params, a few exemplar episodes, and where its failures left the oracle's path: the
divergences' kind, the state and both calls) and returns :class:`Proposal` objects: params as proposed,
not yet trusted. :mod:`campflow.synthesis.validate` decides which become variants.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from campflow.serialization import canonical_json
from campflow.storage.store import Store
from campflow.synthesis.clustering import Cluster, load_clusters


@dataclass(frozen=True)
class Proposal:
    """One proposed variant of a bootcamp, as a synthesizer produced it.

    Attributes:
        bootcamp: the bootcamp the params are for.
        cluster_id: the cluster the proposal targets (None for proposals made outside a cluster).
        synthesizer: ``llm``, ``mutate``, ...
        params: the proposed params object as read (a dict when well formed; anything else is rejected).
        rationale: why the synthesizer thinks it targets the weakness.
        parent_instance_ids: the failing instances it was derived from.
        unreadable: why nothing could be read (``invalid_json: ...``), with ``raw`` the text; else None.
    """

    bootcamp: str
    cluster_id: str | None
    synthesizer: str
    params: Any = None
    rationale: str | None = None
    parent_instance_ids: tuple[str, ...] = ()
    unreadable: str | None = None
    raw: str | None = None

    @property
    def variant_id(self) -> str:
        """Content hash of (bootcamp, cluster, params as proposed): the same proposal, the same id."""
        body = self.raw if self.unreadable else canonical_json(self.params)
        payload = canonical_json([self.bootcamp, self.cluster_id, body])
        return hashlib.sha256(payload.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Exemplar:
    """One failed episode shown to a synthesizer."""

    episode_id: str
    instance_id: str
    category: str
    params: dict[str, Any]
    transcript: list[dict[str, Any]]


@dataclass(frozen=True)
class Parent:
    """A failing instance of the cluster: its params and how many of the cluster's failures it had."""

    instance_id: str
    params: dict[str, Any]
    failures: int
    seed: int | None = None


@dataclass(frozen=True)
class Divergence:
    """Where one of the cluster's failures left the oracle's path (a row of ``divergences``).

    Attributes:
        kind: ``operator_flipped``, ``argument:path:collateral``, ...
        turn: the diverging call's turn, from 0.
        model_action, oracle_action: ``{"tool": ..., "arguments": {...}}`` (the model's None for a turn
            without a call).
        state: the transcript up to the diverging call (what the model had seen; empty unless transcripts
            were loaded).
    """

    episode_id: str
    instance_id: str
    kind: str
    turn: int | None
    model_action: dict[str, Any] | None
    oracle_action: dict[str, Any] | None
    state: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ClusterContext:
    """Everything a synthesizer may read about one cluster."""

    cluster: Cluster
    parents: list[Parent] = field(default_factory=list)
    exemplars: list[Exemplar] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)  # of the cluster's commonest kind first

    @property
    def bootcamp(self) -> str:
        """The cluster's bootcamp."""
        return self.cluster.bootcamp

    @property
    def cluster_id(self) -> str:
        """The cluster's id."""
        return self.cluster.cluster_id


class Synthesizer(ABC):
    """Proposes params aimed at a cluster's weakness. Implementations never validate; they propose."""

    #: recorded in ``variants.synthesizer``
    name: str = "synthesizer"
    #: whether :meth:`propose` reads exemplar transcripts (loading them costs a read of the episodes)
    needs_transcripts: bool = False

    @abstractmethod
    def propose(self, context: ClusterContext, n: int) -> list[Proposal]:
        """About ``n`` proposals for ``context``'s cluster (unreadable replies count as proposals too)."""

    def close(self) -> None:  # noqa: B027 -- optional: most synthesizers hold nothing to release
        """Release connections; called once when a synthesis run is done."""


def load_contexts(
    store: Store,
    run_id: str,
    *,
    bootcamps: Sequence[str] | None = None,
    min_size: int = 1,
    with_transcripts: bool = False,
) -> list[ClusterContext]:
    """The contexts of ``run_id``'s current clusters with at least ``min_size`` failures."""
    clusters = [c for c in load_clusters(store, run_id, bootcamps) if c.size >= min_size]
    if not clusters:
        return []
    ids = [c.cluster_id for c in clusters]
    marks = ", ".join("?" for _ in ids)
    parents: dict[str, list[Parent]] = {cid: [] for cid in ids}
    for r in store.query(
        f"""SELECT f.cluster_id, f.instance_id, any_value(i.params) AS params, any_value(i.seed) AS seed,
                   count(*) AS failures
            FROM failures f JOIN instances i USING (instance_id)
            WHERE f.run_id = ? AND f.cluster_id IN ({marks})
            GROUP BY f.cluster_id, f.instance_id ORDER BY failures DESC, f.instance_id""",
        [run_id, *ids],
    ):
        parents[r["cluster_id"]].append(Parent(r["instance_id"], orjson.loads(r["params"]), r["failures"], r["seed"]))
    divergences = _load_divergences(store, run_id, clusters, with_transcripts)
    exemplars: dict[str, list[Exemplar]] = {cid: [] for cid in ids}
    if with_transcripts:
        wanted = {e: c.cluster_id for c in clusters for e in c.exemplar_episode_ids}
        rows = (
            store.query(
                f"""SELECT e.episode_id, e.instance_id, e.transcript, f.category, i.params
                FROM episodes e JOIN failures f USING (episode_id) LEFT JOIN instances i ON i.instance_id = e.instance_id
                WHERE e.run_id = ? AND e.episode_id IN ({", ".join("?" for _ in wanted)})""",
                [run_id, *wanted],
            )
            if wanted
            else []
        )
        by_id = {r["episode_id"]: r for r in rows}
        for c in clusters:
            for eid in c.exemplar_episode_ids:
                r = by_id.get(eid)
                if r is not None:
                    exemplars[c.cluster_id].append(
                        Exemplar(
                            eid,
                            r["instance_id"],
                            r["category"],
                            orjson.loads(r["params"] or "{}"),
                            orjson.loads(r["transcript"]),
                        )
                    )
    return [
        ClusterContext(c, parents[c.cluster_id], exemplars[c.cluster_id], divergences[c.cluster_id]) for c in clusters
    ]


def _action(tool: str | None, arguments: str | None) -> dict[str, Any] | None:
    return None if tool is None else {"tool": tool, "arguments": orjson.loads(arguments or "{}")}


def _load_divergences(
    store: Store, run_id: str, clusters: Sequence[Cluster], with_transcripts: bool
) -> dict[str, list[Divergence]]:
    """Each cluster's divergences, its commonest kind first and the exemplars first within a kind; with
    the transcript up to the diverging call for the first few when ``with_transcripts``."""
    ids = [c.cluster_id for c in clusters]
    out: dict[str, list[Divergence]] = {cid: [] for cid in ids}
    rows = store.query(
        f"""SELECT f.cluster_id, d.episode_id, d.instance_id, d.kind, d.turn, d.model_tool,
                   d.model_arguments, d.oracle_tool, d.oracle_arguments
            FROM divergences d JOIN failures f ON f.episode_id = d.episode_id AND f.run_id = d.run_id
            WHERE d.run_id = ? AND d.kind IS NOT NULL AND f.cluster_id IN ({", ".join("?" for _ in ids)})
            ORDER BY d.episode_id""",
        [run_id, *ids],
    )
    by_cluster: dict[str, list[dict[str, Any]]] = {cid: [] for cid in ids}
    for r in rows:
        by_cluster[r["cluster_id"]].append(r)
    wanted: dict[str, dict[str, Any]] = {}
    for c in clusters:
        found = by_cluster[c.cluster_id]
        counts: dict[str, int] = {}
        for r in found:
            counts[r["kind"]] = counts.get(r["kind"], 0) + 1
        first = {e: i for i, e in enumerate(c.exemplar_episode_ids)}
        found.sort(key=lambda r: (-counts[r["kind"]], r["kind"], first.get(r["episode_id"], len(first))))
        by_cluster[c.cluster_id] = found
        if with_transcripts:
            wanted.update({r["episode_id"]: r for r in found[:3]})
    states: dict[str, list[dict[str, Any]]] = {}
    if wanted:
        for r in store.query(
            f"SELECT episode_id, transcript FROM episodes WHERE run_id = ? AND episode_id IN "
            f"({', '.join('?' for _ in wanted)})",
            [run_id, *wanted],
        ):
            d = wanted[r["episode_id"]]
            states[r["episode_id"]] = _state_before(orjson.loads(r["transcript"]), d["turn"])
    for cid, found in by_cluster.items():
        out[cid] = [
            Divergence(
                r["episode_id"],
                r["instance_id"],
                r["kind"],
                r["turn"],
                _action(r["model_tool"], r["model_arguments"]),
                _action(r["oracle_tool"], r["oracle_arguments"]),
                states.get(r["episode_id"], []),
            )
            for r in found
        ]
    return out


def _state_before(transcript: list[dict[str, Any]], turn: int | None) -> list[dict[str, Any]]:
    """The messages before assistant turn ``turn`` (the world as the model saw it when it diverged)."""
    if turn is None:
        return transcript
    seen = -1
    for at, message in enumerate(transcript):
        if message.get("role") == "assistant":
            seen += 1
            if seen == turn:
                return transcript[:at]
    return transcript
