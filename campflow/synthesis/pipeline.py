"""The synthesis pipeline: mine and cluster a run, synthesize per cluster, validate, record.

:func:`analyze_run` is ``campflow failures``; :func:`synthesize` is ``campflow synthesize``. Both are
idempotent: mining upserts by episode, cluster ids hash their members, variant ids hash their params,
and validated variants are not validated again.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from campflow.agents.base import Policy
from campflow.config import HackerConfig, PolicyConfig, SynthesisConfig
from campflow.errors import RunNotFoundError
from campflow.rollout.engine import RolloutSettings
from campflow.storage.store import Store
from campflow.synthesis.clustering import Cluster, cluster_failures, load_clusters
from campflow.synthesis.divergence_records import record_divergences
from campflow.synthesis.mining import FAILURE_TERMINATIONS, MiningSummary, mine_failures
from campflow.synthesis.proposals import Synthesizer, load_contexts
from campflow.synthesis.validate import ValidationSettings, record_verdicts, validate_proposals


@dataclass
class Analysis:
    """A run's mined failures and their current clusters."""

    run_id: str
    mining: MiningSummary | None
    clusters: list[Cluster]


def resolve_run(store: Store, run_id: str | None = None) -> str:
    """``run_id`` if the store has episodes of it, else (None) the latest run that has episodes.

    Raises:
        RunNotFoundError: no such run, or no run with episodes at all.
    """
    if run_id is not None:
        if not store.scalar("SELECT count(*) FROM episodes WHERE run_id = ?", [run_id]):
            raise RunNotFoundError(
                f"run {run_id!r} has no episodes in the store at {store.path}; `campflow runs` lists the runs"
            )
        return run_id
    latest = store.scalar("""SELECT e.run_id FROM episodes e LEFT JOIN runs r USING (run_id)
                             GROUP BY e.run_id ORDER BY max(coalesce(r.started_at, e.created_at)) DESC LIMIT 1""")
    if latest is None:
        raise RunNotFoundError(f"the store at {store.path} has no episodes yet; run `campflow eval` first")
    return latest


def analyze_run(
    store: Store,
    run_id: str,
    cfg: SynthesisConfig | None = None,
    *,
    bootcamps: Sequence[str] | None = None,
    refresh: bool = False,
) -> Analysis:
    """Mine and cluster ``run_id`` unless that is already done for every one of its model failures."""
    cfg = cfg or SynthesisConfig()
    marks = ", ".join("?" for _ in FAILURE_TERMINATIONS)
    only, names = "", list(bootcamps or [])
    if names:
        only = f" AND bootcamp IN ({', '.join('?' for _ in names)})"
    failed = store.scalar(
        f"SELECT count(*) FROM episodes WHERE run_id = ? AND termination IN ({marks}){only}",
        [run_id, *FAILURE_TERMINATIONS, *names],
    )
    clustered = store.scalar(
        f"SELECT count(*) FROM failures WHERE run_id = ? AND cluster_id IS NOT NULL{only}", [run_id, *names]
    )
    mining = None
    if refresh or failed != clustered:
        # where each failure left every correct path (`divergence_summary`); mining names categories by it
        record_divergences(store, run_id)
        mining = mine_failures(store, run_id, bootcamps)
        cluster_failures(
            store, run_id, max_clusters=cfg.max_clusters, exemplars=cfg.exemplars, seed=cfg.seed, bootcamps=bootcamps
        )
    return Analysis(run_id, mining, load_clusters(store, run_id, bootcamps))


@dataclass
class SynthesisSummary:
    """What one synthesis run proposed, accepted and rejected, overall and per cluster."""

    run_id: str
    source_run_id: str
    synthesizer: str
    clusters: int = 0
    proposed: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    already_recorded: int = 0
    repeated: int = 0
    per_cluster: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form, stored as the run's summary."""
        return {
            "source_run_id": self.source_run_id,
            "synthesizer": self.synthesizer,
            "clusters": self.clusters,
            "proposed": self.proposed,
            "accepted": self.accepted,
            "rejected": dict(self.rejected),
            "already_recorded": self.already_recorded,
            "repeated": self.repeated,
        }


def build_synthesizer(cfg: SynthesisConfig) -> Synthesizer:
    """The synthesizer ``cfg.synthesizer`` names."""
    if cfg.synthesizer == "llm":
        from campflow.synthesis.llm import LLMSynthesizer

        return LLMSynthesizer.from_config(cfg.llm)
    from campflow.synthesis.mutate import MutationSynthesizer

    return MutationSynthesizer(seed=cfg.seed)


