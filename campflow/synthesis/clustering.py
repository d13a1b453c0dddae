"""Clustering: per bootcamp, group a run's failures by their features and text, and label each group.

Each failure becomes a vector of two equally weighted blocks: TF-IDF of its text (category, termination,
last tool, the words of its signature's error), and its params and turns (numeric knobs min-max scaled
over the bootcamp's failures and rounded to 1/20 of their range, other knobs one-hot). Failures with
the same vector are one weighted *profile*, so 100,000 failures cost what their distinct profiles cost.
k-means runs for every k up to ``max_clusters`` on a weighted sample of profiles, and the silhouette of
the failures (profiles weighted by count) picks k. The text names the divergence too (its kind and the tool
called there, :mod:`campflow.synthesis.divergence`), and a cluster's traits carry what its divergences
share. Each cluster is labelled by its dominant category (the divergence's kind, where one was found) and
its traits (:mod:`campflow.synthesis.traits`), and clusters that would read alike by what separates them
(:mod:`campflow.synthesis.labels`); the failures nearest its centre are its exemplars."""

from __future__ import annotations

import hashlib
import math
import re
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from campflow.bootcamps import registry
from campflow.errors import UnknownBootcampError
from campflow.serialization import to_json
from campflow.storage.store import Store, now
from campflow.synthesis.knobs import Knob, knobs_of
from campflow.synthesis.labels import separate_labels
from campflow.synthesis.mining import Failure
from campflow.synthesis.traits import Population, knob_traits

_SAMPLE = 2000  # profiles k-means is fitted on and the silhouette measured on
_MIN_SILHOUETTE = 0.05  # below this even the best k finds no structure: one cluster says it better
_MAX_CHOICES = 12  # non-numeric knobs with more distinct values among the failures are left out
_BINS = 20  # numeric features are rounded to 1/_BINS of their range


@dataclass
class Cluster:
    """A group of alike failures of one bootcamp in one run (a row of ``clusters``)."""

    cluster_id: str
    run_id: str
    bootcamp: str
    size: int
    label: str
    traits: dict[str, Any]
    exemplar_episode_ids: list[str]
    episode_ids: list[str]


def cluster_failures(
    store: Store,
    run_id: str,
    *,
    max_clusters: int = 8,
    exemplars: int = 3,
    seed: int = 0,
    bootcamps: Sequence[str] | None = None,
) -> list[Cluster]:
    """Cluster the mined failures of ``run_id`` per bootcamp and write ``clusters`` and ``failures.cluster_id``.

    Re-clustering the same failures gives the same cluster ids (they hash their members). Clusters of an
    earlier clustering that variants still point to are kept, so lineage survives.
    """
    rows = store.query(
        "SELECT episode_id, run_id, bootcamp, instance_id, category, signature, features "
        "FROM failures WHERE run_id = ? ORDER BY episode_id",
        [run_id],
    )
    by_bootcamp: dict[str, list[Failure]] = defaultdict(list)
    for r in rows:
        if bootcamps and r["bootcamp"] not in bootcamps:
            continue
        by_bootcamp[r["bootcamp"]].append(
            Failure(
                r["episode_id"],
                r["run_id"],
                r["bootcamp"],
                r["instance_id"],
                r["category"],
                r["signature"],
                orjson.loads(r["features"] or "{}"),
            )
        )
    clusters: list[Cluster] = []
    for bootcamp, failures in sorted(by_bootcamp.items()):
        population = Population.load(store, run_id, bootcamp)
        clusters += cluster_bootcamp(
            run_id, bootcamp, failures, population, max_clusters=max_clusters, exemplars=exemplars, seed=seed
        )
    write_clusters(store, run_id, sorted(by_bootcamp), clusters)
    return clusters


def cluster_bootcamp(
    run_id: str,
    bootcamp: str,
    failures: Sequence[Failure],
    population: Population,
    *,
    max_clusters: int = 8,
    exemplars: int = 3,
    seed: int = 0,
) -> list[Cluster]:
    """Cluster one bootcamp's failures (pure: no store), largest cluster first."""
    if not failures:
        return []
    knobs = _knobs(bootcamp)
    profile_of, profiles = _profiles(failures, knobs)
    weights = [0] * len(profiles)
    for p in profile_of:
        weights[p] += 1
    labels, distance = _kmeans(profiles, weights, max_clusters, seed)
    members: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(profile_of):
        members[labels[p]].append(i)
    groups = []
    for idx in members.values():
        ranked = [failures[i] for i in sorted(idx, key=lambda i: (distance[profile_of[i]], failures[i].episode_id))]
        groups.append((_describe(run_id, bootcamp, ranked, knobs, population, exemplars), ranked))
    groups.sort(key=lambda g: (-g[0].size, g[0].cluster_id))
    separate_labels(groups, knobs)  # two clusters that read alike get what separates them
    return [cluster for cluster, _ in groups]


