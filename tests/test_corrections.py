"""On-policy corrections (issue 40, deliverable 3): the model plays, the demonstrator labels every state it
reached, and SFT data holds those labels beside the demonstrations, never an eval or probe instance."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError

from campflow.agents.oracle import DemonstratorPolicy, NoisyOraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.base import Action
from campflow.bootcamps.splits import eval_instances, train_instances
from campflow.config import FilterConfig
from campflow.errors import ToolError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage.store import Store
from campflow.training.corrections import (
    CorrectingPolicy,
    build_corrected_dataset,
    correction_runs,
    write_corrections,
)

NAMES = ("calculator", "maze")
NOISE = {"p_wrong_move": 0.3, "p_malformed": 0.1, "p_wrong_answer": 0.2}


def _play(store: Store, run_id: str, instances, follow: str, split: str = "train") -> CorrectingPolicy:
    store.write_instances(instances, split=split)
    policy = CorrectingPolicy(NoisyOraclePolicy(seed=3, **NOISE), follow)
    specs = [EpisodeSpec(registry.make(i.bootcamp), i) for i in instances]
    store.start_run(run_id, "corrections", {}, policy.model_id)
    store.write_episodes(asyncio.run(run_episodes(specs, policy, run_id=run_id)))
    write_corrections(store, run_id, policy.corrections)
    store.finish_run(run_id, "completed", {})
    return policy


def _replayed(bootcamp, instance, messages):
    """The world after the calls of ``messages``, played on a fresh one as the engine ran them."""
    state = bootcamp.new_state(instance)
    for m in messages:
        for call in m.get("tool_calls") or () if m.get("role") == "assistant" else ():
            try:
                args = json.loads(call["function"]["arguments"])
                bootcamp.apply(instance, state, Action(call["function"]["name"], args))
            except (ToolError, ValidationError, KeyError, TypeError, ValueError):
                pass  # refused or unrunnable: the engine left the world as it was
    return state


@pytest.fixture(scope="module")
def played(tmp_path_factory) -> tuple[Store, dict[str, CorrectingPolicy]]:
    store = Store(tmp_path_factory.mktemp("corrections") / "campflow.duckdb")
    instances = [i for n in NAMES for i in train_instances(registry.make(n), 12, seed=0, levels=[1, 2])]
    policies = {follow: _play(store, f"c-{follow}", instances, follow) for follow in ("model", "demonstrator")}
    return store, policies


def test_every_label_is_the_demonstrators_action_at_a_state_the_episode_reached(played) -> None:
    store, _ = played
    episodes = {r["episode_id"]: r for r in store.query("SELECT * FROM episodes WHERE run_id LIKE 'c-%'")}
    rows = store.query("SELECT * FROM corrections ORDER BY run_id, episode_id, turn")
    assert rows and {r["episode_id"] for r in rows} == set(episodes)
    disagreed = 0
    for r in rows:
        e = episodes[r["episode_id"]]
        transcript = json.loads(e["transcript"])
        turns = [at for at, m in enumerate(transcript) if m["role"] == "assistant"]
        assert r["turn"] < len(turns), r
        context = json.loads(r["context"])
        # the label's context is the episode's own transcript up to that turn: a state it reached
        assert context == transcript[: turns[r["turn"]]], (r["episode_id"], r["turn"])
        bootcamp = registry.make(r["bootcamp"])
        instance = bootcamp.generate(
            json.loads(
                store.query("SELECT params FROM instances WHERE instance_id = ?", [r["instance_id"]])[0]["params"]
            ),
            store.scalar("SELECT seed FROM instances WHERE instance_id = ?", [r["instance_id"]]),
        )
        # ... and its label is what the demonstrator does from the world those calls made
        expected = bootcamp.demonstrate(instance, _replayed(bootcamp, instance, context), context)
        assert (r["label_tool"], json.loads(r["label_arguments"])) == (expected.name, dict(expected.arguments)), r
        played_call = (transcript[turns[r["turn"]]].get("tool_calls") or [None])[0]
        if r["played"] == "demonstrator":  # after a disagreement the demonstrator's call is what was played
            assert played_call["function"]["name"] == r["label_tool"], r
            assert json.loads(played_call["function"]["arguments"]) == json.loads(r["label_arguments"]), r
        disagreed += not r["agreed"]
    by_run = {f: [r for r in rows if r["run_id"] == f"c-{f}"] for f in ("model", "demonstrator")}
    assert disagreed and all(r["played"] == "model" for r in by_run["model"])
    assert any(r["played"] == "demonstrator" for r in by_run["demonstrator"])
    for follow, policy in played[1].items():  # one label per turn of every episode, none more
        turns = store.scalar("SELECT sum(turns) FROM episodes WHERE run_id = ?", [f"c-{follow}"])
        assert len(policy.corrections) == len(by_run[follow]) == turns


def test_the_dataset_trains_on_labels_beside_demonstrations_and_never_on_held_out_instances(played, tmp_path) -> None:
    from campflow.training.tinymodel import build_tokenizer, corpus

    store, _ = played
    # demonstrations: the demonstrator's own episodes on other train instances
    demos = [i for n in NAMES for i in train_instances(registry.make(n), 4, seed=1, levels=[1])]
    store.write_instances(demos, split="train")
    store.start_run("demo", "collect", {}, "demonstrator")
    specs = [EpisodeSpec(registry.make(i.bootcamp), i) for i in demos]
    store.write_episodes(asyncio.run(run_episodes(specs, DemonstratorPolicy(), run_id="demo")))
    store.finish_run("demo", "completed", {})
    # a corrections run that (wrongly) played eval and probe instances: none of them may enter the data
    held = eval_instances(registry.make("calculator"), 3)
    _play(store, "c-eval", held, "model", split="eval")
    probe = train_instances(registry.make("calculator"), 2, seed=9, levels=[3])
    _play(store, "c-probe", probe, "model", split="probe")
    runs = correction_runs(store)
    assert set(runs) == {"c-model", "c-demonstrator", "c-eval", "c-probe"}

    tokenizer = build_tokenizer(list(corpus(list(NAMES), 2, 0)), 1000)
    built = build_corrected_dataset(store, tmp_path, ["demo"], runs, FilterConfig(), tokenizer)

    import datasets

    ds = datasets.load_from_disk(str(built.path))
    held_out = store.eval_ids() | store.probe_ids()
    assert held_out >= {i.id for i in held + probe}
    assert not set(ds["instance_id"]) & held_out  # fails if an eval or probe instance entered the data
    assert built.dropped["correction_eval_split"] > 0 and built.dropped["correction_probe_split"] > 0
    teachers = set(ds["teacher"])
    assert teachers == {"demonstrator", "correction"}
    recorded = json.loads(store.scalar("SELECT filter FROM datasets WHERE dataset_id = ?", [built.dataset_id]))
    assert recorded["corrections"] == ds["teacher"].count("correction") > 0
    assert recorded["demonstrations"] == ds["teacher"].count("demonstrator") == len(demos)
    labels = {r["correction_id"]: r for r in store.query("SELECT * FROM corrections")}
    for row in ds:
        masked = tokenizer.decode([t for t, m in zip(row["input_ids"], row["completion_mask"], strict=True) if m])
        if row["teacher"] == "correction":
            # the loss falls on the label alone: its call, not the model's own history
            label = labels[row["source_id"]]
            assert masked.count("<tool_call>") == 1 and label["label_tool"] in masked, masked
            for value in json.loads(label["label_arguments"]).values():
                assert str(value) in masked, (masked, label)
        else:
            turns = store.scalar("SELECT turns FROM episodes WHERE episode_id = ?", [row["source_id"]])
            assert masked.count("<tool_call>") == turns  # a demonstration's every turn
