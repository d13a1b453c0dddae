"""From recorded episodes to training datasets, and never from the eval split.

The filter keeps successful trajectories (reward threshold, termination ``solved``), drops
malformed or overlong ones, dedupes by (instance, action sequence) and balances bootcamps. Every
candidate's instance must be recorded in the store; one in the eval split (by the store's ``split``
column or by its seed lying in the reserved eval range) or a variant's probe is dropped, and the
finished dataset is checked against the store's eval and probe ids once more before anything is written.

SFT rows are in TRL's conversational format: ``messages`` (tool calls with arguments as objects,
tool results as ``tool`` messages) and ``tools`` (a JSON string of function schemas, which TRL
parses). ``messages`` is stored with the ``Json`` feature type: a plain Arrow struct would merge the
argument objects of different tools into one struct and fill the gaps with nulls, which the chat
template would then render and the model would learn.

Vision episodes keep their images as TRL's SFTTrainer reads them for a vision-language model: an
``images`` column (PNG images, in the order they appear) beside ``messages``, whose messages with
images hold ``{"type": "image"}`` placeholders among ``{"type": "text"}`` parts; images returned by
tools are there too (the engine sends them in the user message that follows the tool result). A
dataset without images has no ``images`` column. The verl export writes ``<image>`` placeholders in
the prompt text and the images beside it, as verl's multimodal datasets read them.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campflow.agents.chat import UnrenderableTranscript, action_sequence, template_messages
from campflow.agents.vision import image_urls, png_bytes
from campflow.bootcamps import registry
from campflow.bootcamps.messages import content_text
from campflow.bootcamps.splits import assert_not_held_out, is_eval_seed
from campflow.config import FilterConfig
from campflow.errors import CampflowError
from campflow.serialization import to_json
from campflow.storage.store import Store, now


class EmptyDatasetError(CampflowError):
    """No episode survived the filter."""

    exit_code = 2


@dataclass
class DatasetBuild:
    """A dataset on disk and recorded in the store, with what the filter dropped and why."""

    dataset_id: str
    kind: str
    path: Path
    rows: int
    per_bootcamp: dict[str, int]
    dropped: dict[str, int] = field(default_factory=dict)
    reused: bool = False


_EPISODES_SQL = """
    SELECT e.episode_id, e.run_id, e.model_id, e.instance_id, e.bootcamp, e.level, e.reward, e.success, e.termination,
           e.turns, e.invalid_calls, e.transcript, i.split, i.seed, i.params, i.version
    FROM episodes e LEFT JOIN instances i USING (instance_id)
    WHERE e.run_id IN ({marks})
"""


def candidate_episodes(store: Store, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Episodes of ``run_ids`` with their instance's split, seed and params (None when unrecorded)."""
    if not run_ids:
        raise CampflowError("no source runs given; pass the ids of collect or evaluate runs")
    known = {
        r["run_id"]
        for r in store.query(
            f"SELECT run_id FROM runs WHERE run_id IN ({', '.join('?' for _ in run_ids)})", list(run_ids)
        )
    }
    missing = [r for r in run_ids if r not in known]
    if missing:
        raise CampflowError(f"unknown run id {missing[0]!r}; `campflow runs` lists the runs")
    return store.query(_EPISODES_SQL.format(marks=", ".join("?" for _ in run_ids)), list(run_ids))


def select(
    rows: Sequence[dict[str, Any]], cfg: FilterConfig, eval_ids: set[str], probe_ids: set[str] = frozenset()
) -> tuple[list[dict], Counter]:
    """Apply the filter; returns the kept rows (with their parsed transcript) and drop counts by reason."""
    dropped: Counter = Counter()
    kept: list[dict[str, Any]] = []
    seen: set[tuple[str, tuple]] = set()
    for row in sorted(rows, key=lambda r: r["episode_id"]):
        reason = _reject_reason(row, cfg, eval_ids, probe_ids)
        if reason is None:
            transcript = json.loads(row["transcript"])
            key = (row["instance_id"], action_sequence(transcript))
            if cfg.dedupe and key in seen:
                reason = "duplicate"
            elif (
                cfg.max_chars is not None
                and sum(len(content_text(m.get("content"), image="")) for m in transcript) > cfg.max_chars
            ):
                reason = "too_long"
            else:
                try:
                    messages = template_messages(transcript, images=True)
                except UnrenderableTranscript:
                    reason = "malformed"
                else:
                    seen.add(key)
                    kept.append({**row, "messages": messages, "image_urls": image_urls(transcript)})
        if reason is not None:
            dropped[reason] += 1
    return _balance(kept, cfg, dropped), dropped


