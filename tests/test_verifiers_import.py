"""A verifiers environment's custom ``env_response`` protocol played as the environment defines it, and
synthesis of new dataset rows for an imported verifiers bootcamp.

The environment (tests/verifiers_envs/tutor_dialogue.py, written against verifiers' public API the way its
documentation writes a ``MultiTurnEnv``) tutors multiplication: each reply is answered by its own
``env_response`` ("too high", "Correct."), a ``@vf.stop`` condition ends the rollout on a right answer,
its own turn budget after three attempts, and the rubric gives 1, 1/2 or 1/3 for a right first, second
or third attempt. One import (vetting, the hack battery) serves every test here; the verifiers
environment is built by ``make verifiers`` (where it is not, the tests skip, except in CI).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps.splits import EVAL_SEED_BASE, eval_instances, train_instances
from campflow.config import load_config
from campflow.errors import InvalidParamsError
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec
from campflow.storage.store import Store
from campflow.testing.scripted_server import ReplyScript, ScriptedEndpoint
from tests.conftest import REPO

VENV = REPO / ".venv-verifiers" / "bin" / "python"
TUTOR = REPO / "tests" / "verifiers_envs" / "tutor_dialogue.py"
SETTINGS = RolloutSettings(episode_timeout=120.0)
QUESTION = "What is {a} * {b}? Reply with the number only."


@pytest.fixture(scope="module")
def tutor(tmp_path_factory):
    """(store, spec, bootcamp, notes, cfg) of the tutoring environment imported as ``vf-tutor``."""
    if not VENV.exists():
        if os.environ.get("CI") or os.environ.get("CAMPFLOW_REQUIRE_VLLM"):
            pytest.fail("CI builds .venv-verifiers (make verifiers); it is missing")
        pytest.skip("verifiers' environment is made by `make verifiers`")
    from campflow.sources.verifiers_vetting import vet_environment
    from campflow.storage.imports import import_bootcamp

    cfg = load_config(None, {"workspace.path": str(tmp_path_factory.mktemp("vf-tutor"))}, env={})
    store = Store(cfg.workspace.db_path)
    notes: list[str] = []
    options = vet_environment(str(TUTOR), {}, say=notes.append)
    spec, bootcamp = import_bootcamp(
        ImportSpec(name="vf-tutor", adapter="verifiers", source=str(TUTOR), options=options),
        store,
        cross_process=False,
        say=notes.append,
    )
    return store, spec, bootcamp, notes, cfg


def factors(messages: list[dict]) -> tuple[int, int]:
    user = next(m["content"] for m in messages if m["role"] == "user")
    a, b = (int(x) for x in re.findall(r"\d+", user)[:2])
    return a, b


def careless(request: dict) -> dict:
    """A model that replies through ``reply``: right at once where a % 3 == 2, right at its second attempt
    (after "too low") where a % 3 == 1, and always one too high where a % 3 == 0."""
    messages = request["messages"]
    a, b = factors(messages)
    attempt = sum(1 for m in messages if m["role"] == "assistant")
    guess = a * b + {0: 1, 1: -1 if attempt == 0 else 0, 2: 0}[a % 3]
    args = json.dumps({"message": str(guess)})
    call = {"id": f"c{attempt}", "type": "function", "function": {"name": "reply", "arguments": args}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


@pytest.fixture(scope="module")
def careless_run(tutor):
    """The careless model's episodes on every train row, stored as run ``tutor-careless``."""
    from campflow.agents.openai_policy import EndpointPolicy

    store, _, bootcamp, *_ = tutor
    instances = [bootcamp.generate({"level": 1, "row": r}, 0) for r in range(len(bootcamp.rows[("train", 1)]))]
    store.write_instances(instances, split="train")
    with ScriptedEndpoint(careless) as endpoint:
        policy = EndpointPolicy("scripted", base_url=endpoint.url, max_retries=0)
        store.start_run("tutor-careless", "evaluate", {}, policy.model_id)
        episodes = asyncio.run(
            run_episodes([EpisodeSpec(bootcamp, i) for i in instances], policy, SETTINGS, run_id="tutor-careless")
        )
    store.write_episodes(episodes)
    store.finish_run("tutor-careless", "completed", {})
    return instances, episodes


