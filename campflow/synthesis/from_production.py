"""From a production failure cluster to new tasks of a bootcamp the team names.

A cluster of judged production failures (a ``production`` run's, :mod:`campflow.proxy.judging`) holds
real conversations of the deployed agent, not instances of a bootcamp. The LLM synthesizer is shown
those conversations and the named bootcamp (an MCP task bootcamp, whose params carry a whole task row:
prompt, fixtures, reference solution and checks; or any bootcamp whose params it can propose) and asked
for tasks in which the same mistake can be made. Each proposal enters only through the validation every
variant passes (:mod:`campflow.synthesis.validate`: its reference passes on a fresh server, doing nothing
fails, the hack battery finds no exploit, no eval or probe instance is repeated), and its ``variants``
row names the production cluster, so ``variant_lineage`` leads from the task back to the episodes.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import orjson

from campflow.config import SynthesisConfig
from campflow.errors import RunNotFoundError
from campflow.storage.store import Store
from campflow.synthesis.clustering import Cluster, load_clusters
from campflow.synthesis.llm import LLMSynthesizer
from campflow.synthesis.pipeline import SynthesisSummary, new_synthesis_run_id
from campflow.synthesis.proposals import ClusterContext, Exemplar, Proposal
from campflow.synthesis.validate import ValidationSettings, record_verdicts, validate_proposals

PREFACE = (
    "## Where these failures come from\nThe exemplar episodes below are real conversations of a deployed "
    "agent with its users, judged failed; they are not tasks of the family below. Propose tasks of the "
    "family below in which an agent can make the same mistake, each with a reference solution that "
    "passes its own checks.\n\n"
)


class ProductionTaskSynthesizer(LLMSynthesizer):
    """The LLM synthesizer, told that its exemplars are production conversations (``llm-production``)."""

    name = "llm-production"

    def messages(self, context: ClusterContext, n: int) -> list[dict[str, str]]:
        """The LLM synthesizer's messages with :data:`PREFACE` before the user's request."""
        messages = super().messages(context, n)
        messages[-1] = {**messages[-1], "content": PREFACE + messages[-1]["content"]}
        return messages


def production_cluster(store: Store, cluster: str) -> Cluster:
    """The production failure cluster ``cluster`` names (an id or a unique prefix of one).

    Raises:
        RunNotFoundError: no production cluster has that id or prefix, or several do.
    """
    rows = store.query(
        "SELECT c.cluster_id, c.run_id FROM clusters c JOIN runs r USING (run_id) "
        "WHERE r.kind = 'production' AND starts_with(c.cluster_id, ?) ORDER BY c.cluster_id",
        [cluster],
    )
    if len(rows) != 1:
        found = "no production cluster" if not rows else f"{len(rows)} production clusters"
        raise RunNotFoundError(
            f"cluster {cluster!r}: {found} with that id or prefix; `campflow failures --run <production run>` lists them"
        )
    run_id = rows[0]["run_id"]
    return next(c for c in load_clusters(store, run_id) if c.cluster_id == rows[0]["cluster_id"])


def production_context(store: Store, cluster: Cluster, bootcamp: str, exemplars: int) -> ClusterContext:
    """What the synthesizer reads: ``cluster`` aimed at ``bootcamp``, with its exemplar conversations."""
    ids = (cluster.exemplar_episode_ids or cluster.episode_ids)[:exemplars]
    rows = store.query(
        "SELECT e.episode_id, e.instance_id, e.transcript, f.category FROM episodes e "
        "LEFT JOIN failures f ON f.episode_id = e.episode_id WHERE e.run_id = ? AND list_contains(?, e.episode_id) "
        "ORDER BY e.episode_id",
        [cluster.run_id, ids],
    )
    shown = [
        Exemplar(r["episode_id"], r["instance_id"], r["category"] or "", {}, orjson.loads(r["transcript"]))
        for r in rows
    ]
    return ClusterContext(dataclasses.replace(cluster, bootcamp=bootcamp), [], shown)


def synthesize_from_production(
    store: Store,
    cluster: str,
    bootcamp: str,
    cfg: SynthesisConfig,
    *,
    synthesizer: LLMSynthesizer | None = None,
    run_id: str | None = None,
) -> SynthesisSummary:
    """Propose tasks of ``bootcamp`` from production cluster ``cluster``, validate them, record the verdicts
    (a ``synthesize`` run; accepted variants' instances enter the train split like any variant's).

    Raises:
        RunNotFoundError: no such production cluster.
        UnknownBootcampError: ``bootcamp`` is not a bootcamp of the workspace.
        ConfigError: ``synthesis.llm.model`` is not set.
    """
    from campflow.bootcamps import registry

    target = production_cluster(store, cluster)
    registry.make(bootcamp)  # an unknown name fails here, in one line
    synthesizer = synthesizer or ProductionTaskSynthesizer.from_config(cfg.llm)
    run_id = run_id or new_synthesis_run_id()
    store.start_run(
        run_id,
        "synthesize",
        {"source_run_id": target.run_id, "cluster_id": target.cluster_id, "bootcamp": bootcamp},
        getattr(synthesizer, "model", None) or synthesizer.name,
    )
    summary = SynthesisSummary(run_id, target.run_id, synthesizer.name, clusters=1)
    try:
        context = production_context(store, target, bootcamp, cfg.exemplars)
        try:
            proposals: list[Proposal] = synthesizer.propose(context, cfg.n_per_cluster)
        finally:
            synthesizer.close()
        result = validate_proposals(store, proposals, ValidationSettings.from_config(cfg))
        record_verdicts(store, result.verdicts, run_id)
    except BaseException as exc:
        store.fail_run(run_id, exc)
        raise
    summary.proposed, summary.accepted = len(proposals), len(result.accepted)
    summary.already_recorded, summary.repeated = result.already_recorded, result.repeated
    summary.rejected = Counter(v.reject_kind.value for v in result.verdicts if v.reject_kind is not None)
    summary.per_cluster = [
        {
            "cluster_id": target.cluster_id,
            "bootcamp": bootcamp,
            "label": target.label,
            "size": target.size,
            "accepted": summary.accepted,
            "rejected": sum(summary.rejected.values()),
        }
    ]
    store.finish_run(run_id, "completed", summary.as_dict())
    return summary