def _reject_reason(row: dict[str, Any], cfg: FilterConfig, eval_ids: set[str], probe_ids: set[str]) -> str | None:
    if row["split"] is None:
        return "unrecorded_instance"  # cannot prove it is not an eval instance, so it is not used
    if row["split"] == "eval" or row["instance_id"] in eval_ids or is_eval_seed(int(row["seed"])):
        return "eval_split"
    if row["split"] == "probe" or row["instance_id"] in probe_ids:
        return "probe_split"
    if cfg.solved_only and row["termination"] != "solved":
        return "not_solved"
    if row["reward"] < cfg.min_reward:
        return "low_reward"
    if cfg.valid_calls_only and row["invalid_calls"] > 0:
        return "invalid_calls"
    if cfg.max_turns is not None and row["turns"] > cfg.max_turns:
        return "too_many_turns"
    return None


def _balance(kept: list[dict[str, Any]], cfg: FilterConfig, dropped: Counter) -> list[dict[str, Any]]:
    by_bootcamp: dict[str, list[dict]] = defaultdict(list)
    for row in kept:
        by_bootcamp[row["bootcamp"]].append(row)
    cap = cfg.max_per_bootcamp
    if cfg.balance and len(by_bootcamp) > 1:
        smallest = 2 * min(len(v) for v in by_bootcamp.values())
        cap = smallest if cap is None else min(cap, smallest)
    out = []
    for name in sorted(by_bootcamp):
        rows = by_bootcamp[name]
        random.Random(f"balance:{name}").shuffle(rows)  # a deterministic, unbiased choice of which to keep
        if cap is not None and len(rows) > cap:
            dropped["balance"] += len(rows) - cap
            rows = rows[:cap]
        out += rows
    return out


def dataset_id(kind: str, episode_ids: Sequence[str], cfg: FilterConfig) -> str:
    """Content id of a dataset: the same episodes through the same filter, the same id."""
    payload = json.dumps([kind, sorted(episode_ids), cfg.model_dump(mode="json")], sort_keys=True)
    return f"{kind}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"


def _from_oracle(row: dict[str, Any]) -> bool:
    """Whether the oracle (its grounded demonstrator, or its noisy variant ``noisy(...)``) played the
    episode: no reasoning in it."""
    model_id = str(row.get("model_id") or "")
    return model_id in ("oracle", "demonstrator") or model_id.startswith("noisy(")


def build_sft_dataset(
    store: Store,
    workspace: Path,
    run_ids: Sequence[str],
    cfg: FilterConfig,
    *,
    thinking: bool = False,
    exclude_oracle: bool = False,
    episode_ids: Collection[str] | None = None,
) -> DatasetBuild:
    """Filter the episodes of ``run_ids`` into an SFT dataset, save it and record it in ``datasets``.

    ``episode_ids`` keeps only those of the runs' episodes as candidates (e.g. to cut a dataset down to
    the size of another, rows chosen by id); the filter still applies to them.

    Each row says which ``teacher`` wrote it (the episode's model id: ``demonstrator`` for the oracle teacher, a checkpoint, an endpoint
    model). For a ``thinking`` model, oracle rows (no reasoning) are marked ``oracle_no_reasoning`` and,
    with ``exclude_oracle``, left out; model rows keep each turn's reasoning as ``reasoning_content``,
    which Qwen3-style templates render.
    """
    import datasets

    eval_ids, probe_ids = store.eval_ids(), store.probe_ids()
    candidates = candidate_episodes(store, run_ids)
    if episode_ids is not None:
        chosen = set(episode_ids)
        candidates = [r for r in candidates if r["episode_id"] in chosen]
    if thinking and exclude_oracle:
        candidates = [r for r in candidates if not _from_oracle(r)]
    kept, dropped = select(candidates, cfg, eval_ids, probe_ids)
    if not kept:
        raise EmptyDatasetError(
            f"no episode of run(s) {', '.join(run_ids)} passed the filter (dropped: {dict(dropped) or 'none found'})"
        )
    assert_not_held_out((r["instance_id"] for r in kept), eval_ids, probe_ids, what="the SFT dataset")
    ds_id = dataset_id("sft" if not thinking else "sft-thinking", [r["episode_id"] for r in kept], cfg)
    path = workspace / "datasets" / ds_id
    per_bootcamp = dict(Counter(r["bootcamp"] for r in kept))
    existing = store.query("SELECT path FROM datasets WHERE dataset_id = ?", [ds_id])
    if existing and store.stored_path(existing[0]["path"]).exists():
        return DatasetBuild(ds_id, "sft", path, len(kept), per_bootcamp, dict(dropped), reused=True)
    rows = [
        {
            "messages": r["messages"],
            "tools": json.dumps(_tools(r)),
            "episode_id": r["episode_id"],
            "instance_id": r["instance_id"],
            "bootcamp": r["bootcamp"],
            "level": r["level"] or 0,
            "reward": float(r["reward"]),
            "teacher": str(r["model_id"]),
            "oracle_no_reasoning": thinking and _from_oracle(r),
        }
        for r in kept
    ]
    vision = any(r["image_urls"] for r in kept)
    if vision:
        for row, r in zip(rows, kept):
            row["images"] = [{"bytes": png_bytes(u), "path": None} for u in r["image_urls"]]
    features = datasets.Features(
        {
            "messages": datasets.List(datasets.Json()),
            "tools": datasets.Value("string"),
            "episode_id": datasets.Value("string"),
            "instance_id": datasets.Value("string"),
            "bootcamp": datasets.Value("string"),
            "level": datasets.Value("int32"),
            "reward": datasets.Value("float64"),
            "teacher": datasets.Value("string"),
            "oracle_no_reasoning": datasets.Value("bool"),
            **({"images": datasets.List(datasets.Image())} if vision else {}),
        }
    )
    save_rows(rows, features, path)
    _record(store, ds_id, "sft", path, len(rows), cfg, run_ids, dropped)
    return DatasetBuild(ds_id, "sft", path, len(rows), per_bootcamp, dict(dropped))


