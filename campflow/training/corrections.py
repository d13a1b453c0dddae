"""On-policy corrections: the current model plays, and at every state it reaches the demonstrator says what
it would do there.

:class:`CorrectingPolicy` wraps the model being trained. On each turn it asks the bootcamp's grounded
demonstrator (:meth:`~campflow.bootcamps.base.Bootcamp.demonstrate`) for its next action from the live
state and the conversation exactly as the model sees it, records that action as the **label** of that
context (the model's own history, the demonstrator's next step: DAgger's labels), then asks the model.
Until the model's call first differs from the label (compared after
:meth:`~campflow.bootcamps.base.Bootcamp.normalize_arguments`) the model's reply is played; from that turn
on, ``follow="demonstrator"`` plays the demonstrator's action (the episode returns to a correct path and
later labels come from states near it) and ``follow="model"`` keeps playing the model (later labels come
from where the model's own mistakes lead). Either way every label is taken from a state the episode
reached with the model asked in it, never from the demonstrator's own episode.

:func:`write_corrections` stores a run's labels (table ``corrections``); :func:`build_corrected_dataset`
makes an SFT dataset of the demonstrator's transcripts beside the corrections of every cycle so far
(DAgger's aggregate), pre-tokenized so that a correction's loss falls on its label alone, never on the
model's own history.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
import pyarrow as pa

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.chat import template_messages
from campflow.agents.oracle import native_call
from campflow.bootcamps import registry
from campflow.bootcamps.base import Action, Bootcamp, Instance
from campflow.bootcamps.splits import assert_not_held_out, is_eval_seed
from campflow.config import FilterConfig
from campflow.rollout.episode import episode_id
from campflow.rollout.parsing import parse_turn
from campflow.serialization import to_json
from campflow.storage.store import Store, now
from campflow.training.filtering import DatasetBuild, EmptyDatasetError, candidate_episodes, dataset_id, select

FOLLOW = ("demonstrator", "model")


@dataclass
class Correction:
    """One label: at ``turn`` of an episode, the context the model saw and the demonstrator's next action.

    Attributes:
        context: the messages as the model saw them before this turn (prompt first).
        label: the demonstrator's action from that state.
        model_action: the model's first valid call there (None: no valid call).
        agreed: whether the model's call was the label's (after normalization).
        played: who acted at this turn, ``model`` or ``demonstrator``.
    """

    instance_id: str
    sample: int
    turn: int
    context: list[dict[str, Any]]
    label: Action
    model_action: Action | None
    agreed: bool
    played: str


@dataclass
class CorrectingPolicy(Policy):
    """The model plays and the demonstrator labels every state it reaches (module docstring).

    Args:
        model: the current model's policy.
        follow: who acts after the model's first disagreement, ``demonstrator`` or ``model``.
    """

    model: Policy
    follow: Literal["demonstrator", "model"] = "demonstrator"
    corrections: list[Correction] = field(default_factory=list)
    _diverged: set[tuple[str, int]] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.follow not in FOLLOW:
            raise ValueError(f"follow = {self.follow!r}: expected one of {', '.join(FOLLOW)}")
        self.model_id = self.model.model_id  # the episodes are the model's, as played
        self.send_reasoning, self.suspends = self.model.send_reasoning, self.model.suspends

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        bootcamp, instance = context.bootcamp, context.instance
        seen = [dict(m) for m in messages]  # as the model sees it now: the label's context
        label = bootcamp.demonstrate(instance, context.state, seen)
        reply = await self.model.respond(messages, tools, context)
        mine = _first_call(bootcamp, instance, reply)
        agreed = mine is not None and _same(bootcamp, instance, mine, label)
        key = (instance.id, context.sample)
        if not agreed:
            self._diverged.add(key)
        demonstrate = self.follow == "demonstrator" and key in self._diverged
        self.corrections.append(
            Correction(
                instance.id,
                context.sample,
                context.turn,
                seen,
                label,
                mine,
                agreed,
                "demonstrator" if demonstrate else "model",
            )
        )
        if demonstrate:
            return PolicyReply(tool_calls=[native_call(label, f"call_{context.turn}_0")])
        return reply


def _first_call(bootcamp: Bootcamp, instance: Instance, reply: PolicyReply) -> Action | None:
    tools = {t.name: t for t in bootcamp.tools(instance)}
    parsed = parse_turn(reply.content, reply.tool_calls, tools, reasoning=reply.reasoning)
    for call in parsed.calls:
        if call.error is None:
            return Action(call.name, call.arguments.model_dump(mode="json", by_alias=True))
    return None


def _same(bootcamp: Bootcamp, instance: Instance, a: Action, b: Action) -> bool:
    if a.name != b.name:
        return False
    try:
        return bootcamp.normalize_arguments(instance, a.name, a.arguments) == bootcamp.normalize_arguments(
            instance, b.name, b.arguments
        )
    except Exception:  # arguments that do not fit the schema are not the label's
        return False


# -- the store: the corrections table ----------------------------------------------------------------


def correction_id(run_id: str, instance_id: str, sample: int, turn: int) -> str:
    """Content id of one label: the same run, episode and turn, the same id."""
    return hashlib.sha256(f"{run_id}|{instance_id}|{sample}|{turn}".encode()).hexdigest()[:20]


def write_corrections(store: Store, run_id: str, corrections: Sequence[Correction]) -> int:
    """Write a corrections run's labels to ``corrections`` in one batch (a second write replaces the run's)."""
    bootcamps = {
        r["instance_id"]: r["bootcamp"]
        for r in store.query("SELECT DISTINCT instance_id, bootcamp FROM episodes WHERE run_id = ?", [run_id])
    }
    rows = [c for c in corrections if c.instance_id in bootcamps]
    ts = now()
    table = pa.table(
        {
            "correction_id": [correction_id(run_id, c.instance_id, c.sample, c.turn) for c in rows],
            "run_id": [run_id] * len(rows),
            "episode_id": [episode_id(run_id, c.instance_id, c.sample) for c in rows],
            "bootcamp": [bootcamps[c.instance_id] for c in rows],
            "instance_id": [c.instance_id for c in rows],
            "turn": pa.array([c.turn for c in rows], pa.int32()),
            "context": [to_json(c.context) for c in rows],
            "label_tool": [c.label.name for c in rows],
            "label_arguments": [to_json(dict(c.label.arguments)) for c in rows],
            "model_tool": [c.model_action.name if c.model_action else None for c in rows],
            "model_arguments": [to_json(dict(c.model_action.arguments)) if c.model_action else None for c in rows],
            "agreed": pa.array([c.agreed for c in rows], pa.bool_()),
            "played": [c.played for c in rows],
            "created_at": pa.array([ts] * len(rows), pa.timestamp("us")),
        }
    )
    with store.transaction(_campflow_corrections=table) as con:
        con.execute("DELETE FROM corrections WHERE run_id = ?", [run_id])
        con.execute("INSERT INTO corrections BY NAME SELECT * FROM _campflow_corrections")
    return len(rows)


# -- datasets: demonstrations beside corrections ---------------------------------------------------------

_CORRECTIONS_SQL = """
    SELECT c.correction_id, c.run_id, c.episode_id, c.bootcamp, c.instance_id, c.turn, c.context, c.label_tool,
           c.label_arguments, i.split, i.seed, i.params
    FROM corrections c LEFT JOIN instances i USING (instance_id)
    WHERE c.run_id IN ({marks}) ORDER BY c.correction_id
