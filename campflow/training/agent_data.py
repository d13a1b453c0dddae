"""SFT data from a user's agent's episodes: the token ids the proxy recorded, never text tokenized again.

An agent program's episodes (``campflow eval --agent``, a cycle run with ``rollout.agent``) hold no
conversation campflow rendered: the agent built every request itself. What the model saw and produced is
in ``proxy_calls``: each call's prompt ids and completion ids. The passing episodes (the same filter as
any SFT data: solved, reward, valid calls, never the eval split or a probe, deduped, balanced) become rows
of those ids:

- an episode whose calls each extend the previous call's prompt and completion exactly is one sequence
  (:func:`~campflow.proxy.records.merge_calls`); any other (the agent rewrote or summarized its history)
  is a row per run of appending calls, down to a row per call;
- ``input_ids`` are the ids, ``completion_mask`` is 1 on the ids the model sampled (its completion ids) and
  0 on everything else (the agent's prompts, tool results, the template's turn headers).

TRL's SFTTrainer reads such a dataset as pre-tokenized (its ``input_ids`` column) and trains on the ids
``completion_mask`` marks (``completion_only_loss``): :func:`campflow.training.sft.train_sft` does so for
any dataset with ``input_ids``. The share of episodes that merged into one sequence is recorded with the
dataset (``datasets.filter``: ``merged_share``), and returned.

Only trainable calls are used: an endpoint recorded as text only gives no rows, and an episode with none
is dropped (``no_token_ids``). Episodes of the demonstrator behind the proxy (:mod:`campflow.proxy.teacher`)
are rows like the model's own: its replies in the model's tokens, in the context the agent built.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campflow.bootcamps.splits import assert_not_held_out
from campflow.config import FilterConfig
from campflow.proxy.records import TokenSequence, merge_calls, read_calls
from campflow.serialization import to_json
from campflow.storage.store import Store, now
from campflow.training.filtering import (
    DatasetBuild,
    EmptyDatasetError,
    _balance,
    _reject_reason,
    candidate_episodes,
    dataset_id,
    save_rows,
)

SOURCE = "agent_episodes"


@dataclass
class AgentDatasetBuild(DatasetBuild):
    """An agent-episode SFT dataset: its rows are sequences; how many episodes and how many merged into one."""

    episodes: int = 0
    merged_share: float = 0.0


def agent_sequences(
    store: Store, run_ids: Sequence[str], cfg: FilterConfig, episode_ids: Collection[str] | None = None
) -> tuple[dict[str, list[TokenSequence]], dict[str, dict[str, Any]], Counter]:
    """The passing episodes of ``run_ids`` and their token sequences: (sequences by episode id, the episode
    rows, drop counts by reason)."""
    eval_ids, probe_ids = store.eval_ids(), store.probe_ids()
    candidates = candidate_episodes(store, run_ids)
    if episode_ids is not None:
        chosen = set(episode_ids)
        candidates = [r for r in candidates if r["episode_id"] in chosen]
    dropped: Counter = Counter()
    passing = []
    for row in sorted(candidates, key=lambda r: r["episode_id"]):
        reason = _reject_reason(row, cfg, eval_ids, probe_ids)
        if reason is None:
            passing.append(row)
        else:
            dropped[reason] += 1
    calls = read_calls(store, [r["episode_id"] for r in passing]) if passing else []
    merged: dict[str, list[TokenSequence]] = defaultdict(list)
    for sequence in merge_calls(calls):
        merged[sequence.episode_id].append(sequence)
    kept, seen = [], set()
    for row in passing:
        sequences = merged.get(row["episode_id"])
        key = (row["instance_id"], tuple(tuple(s.ids) for s in sequences or []))
        if not sequences:
            dropped["no_token_ids"] += 1  # recorded as text only (an endpoint), or no answered call
        elif cfg.dedupe and key in seen:
            dropped["duplicate"] += 1
        else:
            seen.add(key)
            kept.append(row)
    kept = _balance(kept, cfg, dropped)
    return {r["episode_id"]: merged[r["episode_id"]] for r in kept}, {r["episode_id"]: r for r in kept}, dropped


def build_agent_sft_dataset(
    store: Store,
    workspace: Path,
    run_ids: Sequence[str],
    cfg: FilterConfig,
    *,
    episode_ids: Collection[str] | None = None,
) -> AgentDatasetBuild:
    """The passing agent episodes of ``run_ids`` as a pre-tokenized SFT dataset, saved and recorded.

    Raises:
        EmptyDatasetError: no episode passed the filter with recorded token ids.
    """
    import datasets

    sequences, episodes, dropped = agent_sequences(store, run_ids, cfg, episode_ids)
    if not sequences:
        raise EmptyDatasetError(
            f"no agent episode of run(s) {', '.join(run_ids)} passed the filter with recorded token ids "
            f"(dropped: {dict(dropped) or 'none found'})"
        )
    assert_not_held_out(
        (r["instance_id"] for r in episodes.values()), store.eval_ids(), store.probe_ids(), what="the SFT dataset"
    )
    merged_share = sum(1 for s in sequences.values() if len(s) == 1) / len(sequences)
    ds_id = dataset_id("sft-agent", sorted(sequences), cfg)
    path = workspace / "datasets" / ds_id
    per_bootcamp = dict(Counter(r["bootcamp"] for r in episodes.values()))
    rows = [
        {
            "input_ids": s.ids,
            "completion_mask": s.generated,
            "episode_id": episode_id,
            "instance_id": episodes[episode_id]["instance_id"],
            "bootcamp": episodes[episode_id]["bootcamp"],
            "level": episodes[episode_id]["level"] or 0,
            "reward": float(episodes[episode_id]["reward"]),
            "teacher": str(episodes[episode_id]["model_id"]),
            "calls": len(s.call_ids),
        }
        for episode_id in sorted(sequences)
        for s in sequences[episode_id]
    ]
    build = AgentDatasetBuild(
        ds_id, "sft", path, len(rows), per_bootcamp, dict(dropped), episodes=len(sequences), merged_share=merged_share
    )
    existing = store.query("SELECT path FROM datasets WHERE dataset_id = ?", [ds_id])
    if existing and store.stored_path(existing[0]["path"]).exists():
        build.reused = True
        return build
    features = datasets.Features(
        {
            "input_ids": datasets.List(datasets.Value("int32")),
            "completion_mask": datasets.List(datasets.Value("int8")),
            "episode_id": datasets.Value("string"),
            "instance_id": datasets.Value("string"),
            "bootcamp": datasets.Value("string"),
            "level": datasets.Value("int32"),
            "reward": datasets.Value("float64"),
            "teacher": datasets.Value("string"),
            "calls": datasets.Value("int32"),
        }
    )
    save_rows(rows, features, path)
    record = {
        **cfg.model_dump(mode="json"),
        "dropped": dict(dropped),
        "source": SOURCE,
        "episodes": len(sequences),
        "merged_share": merged_share,
    }
    with store.connection() as con:
        con.execute(
            "INSERT OR REPLACE INTO datasets (dataset_id, kind, path, rows, filter, source_runs, created_at) "
            "VALUES (?, 'sft', ?, ?, ?, ?, ?)",
            [ds_id, store.record_path(path), len(rows), to_json(record), list(run_ids), now()],
        )
    return build