def run_policy_config(store: Store, run_id: str) -> PolicyConfig | None:
    """The policy a run was made with, as recorded in its config (None when not recorded)."""
    raw = store.scalar("SELECT config FROM runs WHERE run_id = ?", [run_id])
    policy = orjson.loads(raw).get("policy") if raw else None
    try:
        return PolicyConfig.model_validate(policy) if isinstance(policy, dict) else None
    except ValidationError:
        return None


def new_synthesis_run_id() -> str:
    """A fresh, sortable run id such as ``synth-20261130-034012-1a2b3c``."""
    return f"synth-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"


def synthesize(
    store: Store,
    source_run_id: str,
    cfg: SynthesisConfig | None = None,
    *,
    synthesizer: Synthesizer | None = None,
    policy: Policy | None = None,
    bootcamps: Sequence[str] | None = None,
    rollout: RolloutSettings | None = None,
    run_id: str | None = None,
    max_levels: dict[str, int] | None = None,
    hacker: HackerConfig | None = None,
) -> SynthesisSummary:
    """Propose variants for every cluster of ``source_run_id``, validate them, record the verdicts.

    ``policy`` is the current model, used to calibrate; None skips calibration. ``max_levels`` (bootcamp
    -> the curriculum's level) rejects proposals above the level the cycle trains at. ``hacker``
    (``integrity.hacker``) adds the model's adversarial pass to validation. The work is recorded as
    a ``synthesize`` run; proposals already decided by an earlier run are left as they are.
    """
    cfg = cfg or SynthesisConfig()
    synthesizer = synthesizer or build_synthesizer(cfg)
    run_id = run_id or new_synthesis_run_id()
    store.start_run(
        run_id,
        "synthesize",
        {"source_run_id": source_run_id, "synthesis": cfg.model_dump(mode="json")},
        getattr(synthesizer, "model", None) or synthesizer.name,
    )
    summary = SynthesisSummary(run_id, source_run_id, synthesizer.name)
    try:
        analyze_run(store, source_run_id, cfg, bootcamps=bootcamps)
        contexts = load_contexts(
            store,
            source_run_id,
            bootcamps=bootcamps,
            min_size=cfg.min_cluster_size,
            with_transcripts=synthesizer.needs_transcripts,
        )
        try:
            proposals = [p for c in contexts for p in synthesizer.propose(c, cfg.n_per_cluster)]
        finally:
            synthesizer.close()
        settings = ValidationSettings.from_config(cfg, rollout, max_levels=max_levels, hacker=hacker)
        result = validate_proposals(store, proposals, settings, policy)
        record_verdicts(store, result.verdicts, run_id)
    except BaseException as exc:
        store.fail_run(run_id, exc)
        raise
    summary.clusters, summary.proposed = len(contexts), len(proposals)
    summary.already_recorded, summary.repeated = result.already_recorded, result.repeated
    summary.accepted = len(result.accepted)
    summary.rejected = Counter(v.reject_kind.value for v in result.verdicts if v.reject_kind is not None)
    by_cluster: dict[str, Counter[str]] = {c.cluster_id: Counter() for c in contexts}
    for v in result.verdicts:
        by_cluster.setdefault(v.proposal.cluster_id or "", Counter())[v.status] += 1
    summary.per_cluster = [
        {
            "cluster_id": c.cluster_id,
            "bootcamp": c.bootcamp,
            "label": c.cluster.label,
            "size": c.cluster.size,
            "accepted": by_cluster[c.cluster_id]["accepted"],
            "rejected": by_cluster[c.cluster_id]["rejected"],
        }
        for c in contexts
    ]
    store.finish_run(run_id, "completed", summary.as_dict())
    return summary


def failure_report(store: Store, run_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows for ``campflow failures``: failures per category, and the run's clusters with their variants."""
    categories = store.query(
        "SELECT bootcamp, category, failures, instances, clusters FROM failure_categories "
        "WHERE run_id = ? ORDER BY bootcamp, failures DESC, category",
        [run_id],
    )
    clusters = store.query(
        """SELECT c.bootcamp, c.cluster_id, c.size, c.label, c.traits->>'$.dominant.text' AS dominant_trait,
                  c.exemplar_episode_ids[1] AS exemplar,
                  count(v.variant_id) FILTER (WHERE v.status = 'accepted') AS accepted,
                  count(v.variant_id) FILTER (WHERE v.status = 'rejected') AS rejected
           FROM clusters c LEFT JOIN variants v USING (cluster_id)
           WHERE c.run_id = ? AND c.cluster_id IN (SELECT cluster_id FROM failures WHERE run_id = ?)
           GROUP BY ALL ORDER BY c.bootcamp, c.size DESC, c.cluster_id""",
        [run_id, run_id],
    )
    return categories, clusters