"""


def correction_runs(store: Store) -> list[str]:
    """Every run that wrote corrections, oldest first: DAgger trains on all of them together."""
    return [
        r["run_id"]
        for r in store.query(
            "SELECT run_id, min(created_at) AS first_at FROM corrections GROUP BY run_id ORDER BY first_at, run_id"
        )
    ]


def labelled_messages(context: Sequence[Mapping[str, Any]], label: Action) -> list[dict[str, Any]]:
    """A correction as a conversation: the context as the model saw it, then the demonstrator's call."""
    call = native_call(label, "call_label")
    return [*(dict(m) for m in context), {"role": "assistant", "content": "", "tool_calls": [call]}]


def tokenize(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *, last_only: bool
) -> tuple[list[int], list[int]]:
    """``input_ids`` and ``completion_mask`` of a conversation under the tokenizer's chat template (its
    training version, with ``{% generation %}`` markers, as TRL uses): the mask covers every assistant turn,
    or with ``last_only`` the last one alone (a correction's label; the model's own history is context)."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = tokenizer.chat_template
    if not has_generation_markers(template):
        template = get_training_chat_template(tokenizer)
    out = tokenizer.apply_chat_template(
        # a correction's context is the model's own history, malformed calls and all: kept as it was shown
        template_messages(list(messages), strict=not last_only),
        tools=list(tools),
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    if last_only:
        start = len(mask)
        while start > 0 and mask[start - 1] == 0:
            start -= 1
        while start > 0 and mask[start - 1] == 1:
            start -= 1
        mask = [0] * start + mask[start:]
    return ids, mask


def build_corrected_dataset(
    store: Store,
    workspace: Path,
    demonstration_runs: Sequence[str],
    corrections_from: Sequence[str],
    cfg: FilterConfig,
    tokenizer: Any,
) -> DatasetBuild:
    """An SFT dataset of the demonstrator's transcripts (``demonstration_runs``, through the filter) beside
    the corrections of ``corrections_from`` (runs; DAgger: every cycle's so far), pre-tokenized with the
    model's template: a demonstration's loss on all its assistant turns, a correction's on its label
    alone. Rows say which they are (``teacher``: the demonstration's model id, or ``correction``); the
    ``datasets`` row counts both. No row's instance may be an eval or probe instance.

    Raises:
        EmptyDatasetError: neither a demonstration nor a correction is left.
    """
    import datasets

    eval_ids, probe_ids = store.eval_ids(), store.probe_ids()
    kept, dropped = select(candidate_episodes(store, demonstration_runs), cfg, eval_ids, probe_ids)
    rows: list[dict[str, Any]] = []
    tools_of: dict[str, list[dict[str, Any]]] = {}

    def tools(r: Mapping[str, Any]) -> list[dict[str, Any]]:
        if r["instance_id"] not in tools_of:
            bootcamp = registry.make(r["bootcamp"])
            tools_of[r["instance_id"]] = bootcamp.tool_schemas(bootcamp.generate(orjson.loads(r["params"]), r["seed"]))
        return tools_of[r["instance_id"]]

    for r in kept:
        ids, mask = tokenize(tokenizer, json.loads(r["transcript"]), tools(r), last_only=False)
        rows.append(_row(r, ids, mask, str(r["model_id"]), r["episode_id"]))
    labels = 0
    if corrections_from:
        marks = ", ".join("?" for _ in corrections_from)
        for r in store.query(_CORRECTIONS_SQL.format(marks=marks), list(corrections_from)):
            if r["split"] is None:
                dropped["correction_unrecorded_instance"] += 1
                continue
            if r["split"] == "eval" or r["instance_id"] in eval_ids or is_eval_seed(int(r["seed"])):
                dropped["correction_eval_split"] += 1
                continue
            if r["split"] == "probe" or r["instance_id"] in probe_ids:
                dropped["correction_probe_split"] += 1
                continue
            label = Action(r["label_tool"], orjson.loads(r["label_arguments"]))
            messages = labelled_messages(orjson.loads(r["context"]), label)
            ids, mask = tokenize(tokenizer, messages, tools(r), last_only=True)
            rows.append(_row(r, ids, mask, "correction", r["correction_id"]))
            labels += 1
    if not rows:
        raise EmptyDatasetError(
            f"no demonstration of run(s) {', '.join(demonstration_runs)} passed the filter and no correction "
            f"was found (dropped: {dict(dropped) or 'none found'})"
        )
    assert_not_held_out((r["instance_id"] for r in rows), eval_ids, probe_ids, what="the SFT dataset")
    ds_id = dataset_id("sft-corrected", [r["source_id"] for r in rows], cfg)
    path = workspace / "datasets" / ds_id
    per_bootcamp = dict(Counter(r["bootcamp"] for r in rows))
    if not path.exists():  # the id is a content hash: an existing folder already holds these rows
        tmp = path.with_name(path.name + ".partial")
        if tmp.exists():
            shutil.rmtree(tmp)
        datasets.Dataset.from_list(rows).save_to_disk(str(tmp))
        tmp.replace(path)
    summary = {
        **cfg.model_dump(mode="json"),
        "dropped": dict(dropped),
        "demonstrations": len(rows) - labels,
        "corrections": labels,
        "correction_runs": list(corrections_from),
    }
    with store.connection() as con:
        con.execute(
            "INSERT OR REPLACE INTO datasets (dataset_id, kind, path, rows, filter, source_runs, created_at) "
            "VALUES (?, 'sft', ?, ?, ?, ?, ?)",
            [
                ds_id,
                store.record_path(path),
                len(rows),
                to_json(summary),
                [*demonstration_runs, *corrections_from],
                now(),
            ],
        )
    return DatasetBuild(ds_id, "sft", path, len(rows), per_bootcamp, dict(dropped))


def _row(r: Mapping[str, Any], ids: list[int], mask: list[int], teacher: str, source_id: str) -> dict[str, Any]:
    return {
        "input_ids": ids,
        "completion_mask": mask,
        "teacher": teacher,
        "source_id": source_id,
        "instance_id": r["instance_id"],
        "bootcamp": r["bootcamp"],
    }