def _knobs(bootcamp: str) -> tuple[Knob, ...]:
    try:
        return knobs_of(registry.make(bootcamp).params_model)
    except UnknownBootcampError:
        return ()  # an imported bootcamp that was removed: cluster on text and turns alone


@dataclass(frozen=True)
class _Profile:
    text: tuple[str, ...]  # category, termination, last tool, words of the error
    choices: tuple[str, ...]  # non-numeric params as knob=value tokens
    numbers: tuple[float, ...]  # numeric params, then turns


def _profiles(failures: Sequence[Failure], knobs: Sequence[Knob]) -> tuple[list[int], list[_Profile]]:
    """Each failure's profile index, and the distinct profiles.

    Numeric params and turns are min-max scaled over the failures and rounded to 1/20 of their range:
    failures that close are alike for clustering, and far fewer distinct profiles remain to cluster.
    """
    import numpy as np

    numeric = [k for k in knobs if k.numeric]
    # A knob with dozens of distinct values among the failures (free strings) puts every failure in a
    # group of its own; it says nothing about which failures are alike, so it is left out.
    other = [
        k
        for k in knobs
        if not k.numeric
        and len({k.category((f.features.get("params") or {}).get(k.name, k.default)) for f in failures}) <= _MAX_CHOICES
    ]
    raw = np.array(
        [
            [
                *(k.number((f.features.get("params") or {}).get(k.name, k.default)) for k in numeric),
                math.log2(1 + (f.features.get("turns") or 0)),
            ]
            for f in failures
        ],
        float,
    )
    with warnings.catch_warnings():  # an all-missing column has no range; it becomes the middle below
        warnings.simplefilter("ignore", RuntimeWarning)
        low, span = np.nanmin(raw, axis=0), np.nanmax(raw, axis=0) - np.nanmin(raw, axis=0)
    scaled = np.where(span > 0, (raw - low) / np.where(span > 0, span, 1), 0.0)
    binned = np.nan_to_num(np.round(scaled * _BINS) / _BINS, nan=0.5).tolist()
    index: dict[_Profile, int] = {}
    profile_of = []
    for f, numbers in zip(failures, binned):
        params = f.features.get("params") or {}
        error = f.signature.split("|", 2)[2] if f.signature.count("|") >= 2 else ""
        text = (
            f"cat={f.category}",
            f"term={f.category.split(':')[0]}",
            f"tool={f.features.get('last_tool') or ''}",
            *_divergence_tokens(f),
            *sorted({f"w={w}" for w in re.findall(r"[a-z_]{3,}", error.lower())}),
        )
        profile = _Profile(text, tuple(k.token(params.get(k.name, k.default)) for k in other), tuple(numbers))
        profile_of.append(index.setdefault(profile, len(index)))
    return profile_of, list(index)


def _divergence_tokens(failure: Failure) -> tuple[str, ...]:
    """The divergence's kind and the tool the model called there (its text block; none when not found)."""
    d = failure.features.get("divergence") or {}
    if not d.get("kind"):
        return ()
    return (f"div={d['kind']}", f"dtool={d.get('model_tool') or ''}")