@pytest.mark.slow  # it carries the module's import (two environment processes, the hack battery): ~25 s here
def test_a_custom_env_response_protocol_is_played_as_the_environment_defines_it(tutor, careless_run) -> None:
    from campflow.training.filtering import build_sft_dataset

    store, spec, bootcamp, notes, cfg = tutor
    assert spec.options["description"]["protocol"] == "multi_turn" and spec.options["oracle"], notes
    assert spec.options["answer_format"] == "{answer}" and "dropped" not in spec.options and not notes, notes
    instance = bootcamp.generate(None, 0)
    assert [t.name for t in bootcamp.tools(instance)] == ["reply", "submit"]
    assert bootcamp.max_turns(instance) == 4  # the environment's three attempts, and one turn to spare
    assert "`reply`" in bootcamp.prompt(instance)[0]["content"]
    probes = store.query(
        "SELECT count(*) AS n, coalesce(max(reward) FILTER (WHERE verdict <> 'oracle_agrees'), 0) AS top, "
        "count(*) FILTER (WHERE verdict = 'hack') AS hacks FROM verifier_probes WHERE subject = 'vf-tutor'"
    )[0]
    assert probes["n"] > 10 and probes["top"] == 0.0 and probes["hacks"] == 0, probes  # empty, echoed, hedged, 100 KB

    evals, train = eval_instances(bootcamp, 3), train_instances(bootcamp, 6)
    assert {i.data["split"] for i in evals} == {"eval"} and {i.data["split"] for i in train} == {"train"}
    assert not {json.dumps(i.data["prompt"]) for i in evals} & {json.dumps(i.data["prompt"]) for i in train}
    oracle = asyncio.run(run_episodes([EpisodeSpec(bootcamp, i) for i in evals], OraclePolicy(), SETTINGS))
    assert [(e.reward, e.termination) for e in oracle] == [(1.0, Termination.SOLVED)] * 3

    instances, episodes = careless_run
    kinds = set()
    for instance, episode in zip(instances, episodes, strict=True):
        a, b = factors(instance.data["prompt"])
        said = [m["content"] for m in episode.transcript if m["role"] == "tool"]  # the environment's turns
        kinds.add(a % 3)
        if a % 3 == 2:
            expected, replies = 1.0, 1
            assert said == ["Correct.\n(The environment has ended the episode.)"], said
        elif a % 3 == 1:
            expected, replies = 0.5, 2
            assert said[0] == f"Not quite: {a * b - 1} is too low. Try again." and said[1].startswith("Correct.")
        else:  # three wrong attempts: the environment's own budget ends the rollout before it answers the last
            expected, replies = 0.0, 3
            assert said[:2] == [f"Not quite: {a * b + 1} is too high. Try again."] * 2, said
            assert said[2] == "(The environment has ended the episode.)"
        assert (episode.reward, episode.success) == (expected, expected == 1.0), episode.transcript
        assert episode.termination == (Termination.SOLVED if expected == 1.0 else Termination.WRONG_ANSWER)
        assert episode.details["metrics"]["attempts"] == replies == episode.turns
    assert kinds == {0, 1, 2}
    stored = store.query(
        "SELECT reward, termination, turns FROM episodes WHERE run_id = 'tutor-careless' ORDER BY instance_id"
    )
    assert len(stored) == len(episodes) and sorted(r["reward"] for r in stored) == sorted(e.reward for e in episodes)
    build = build_sft_dataset(store, cfg.workspace.path, ["tutor-careless"], cfg.training.filter)
    assert build.rows == sum(e.success for e in episodes)  # the solved dialogues are training rows


