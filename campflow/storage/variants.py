"""Synthesized variants on record: the questions an improvement cycle asks of the ``variants`` table."""

from __future__ import annotations

from collections.abc import Sequence

from campflow.storage.store import Store


def run_variant_ids(store: Store, run_id: str) -> list[str]:
    """The ids of the variants synthesis run ``run_id`` recorded, accepted or not."""
    return [r["variant_id"] for r in store.query("SELECT variant_id FROM variants WHERE run_id = ?", [run_id])]


def pending_production_ids(store: Store, bootcamps: Sequence[str], cycle_id: str) -> list[str]:
    """The accepted tasks made from production failures (``campflow proxy tasks``, synthesizer
    ``llm-production``) of ``bootcamps`` that no cycle but ``cycle_id`` has taken up yet, by id.

    A cycle takes them up beside its own synthesis's variants (its state's ``variant_ids``): they are
    collected on, probed and trained on once, by the next cycle after they were accepted.
    """
    return [
        r["variant_id"]
        for r in store.query(
            "SELECT variant_id FROM variants WHERE synthesizer = 'llm-production' AND status = 'accepted' "
            "AND bootcamp IN (SELECT unnest(?)) AND variant_id NOT IN ("
            "  SELECT unnest(from_json(coalesce(state->'$.variant_ids', '[]'), '[\"VARCHAR\"]')) FROM cycles"
            "  WHERE cycle_id <> ?) ORDER BY variant_id",
            [list(bootcamps), cycle_id],
        )
    ]


def accepted_probe_ids(store: Store, variant_ids: Sequence[str], limit: int) -> list[str]:
    """The held-out probe instances of the accepted variants among ``variant_ids``, at most ``limit``, by id."""
    return [
        r["instance_id"]
        for r in store.query(
            "SELECT i.instance_id FROM instances i JOIN variants v USING (variant_id) WHERE i.split = 'probe' "
            "AND v.status = 'accepted' AND v.variant_id IN (SELECT unnest(?)) ORDER BY i.instance_id LIMIT ?",
            [list(variant_ids), limit],
        )
    ]