def divergence_trait(failures: Sequence[Failure]) -> dict[str, Any] | None:
    """What a cluster's divergences share: the commonest kind, its share of the cluster, the median turn,
    and the calls (the model's and the oracle's) of the member nearest the centre that has it; None when
    no member has a divergence."""
    found = [(f, f.features.get("divergence") or {}) for f in failures]
    found = [(f, d) for f, d in found if d.get("kind")]
    if not found:
        return None
    kind, n = Counter(d["kind"] for _, d in found).most_common(1)[0]
    first, d = next((f, d) for f, d in found if d["kind"] == kind)
    turns = sorted(d2["turn"] for _, d2 in found if d2["kind"] == kind and d2.get("turn") is not None)
    return {
        "kind": kind,
        "share": round(n / len(failures), 4),
        "turn": turns[(len(turns) - 1) // 2] if turns else None,
        "episode_id": first.episode_id,
        "model": {"tool": d.get("model_tool"), "arguments": d.get("model_arguments")},
        "oracle": {"tool": d.get("oracle_tool"), "arguments": d.get("oracle_arguments")},
    }


def _matrix(profiles: Sequence[_Profile], weights: Sequence[int]) -> Any:
    """Two blocks of equal weight: the text (TF-IDF, unit rows) and the params and turns (norm <= 1).

    Dense: the vocabulary is small (categories, tools, a few error words), and k-means on dense rows is
    many times faster than on sparse ones.
    """
    import numpy as np
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.preprocessing import normalize

    w = np.asarray(weights, float)
    counts = CountVectorizer(analyzer=lambda tokens: tokens, binary=True).fit_transform([p.text for p in profiles])
    df = np.asarray(counts.T @ w).ravel()  # document frequency counted over failures, not profiles
    text = normalize(counts.multiply(np.log((1 + w.sum()) / (1 + df)) + 1).tocsr()).toarray()
    blocks = [np.array([p.numbers for p in profiles], float)]
    if profiles[0].choices:
        choices = CountVectorizer(analyzer=lambda tokens: tokens, binary=True).fit_transform(
            [p.choices for p in profiles]
        )
        blocks.append(choices.toarray() * math.sqrt(0.5))  # two different values: 1 apart
    params = np.hstack(blocks)
    dims = len(profiles[0].numbers) + len(profiles[0].choices)
    return np.hstack([text, params / math.sqrt(dims)])


def _kmeans(
    profiles: Sequence[_Profile],
    weights: Sequence[int],
    max_clusters: int,
    seed: int,
) -> tuple[list[int], list[float]]:
    """Cluster labels and distance to the own centroid, per profile; k chosen by weighted silhouette.

    k-means is fitted on a weighted sample of at most 2,000 profiles (the silhouette needs their
    pairwise distances anyway) and then assigns every profile; fitting on all of 100,000 failures'
    profiles for every k costs minutes for no better clusters.
    """
    import numpy as np

    n = len(profiles)
    if n == 1 or max_clusters == 1:
        return [0] * n, [0.0] * n
    from sklearn.cluster import KMeans
    from sklearn.metrics import pairwise_distances

    x = _matrix(profiles, weights)
    w = np.asarray(weights, float)
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(n, size=min(_SAMPLE, n), replace=False, p=w / w.sum()))
    distances = pairwise_distances(x[sample])
    best: tuple[float, Any] | None = None
    for k in range(2, min(max_clusters, len(sample)) + 1):
        model = KMeans(k, n_init=3, max_iter=100, random_state=seed).fit(x[sample], sample_weight=w[sample])
        score = _silhouette(distances, model.labels_, w[sample], k)
        if best is None or score > best[0] + 1e-9:
            best = (score, model)
    if best is None or best[0] < _MIN_SILHOUETTE:
        return [0] * n, [0.0] * n
    model = best[1]
    labels = model.predict(x)
    return labels.tolist(), model.transform(x)[np.arange(n), labels].tolist()


def _silhouette(distances: Any, labels: Any, weights: Any, k: int) -> float:
    """The silhouette of the failures themselves: each profile counts as ``weight`` identical points.

    sklearn's silhouette has no weights, and repeating points would make it quadratic in failures.
    """
    import numpy as np

    onehot = np.zeros((len(labels), k))
    onehot[np.arange(len(labels)), labels] = 1.0
    totals = weights @ onehot  # failures per cluster
    if (totals > 0).sum() < 2:
        return -1.0
    sums = distances @ (onehot * weights[:, None])  # summed distance from each profile to each cluster
    own = totals[labels]
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(own > 1, sums[np.arange(len(labels)), labels] / (own - 1), 0.0)
        mean_to = np.where(totals > 0, sums / totals, np.inf)
    mean_to[np.arange(len(labels)), labels] = np.inf
    b = mean_to.min(axis=1)
    s = np.where((own > 1) & (np.maximum(a, b) > 0), (b - a) / np.maximum(a, b), 0.0)
    return float((s * weights).sum() / weights.sum())