def _tools(row: dict[str, Any]) -> list[dict[str, Any]]:
    bootcamp = registry.make(row["bootcamp"])
    instance = bootcamp.generate(json.loads(row["params"]), int(row["seed"]))
    if instance.id != row["instance_id"]:
        raise CampflowError(
            f"{row['bootcamp']} instance {row['instance_id']} no longer regenerates "
            f"(now {instance.id}); the bootcamp changed without a version bump"
        )
    return bootcamp.tool_schemas(instance)


def _record(
    store: Store,
    ds_id: str,
    kind: str,
    path: Path,
    rows: int,
    cfg: FilterConfig,
    run_ids: Sequence[str],
    dropped: Counter,
) -> None:
    with store.connection() as con:
        con.execute(
            "INSERT OR REPLACE INTO datasets (dataset_id, kind, path, rows, filter, source_runs, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                ds_id,
                kind,
                store.record_path(path),
                rows,
                to_json({**cfg.model_dump(mode="json"), "dropped": dict(dropped)}),
                list(run_ids),
                now(),
            ],
        )


def export_verl(store: Store, run_ids: Sequence[str], cfg: FilterConfig, out: Path) -> DatasetBuild:
    """Write verl-style RL parquet (``prompt``, ``reward_model.ground_truth``, ``extra_info``), one row per
    distinct train instance of the filtered episodes, and record it as an ``rl`` dataset."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    eval_ids, probe_ids = store.eval_ids(), store.probe_ids()
    kept, dropped = select(candidate_episodes(store, run_ids), cfg, eval_ids, probe_ids)
    instances: dict[str, dict[str, Any]] = {}
    for r in kept:
        instances.setdefault(r["instance_id"], r)
    if not instances:
        raise EmptyDatasetError(f"no instance of run(s) {', '.join(run_ids)} passed the filter ({dict(dropped)})")
    assert_not_held_out(instances, eval_ids, probe_ids, what="the verl export")
    records = []
    for index, (iid, r) in enumerate(sorted(instances.items())):
        bootcamp = registry.make(r["bootcamp"])
        instance = bootcamp.generate(json.loads(r["params"]), int(r["seed"]))
        prompt = bootcamp.prompt(instance)
        identity = {
            "bootcamp": r["bootcamp"],
            "version": instance.version,
            "params": json.loads(r["params"]),
            "seed": int(r["seed"]),
            "instance_id": iid,
        }
        records.append(
            {
                "data_source": f"campflow/{r['bootcamp']}",
                # verl splits a message's text on <image> and fills each from `images`, in order
                "prompt": [{"role": m["role"], "content": content_text(m["content"], image="<image>")} for m in prompt],
                "images": [{"bytes": png_bytes(u), "path": None} for u in image_urls(prompt)],
                "ability": "agentic-tool-use",
                "reward_model": {"style": "rule", "ground_truth": json.dumps(identity, sort_keys=True)},
                "extra_info": {
                    "index": index,
                    "split": "train",
                    "instance_id": iid,
                    "bootcamp": r["bootcamp"],
                    "tools": json.dumps(bootcamp.tool_schemas(instance)),
                },
            }
        )
    if not any(rec["images"] for rec in records):
        for rec in records:  # text bootcamps only: no images column, as before
            del rec["images"]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    pq.write_table(pa.Table.from_pylist(records), tmp)
    tmp.replace(out)
    ds_id = dataset_id("rl", sorted(instances), cfg)
    _record(store, ds_id, "rl", out, len(records), cfg, run_ids, dropped)
    return DatasetBuild(
        ds_id, "rl", out, len(records), dict(Counter(r["bootcamp"] for r in instances.values())), dict(dropped)
    )


def save_rows(rows: list[dict[str, Any]], features: Any, path: Path) -> None:
    """Save ``rows`` as a datasets folder at ``path``, whole or not at all; an existing folder is kept (a
    dataset's id is a content hash: it already holds these rows)."""
    import datasets

    if path.exists():
        return
    tmp = path.with_name(path.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)  # left by a killed build
    datasets.Dataset.from_list(rows, features=features).save_to_disk(str(tmp))
    tmp.replace(path)  # a finished folder appears whole, or not at all
