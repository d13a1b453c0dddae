"""The hack battery's probes on record: one ``verifier_probes`` row per exploit played on an instance.

``SELECT subject, exploit, count(*) FROM verifier_probes WHERE verdict = 'hack' GROUP BY ALL`` answers
which verifiers were refused and by what; ``campflow sql`` reads it like any table. The adversarial pass's
episodes (:mod:`campflow.integrity.hacker`, exploit ``model:...``) keep their transcript beside them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from campflow.integrity.battery import Probe
from campflow.serialization import to_json
from campflow.storage.store import Store, now


def probes_table(probes: Sequence[Probe], *, subject: str, source: str) -> pa.Table:
    """``probes`` as rows of ``verifier_probes``, checked now."""
    ts = now()
    n = len(probes)
    return pa.table(
        {
            "subject": pa.array([subject] * n, pa.string()),
            "source": pa.array([source] * n, pa.string()),
            "bootcamp": pa.array([p.bootcamp for p in probes], pa.string()),
            "level": pa.array([p.level for p in probes], pa.int32()),
            "seed": pa.array([p.seed for p in probes], pa.int64()),
            "instance_id": pa.array([p.instance_id for p in probes], pa.string()),
            "exploit": pa.array([p.exploit for p in probes], pa.string()),
            "answer": pa.array([p.answer for p in probes], pa.string()),
            "reward": pa.array([p.reward for p in probes], pa.float64()),
            "success": pa.array([p.success for p in probes], pa.bool_()),
            "termination": pa.array([p.termination for p in probes], pa.string()),
            "verdict": pa.array([p.verdict for p in probes], pa.string()),
            "detail": pa.array([p.detail for p in probes], pa.string()),
            "transcript": pa.array(
                [None if p.transcript is None else to_json(p.transcript) for p in probes], pa.string()
            ),
            "checked_at": pa.array([ts] * n, pa.timestamp("us")),
        }
    )


def record_probes(store: Store, probes: Sequence[Probe], *, subject: str, source: str) -> None:
    """Replace ``subject``'s probes from ``source`` with ``probes``, in one transaction."""
    rows = probes_table(probes, subject=subject, source=source)
    with store.transaction(_campflow_probes=rows) as con:
        con.execute("DELETE FROM verifier_probes WHERE subject = ? AND source = ?", [subject, source])
        if len(rows):
            con.execute("INSERT INTO verifier_probes BY NAME SELECT * FROM _campflow_probes")