def _describe(
    run_id: str, bootcamp: str, ranked: Sequence[Failure], knobs: Sequence[Knob], population: Population, exemplars: int
) -> Cluster:
    """A cluster of ``ranked`` failures (nearest its centre first): id, label, traits and exemplars."""
    ids = sorted(f.episode_id for f in ranked)
    cluster_id = hashlib.sha256(f"{run_id}|{bootcamp}|{','.join(ids)}".encode()).hexdigest()[:16]
    categories = Counter(f.category for f in ranked).most_common()
    top, top_n = categories[0]
    traits = knob_traits(knobs, population, [f.features.get("params") or {} for f in ranked])
    label = f"{top} ({top_n / len(ranked):.0%})"
    if traits:
        label += " · " + " · ".join(t.text() for t in traits[:2])
    turns = [f.features.get("turns") or 0 for f in ranked]
    picked, seen = [], set()
    for f in ranked:  # nearest the centre first, one per instance while there are others
        if f.instance_id not in seen:
            picked.append(f.episode_id)
            seen.add(f.instance_id)
        if len(picked) == exemplars:
            break
    picked += [f.episode_id for f in ranked if f.episode_id not in picked][: exemplars - len(picked)]
    return Cluster(
        cluster_id=cluster_id,
        run_id=run_id,
        bootcamp=bootcamp,
        size=len(ranked),
        label=label,
        traits={
            "category": top,
            "category_share": round(top_n / len(ranked), 4),
            "categories": [[c, n] for c, n in categories[:8]],
            "knobs": [t.as_dict() for t in traits],
            "dominant": traits[0].as_dict() if traits else None,
            "mean_turns": round(sum(turns) / len(turns), 2),
            "divergence": divergence_trait(ranked),
        },
        exemplar_episode_ids=picked,
        episode_ids=ids,
    )


def write_clusters(store: Store, run_id: str, bootcamps: Sequence[str], clusters: Sequence[Cluster]) -> None:
    """Replace the clusters of ``run_id``'s ``bootcamps`` and point their failures at them, atomically."""
    ts = now()
    rows = pa.table(
        {
            "cluster_id": [c.cluster_id for c in clusters],
            "run_id": [c.run_id for c in clusters],
            "bootcamp": [c.bootcamp for c in clusters],
            "size": pa.array([c.size for c in clusters], pa.int32()),
            "label": [c.label for c in clusters],
            "traits": [to_json(c.traits) for c in clusters],
            "exemplar_episode_ids": pa.array([c.exemplar_episode_ids for c in clusters], pa.list_(pa.string())),
            "episode_ids": pa.array([c.episode_ids for c in clusters], pa.list_(pa.string())),
            "created_at": pa.array([ts] * len(clusters), pa.timestamp("us")),
        }
    )
    members = pa.table(
        {
            "episode_id": [e for c in clusters for e in c.episode_ids],
            "cluster_id": [c.cluster_id for c in clusters for _ in c.episode_ids],
        }
    )
    marks = ", ".join("?" for _ in bootcamps) or "NULL"
    with store.transaction(_campflow_clusters=rows, _campflow_members=members) as con:
        con.execute("INSERT OR REPLACE INTO clusters BY NAME SELECT * FROM _campflow_clusters")
        con.execute(
            "UPDATE failures SET cluster_id = m.cluster_id FROM _campflow_members m "
            "WHERE failures.episode_id = m.episode_id"
        )
        con.execute(
            f"""DELETE FROM clusters WHERE run_id = ? AND bootcamp IN ({marks})
                        AND cluster_id NOT IN (SELECT cluster_id FROM _campflow_clusters)
                        AND cluster_id NOT IN (SELECT cluster_id FROM variants WHERE cluster_id IS NOT NULL)""",
            [run_id, *bootcamps],
        )


def load_clusters(store: Store, run_id: str, bootcamps: Sequence[str] | None = None) -> list[Cluster]:
    """The current clusters of ``run_id`` (those its failures point to), largest first."""
    rows = store.query(
        """SELECT c.cluster_id, c.run_id, c.bootcamp, c.size, c.label, c.traits, c.exemplar_episode_ids,
                  c.episode_ids FROM clusters c
           WHERE c.run_id = ? AND c.cluster_id IN (SELECT cluster_id FROM failures WHERE run_id = ?)
           ORDER BY c.bootcamp, c.size DESC, c.cluster_id""",
        [run_id, run_id],
    )
    return [
        Cluster(
            r["cluster_id"],
            r["run_id"],
            r["bootcamp"],
            r["size"],
            r["label"],
            orjson.loads(r["traits"] or "{}"),
            list(r["exemplar_episode_ids"] or []),
            list(r["episode_ids"] or []),
        )
        for r in rows
        if not bootcamps or r["bootcamp"] in bootcamps
    ]