def test_synthesis_proposes_rows_the_rubric_and_their_answer_validate_as_train_instances(tutor, careless_run) -> None:
    from campflow.config import SynthesisConfig, SynthesisLLMConfig
    from campflow.synthesis.pipeline import synthesize
    from campflow.synthesis.validate import variant_seeds

    store, _, bootcamp, *_ = tutor
    described = bootcamp.describe()  # what the LLM synthesizer reads: a new task is a new row
    assert (
        '"new_row": {"question"' in described["description"] and "new_row" in described["params_schema"]["properties"]
    )

    def row(a: int, b: int, answer: str) -> dict:
        return {"level": 1, "new_row": {"question": QUESTION.format(a=a, b=b), "answer": answer}}

    proposals = {
        "new": row(9, 13, "117"),
        "words": row(9, 7, "sixty-three"),  # the environment reads whole numbers only: its own answer earns 0
        "eval": row(12, 13, "156"),  # an eval row's question
        "train": row(2, 3, "6"),  # a train row's question: no new row
    }
    reply = json.dumps({"proposals": [{"params": p, "rationale": k} for k, p in proposals.items()]})
    cfg = SynthesisConfig(
        synthesizer="llm", n_per_cluster=4, max_clusters=1, min_cluster_size=1, instances_per_variant=2,
        probes_per_variant=0, calibration_samples=0,
    )  # fmt: skip
    with ScriptedEndpoint(ReplyScript([reply])) as server:
        cfg.llm = SynthesisLLMConfig(model="scripted", base_url=server.url, max_requests=1)
        summary = synthesize(store, "tutor-careless", cfg, run_id="tutor-synth")
    rows = store.query(
        "SELECT variant_id, rationale, status, reject_kind, reject_reason, instance_ids FROM variants "
        "WHERE bootcamp = 'vf-tutor' AND run_id = 'tutor-synth'"
    )
    got = {r["rationale"]: r for r in rows}
    assert {k: (r["status"], r["reject_kind"]) for k, r in got.items()} == {
        "new": ("accepted", None),
        "words": ("rejected", "unsolvable"),
        "eval": ("rejected", "unsolvable"),
        "train": ("rejected", "unsolvable"),
    }, {k: r["reject_reason"] for k, r in got.items()}
    assert "the oracle scored 0" in got["words"]["reject_reason"]
    assert "eval row 0's; an eval row is never trained on" in got["eval"]["reject_reason"]
    assert "train row 0's; it is no new row" in got["train"]["reject_reason"]
    assert summary.accepted == 1

    accepted = got["new"]
    seeds = variant_seeds(accepted["variant_id"], 2)
    expected = [bootcamp.generate(proposals["new"], s) for s in seeds]
    assert list(accepted["instance_ids"]) == [i.id for i in expected]  # deterministic: params and seed
    stored = store.query(
        "SELECT instance_id, split, origin FROM instances WHERE variant_id = ? ORDER BY instance_id",
        [accepted["variant_id"]],
    )
    assert {(r["split"], r["origin"]) for r in stored} == {("train", "synthesized")}
    assert sorted(r["instance_id"] for r in stored) == sorted(i.id for i in expected)
    assert expected[0].data["prompt"] == [
        {"role": "system", "content": "You are being tutored in arithmetic."},
        {"role": "user", "content": QUESTION.format(a=9, b=13)},
    ]  # as the environment formats its own question column
    battery = store.query(
        "SELECT count(*) AS n, count(*) FILTER (WHERE verdict = 'hack') AS hacks, "
        "coalesce(max(reward) FILTER (WHERE verdict <> 'oracle_agrees'), 0) AS top "
        "FROM verifier_probes WHERE subject = ?",
        [accepted["variant_id"]],
    )[0]
    assert battery["n"] > 10 and battery["hacks"] == 0 and battery["top"] == 0.0, battery
    with pytest.raises(InvalidParamsError, match="eval-range seeds play the eval rows"):
        bootcamp.generate(proposals["new"], EVAL_SEED_BASE)

    # the accepted row plays through the engine as the environment's own rows do
    (played,) = asyncio.run(run_episodes([EpisodeSpec(bootcamp, expected[0])], OraclePolicy(), SETTINGS))
    assert (played.reward, played.termination) == (1.0, Termination.SOLVED)


def test_an_environment_process_that_dies_mid_dialogue_ends_that_episode_as_infra_error(tutor) -> None:
    from campflow.agents.openai_policy import EndpointPolicy

    _, _, bootcamp, *_ = tutor
    instance = bootcamp.generate({"level": 1, "row": 3}, 0)
    assert factors(instance.data["prompt"])[0] % 3 == 0  # the careless model is never right here
    process = bootcamp.process()

    def dies_after_one_turn(request: dict) -> dict:
        if any(m["role"] == "tool" for m in request["messages"]):  # the environment has answered once
            os.kill(process.pid, signal.SIGKILL)
            while process.alive:
                time.sleep(0.01)
        return careless({**request, "messages": request["messages"][:2]})  # one too high

    policy = lambda url: EndpointPolicy("scripted", base_url=url, max_retries=0)  # noqa: E731
    with ScriptedEndpoint(dies_after_one_turn) as endpoint:
        (died,) = asyncio.run(run_episodes([EpisodeSpec(bootcamp, instance)], policy(endpoint.url), SETTINGS))
    assert died.termination == Termination.INFRA_ERROR and died.reward == 0.0, died
    assert "exited (-9)" in (died.error or ""), died.error  # the rollout's process, named
    with ScriptedEndpoint(careless) as endpoint:  # the next episode plays on the fresh process
        (again,) = asyncio.run(run_episodes([EpisodeSpec(bootcamp, instance)], policy(endpoint.url), SETTINGS))
    assert again.termination != Termination.INFRA_ERROR and bootcamp.process() is not process
