"""Variant synthesis: the LLM synthesizer against a real local endpoint, mutation, validation, lineage,
idempotence and the curriculum."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from aiohttp import web
from pydantic import Field

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.oracle import NoisyOraclePolicy, OraclePolicy, native_call
from campflow.bootcamps import registry
from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Instance,
    NoArgs,
    Observation,
    Params,
    Score,
    State,
    ToolArgs,
    tool,
)
from campflow.bootcamps.splits import eval_instances, train_instances
from campflow.config import SynthesisConfig, SynthesisLLMConfig, load_config
from campflow.errors import SynthesisError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage.store import Store
from campflow.synthesis.curriculum import current_level, step_level, update_curriculum
from campflow.synthesis.llm import LLMSynthesizer, read_proposals
from campflow.synthesis.mutate import MutationSynthesizer
from campflow.synthesis.pipeline import analyze_run, synthesize
from campflow.synthesis.proposals import Proposal, load_contexts
from campflow.synthesis.validate import RejectKind, ValidationSettings, validate_proposals
from campflow.testing.scripted_server import ReplyScript, ScriptedEndpoint
from tests.conftest import run_cli
from tests.planted import RUN_ID, in_planted_region, planted_policy, record_planted_run
from tests.policies import WrongAnswerPolicy

# ---------------------------------------------------------------------------------------------
# A tiny test-only bootcamp whose generation fails for some valid params and whose oracle runs out
# of turns for others: the two ways a proposal can be unsolvable.


class CountdownParams(Params):
    start: int = Field(12, ge=1, le=100, description="the number to count down from")
    step: int = Field(3, ge=1, le=10, description="subtracted per tick; must divide start")


class AnswerArgs(ToolArgs):
    answer: int = Field(description="how many ticks reach zero")


@dataclass
class CountdownState(State):
    remaining: int = 0
    ticks: int = 0


class Countdown(Bootcamp[CountdownParams, CountdownState]):
    """Count the ticks from a number down to zero.

    Call `tick` to subtract the step once, then `submit` how many ticks reached exactly zero.
    """

    name = "countdown"
    params_model = CountdownParams
    state_model = CountdownState
    default_max_turns = 12  # so counts of 12 ticks or more are beyond the oracle
    levels = {
        1: CountdownParams(level=1, start=12, step=3),
        2: CountdownParams(level=2, start=30, step=5),
        3: CountdownParams(level=3, start=40, step=4),
    }

    def build(self, params: CountdownParams, rng: random.Random) -> dict:
        if params.start % params.step:
            raise ValueError(f"step {params.step} does not divide start {params.start}")
        return {
            "start": params.start,
            "step": params.step,
            "answer": params.start // params.step,
            "name": rng.choice(["Ada", "Ben", "Chen"]),
        }

    def prompt(self, instance: Instance) -> list[dict]:
        return self.chat(
            f"{instance.data['name']} counts down from {instance.data['start']} in steps of {instance.data['step']}."
        )

    def new_state(self, instance: Instance) -> CountdownState:
        return CountdownState(remaining=instance.data["start"])

    @tool
    def tick(self, instance: Instance, state: CountdownState, args: NoArgs) -> Observation:
        """Subtract the step once."""
        state.remaining -= instance.data["step"]
        state.ticks += 1
        return Observation(f"{state.remaining} left")

    @tool(final=True)
    def submit(self, instance: Instance, state: CountdownState, args: AnswerArgs) -> Observation:
        """Submit the number of ticks. This ends the episode."""
        state.answer = args.answer
        return Observation("Submitted.", final=True)

    def score(self, instance: Instance, state: CountdownState, transcript: object) -> Score:
        ok = state.answer == instance.data["answer"]
        return Score(float(ok), ok, {} if ok else {"reason": "miscount"})

    def oracle(self, instance: Instance, state: CountdownState) -> Action:
        if state.ticks < instance.data["answer"]:
            return Action("tick", {})
        return Action("submit", {"answer": state.ticks})

    def wrong_answer(self, instance: Instance, state: CountdownState, rng: random.Random) -> Action:
        return Action("submit", {"answer": instance.data["answer"] + 1})


class HalfRight(Policy):
    """Right on sample 0 of every instance, wrong on sample 1; always wrong from start 90 up."""

    model_id = "half-right"

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        b, inst, state = context.bootcamp, context.instance, context.state
        wrong = context.sample % 2 == 1 or inst.params.start >= 90
        action = b.wrong_answer(inst, state, random.Random(0)) if wrong else b.oracle(inst, state)
        return PolicyReply(tool_calls=[native_call(action, f"call_{context.turn}")])


@pytest.fixture
def countdown():
    registry.register("countdown", Countdown, origin="test")
    yield registry.make("countdown")
    registry.unregister("countdown")


def _countdown_failures(store: Store, b: Bootcamp) -> None:
    """Eval split recorded; a run that fails on counts from 20 up, over steps 2 and 3."""
    store.write_instances(eval_instances(b, 6), split="eval")
    instances = [
        b.generate({"start": step * k, "step": step}, seed)
        for step in (2, 3)
        for k in range(5, 11)
        for seed in range(3)
    ]
    store.write_instances(instances, split="train")
    store.start_run("count-run", "evaluate", {}, "noisy")
    policy = NoisyOraclePolicy(0, 0, 0.7, when=lambda i: i.params.start >= 20)
    store.write_episodes(asyncio.run(run_episodes([EpisodeSpec(b, i) for i in instances], policy, run_id="count-run")))


def _fenced(proposals: list[dict]) -> str:
    return (
        "Here are tasks that push on counting long sequences:\n```json\n"
        + json.dumps({"proposals": proposals}, indent=1)
        + "\n```\nEach one targets the weakness."
    )


# ---------------------------------------------------------------------------------------------
# The LLM synthesizer


def test_llm_synthesizer_accepts_and_rejects_each_reply_exactly_as_expected(store, countdown) -> None:
    _countdown_failures(store, countdown)
    replies = [
        "Sure! Here they are: {params: start=30, step: five",  # no JSON anywhere
        json.dumps(
            {
                "proposals": [
                    {"params": {"start": 24, "step": 4}, "rationale": "A: six ticks"},
                    {"params": {"start": 500, "step": 5}, "rationale": "out of bounds"},
                    {"params": {"start": 25, "step": 4}, "rationale": "generation fails"},
                    {"params": {"start": 60, "step": 2}, "rationale": "thirty ticks: the oracle runs out of turns"},
                ]
            }
        ),
        _fenced(
            [
                {"params": countdown.levels[2].model_dump(), "rationale": "a copy of an eval preset"},
                {"params": {"start": 36, "step": 6}, "rationale": "B: six ticks"},
                {"params": {"start": 24, "step": 4, "level": 1}, "rationale": "A again, level spelled out"},
                {"params": {"start": 90, "step": 9}, "rationale": "hard for this model"},
            ]
        ),
    ]
    requests: list[dict] = []
    script = ReplyScript(replies)
    cfg = SynthesisConfig(
        synthesizer="llm",
        n_per_cluster=8,
        max_clusters=1,
        min_cluster_size=1,
        instances_per_variant=2,
        calibration_samples=4,
    )
    with ScriptedEndpoint(lambda body: (requests.append(body), script(body))[1]) as server:
        cfg.llm = SynthesisLLMConfig(model="scripted", base_url=server.url, max_requests=3)
        summary = synthesize(store, "count-run", cfg, policy=HalfRight(), run_id="synth-1")

    rows = store.query("SELECT rationale, status, reject_kind, reject_reason, pass_rate, instance_ids FROM variants")
    got = {r["rationale"]: (r["status"], r["reject_kind"]) for r in rows}
    assert got == {
        None: ("rejected", "invalid_json"),
        "A: six ticks": ("accepted", None),
        "out of bounds": ("rejected", "invalid_params"),
        "generation fails": ("rejected", "unsolvable"),
        "thirty ticks: the oracle runs out of turns": ("rejected", "unsolvable"),
        "a copy of an eval preset": ("rejected", "eval_split"),
        "B: six ticks": ("accepted", None),
        "A again, level spelled out": ("rejected", "duplicate"),
        "hard for this model": ("rejected", "too_hard"),
    }
    reasons = {r["rationale"]: r["reject_reason"] for r in rows}
    assert "start = 500" in reasons["out of bounds"] and "less than or equal to 100" in reasons["out of bounds"]
    assert "does not divide" in reasons["generation fails"]
    assert "RuntimeError" in reasons["thirty ticks: the oracle runs out of turns"]
    assert "eval-split instance" in reasons["a copy of an eval preset"]
    assert "in this batch" in reasons["A again, level spelled out"]
    assert "passed 0 of 4" in reasons["hard for this model"]
    assert all(r["reject_reason"].startswith(r["reject_kind"] + ": ") for r in rows if r["status"] == "rejected")
    assert {r["pass_rate"] for r in rows if r["status"] == "accepted"} == {0.5}
    assert summary.accepted == 2 and summary.proposed == 9 and len(requests) == 3

    accepted_instances = {i for r in rows if r["status"] == "accepted" for i in r["instance_ids"]}
    synthesized = store.query(
        "SELECT i.instance_id, i.split, v.status FROM instances i JOIN variants v "
        "USING (variant_id) WHERE i.origin = 'synthesized'"
    )
    trained = {r["instance_id"] for r in synthesized if r["split"] == "train"}
    assert trained == accepted_instances and len(accepted_instances) == 4
    probes = {r["instance_id"] for r in synthesized if r["split"] == "probe"}  # held out, from fresh seeds
    assert len(probes) == 2 * 2 and not probes & accepted_instances
    assert {(r["split"], r["status"]) for r in synthesized} == {("train", "accepted"), ("probe", "accepted")}
    assert not accepted_instances & store.eval_ids()

    first = requests[0]
    assert first["response_format"]["type"] == "json_schema"
    assert (
        first["response_format"]["json_schema"]["schema"]["properties"]["proposals"]["items"]["properties"]["params"][
            "properties"
        ]["start"]["maximum"]
        == 100
    )
    prompt = first["messages"][-1]["content"]
    assert "Count the ticks" in prompt and '"maximum": 100' in prompt and "### Episode 1" in prompt
    assert "miscount" in prompt  # the cluster's label names its category
    assert "could not be read" in requests[1]["messages"][-1]["content"]


def test_an_endpoint_that_refuses_json_schema_is_asked_again_without_it(store, countdown) -> None:
    _countdown_failures(store, countdown)

    class RefusesSchema(ScriptedEndpoint):
        async def _completions(self, request: web.Request) -> web.Response:
            if "response_format" in await request.json():
                return web.json_response({"error": {"message": "response_format is not supported"}}, status=400)
            return await super()._completions(request)

    script = ReplyScript([json.dumps([{"start": 28, "step": 4}, {"start": 16, "step": 2}])])
    with RefusesSchema(script) as server:
        synthesizer = LLMSynthesizer("scripted", server.url, max_retries=0)
        analyze_run(store, "count-run")
        context = load_contexts(store, "count-run", with_transcripts=True)[0]
        proposals = synthesizer.propose(context, 2)
        assert synthesizer.json_schema is False and synthesizer.requests == 2 and server.requests == 1
        assert [p.params for p in proposals] == [{"start": 28, "step": 4}, {"start": 16, "step": 2}]
        synthesizer.propose(context, 2)
        assert synthesizer.requests == 3 and server.requests == 2  # the schema is not offered again


def test_an_unreachable_llm_fails_the_run_and_writes_no_variant(store, countdown) -> None:
    _countdown_failures(store, countdown)
    cfg = SynthesisConfig(
        synthesizer="llm", llm=SynthesisLLMConfig(model="m", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2)
    )
    with pytest.raises(SynthesisError, match="cannot reach LLM endpoint http://127.0.0.1:9/v1"):
        synthesize(store, "count-run", cfg, run_id="synth-down")
    assert store.scalar("SELECT count(*) FROM variants") == 0
    assert store.scalar("SELECT status FROM runs WHERE run_id = 'synth-down'") == "failed"


def test_replies_are_read_from_prose_fences_bare_lists_and_after_reasoning() -> None:
    assert read_proposals('{"proposals": [{"params": {"a": 1}}]}') == ([{"params": {"a": 1}}], None)
    assert read_proposals('Sure.\n```json\n[{"a": 1}, {"a": 2}]\n```\nDone.') == ([{"a": 1}, {"a": 2}], None)
    assert read_proposals('<think>let me see {"a": 0}</think>Here: {"variants": [{"a": 3}]} ok') == ([{"a": 3}], None)
    assert read_proposals('My proposal is {"a": 4} and nothing else.') == ([{"a": 4}], None)
    items, problem = read_proposals("I cannot help with that.")
    assert items == [] and problem.startswith("invalid_json: ")


# ---------------------------------------------------------------------------------------------
# Validation and mutation, for every bootcamp


def test_validation_names_the_reason_of_every_rejection(store) -> None:
    calc = registry.make("calculator")
    store.write_instances(eval_instances(calc, 8), split="eval")
    store.write_instances([calc.generate({"steps": 2, "max_operand": 33}, 5)], split="train")

    def p(params: object, note: str) -> Proposal:
        return Proposal("calculator", "c1", "test", params, note)

    proposals = [
        p({"steps": 3, "max_operand": 60, "operations": "+*"}, "ok"),
        p({"steps": 30}, "steps too large"),
        p({"steps": 2, "colour": "red"}, "unknown key"),
        p({"steps": 2, "operations": "++"}, "repeated operator"),
        p([1, 2], "a list"),
        p(calc.levels[3].model_dump(), "eval preset"),
        p({"steps": 2, "max_operand": 33, "level": 1}, "the train instance's params"),
        p({"steps": 3, "max_operand": 60, "operations": "+*", "level": 1}, "ok again"),
        Proposal("calculator", "c1", "test", unreadable="invalid_json: nothing", raw="???"),
    ]
    result = validate_proposals(store, proposals, ValidationSettings(instances_per_variant=3), OraclePolicy())
    kinds = {v.proposal.rationale: v.reject_kind for v in result.verdicts}
    assert kinds == {
        "ok": RejectKind.TOO_EASY,
        "steps too large": RejectKind.INVALID_PARAMS,
        "unknown key": RejectKind.INVALID_PARAMS,
        "repeated operator": RejectKind.INVALID_PARAMS,
        "a list": RejectKind.NOT_AN_OBJECT,
        "eval preset": RejectKind.EVAL_SPLIT,
        "the train instance's params": RejectKind.DUPLICATE,
        "ok again": RejectKind.DUPLICATE,
        None: RejectKind.INVALID_JSON,
    }
    reasons = {v.proposal.rationale: v.reject_reason for v in result.verdicts}
    assert "steps = 30" in reasons["steps too large"] and "colour is not a known field" in reasons["unknown key"]
    assert "oracle passed 4 of 4" in reasons["ok"] and "the band is 10%-90%" in reasons["ok"]
    uncalibrated = validate_proposals(store, proposals[:1], ValidationSettings(calibration_samples=0))
    assert uncalibrated.verdicts[0].accepted and len(uncalibrated.verdicts[0].instances) == 4


@pytest.mark.parametrize("name", registry.names())
def test_every_bootcamps_mutations_validate_and_their_instances_are_solved_by_the_oracle(name: str, store) -> None:
    b = registry.make(name)
    instances = train_instances(b, 6 * len(b.levels), seed=1)
    store.write_instances(instances, split="train")
    policy = NoisyOraclePolicy(0.2, 0.1, 0.6, seed=1)
    store.write_episodes(asyncio.run(run_episodes([EpisodeSpec(b, i) for i in instances], policy, run_id="r")))
    analyze_run(store, "r")
    contexts = load_contexts(store, "r")
    proposals = [p for c in contexts for p in MutationSynthesizer(seed=3).propose(c, 4)]
    assert proposals, f"{name}: no mutation proposed"
    for proposal in proposals:
        b.params_model.model_validate(proposal.params)
        assert proposal.parent_instance_ids and proposal.rationale.startswith("mutated ")
    result = validate_proposals(store, proposals, ValidationSettings(instances_per_variant=2, calibration_samples=0))
    assert RejectKind.INVALID_PARAMS not in {v.reject_kind for v in result.verdicts} and result.accepted
    assert all(b.solve(i)[1].success for v in result.accepted for i in v.instances)


# ---------------------------------------------------------------------------------------------
# Mutation on planted failures, lineage and idempotence


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Store:
    store = Store(tmp_path_factory.mktemp("planted") / "campflow.duckdb")
    record_planted_run(store, n=300)
    cfg = SynthesisConfig(n_per_cluster=12)
    synthesize(store, RUN_ID, cfg, policy=planted_policy(), run_id="synth-planted")
    return store


def test_mutation_variants_concentrate_in_the_planted_failing_region(planted: Store) -> None:
    rows = planted.query("SELECT bootcamp, params, status, reject_kind FROM variants WHERE run_id = 'synth-planted'")
    accepted = [r for r in rows if r["status"] == "accepted"]
    for name in ("calculator", "maze"):
        mine = [json.loads(r["params"]) for r in accepted if r["bootcamp"] == name]
        assert len(mine) >= 5, (name, rows)
        assert all(in_planted_region(name, p) for p in mine), mine
    # Outside the region the planted policy never fails: anything proposed there is too easy to learn from.
    for r in rows:
        if not in_planted_region(r["bootcamp"], json.loads(r["params"])):
            assert r["reject_kind"] == "too_easy"


def test_variant_lineage_answers_a_variants_cluster_and_failed_episodes_in_sql(planted: Store) -> None:
    variant = planted.query(
        "SELECT variant_id, cluster_id, parent_instance_ids, instance_ids FROM variants "
        "WHERE status = 'accepted' ORDER BY variant_id LIMIT 1"
    )[0]
    lineage = planted.query("SELECT * FROM variant_lineage WHERE variant_id = ?", [variant["variant_id"]])
    members = planted.query(
        "SELECT episode_id, instance_id FROM failures WHERE cluster_id = ?", [variant["cluster_id"]]
    )
    assert {r["failed_episode_id"] for r in lineage} == {m["episode_id"] for m in members}
    assert {r["cluster_id"] for r in lineage} == {variant["cluster_id"]}
    assert {r["failure_run_id"] for r in lineage} == {RUN_ID}
    assert all(r["termination"] in ("wrong_answer", "max_turns", "invalid_tool_call", "format_error") for r in lineage)
    assert {r["failed_instance_id"] for r in lineage if r["parent"]} == set(variant["parent_instance_ids"])
    instances = planted.query(
        "SELECT instance_id FROM instances WHERE variant_id = ? AND origin = 'synthesized' AND split = 'train'",
        [variant["variant_id"]],
    )
    assert {r["instance_id"] for r in instances} == set(variant["instance_ids"])


def test_synthesizing_the_same_clusters_again_records_no_new_variant(planted: Store) -> None:
    before = planted.query("SELECT variant_id, status FROM variants ORDER BY variant_id")
    n_instances = planted.scalar("SELECT count(*) FROM instances")
    summary = synthesize(planted, RUN_ID, SynthesisConfig(n_per_cluster=12), policy=planted_policy())
    assert summary.already_recorded == len(before) and summary.accepted == 0 and not summary.rejected
    assert planted.query("SELECT variant_id, status FROM variants ORDER BY variant_id") == before
    assert planted.scalar("SELECT count(*) FROM instances") == n_instances


def test_synthesize_command_prints_verdicts_and_its_errors_are_one_line(planted: Store, tmp_path) -> None:
    out = run_cli("synthesize", "--run", RUN_ID, "-n", "3", "--db", str(planted.path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "variants for planted (mutate)" in out.stdout and "already recorded" in out.stdout
    no_model = run_cli("synthesize", "--run", RUN_ID, "--synthesizer", "llm", "--db", str(planted.path), cwd=tmp_path)
    assert no_model.returncode == 2 and no_model.stderr.strip() == (
        "error: synthesis.llm.model is required for the llm synthesizer (pass --model)"
    )
    down = run_cli(
        "synthesize",
        "--run",
        RUN_ID,
        "-s",
        "llm",
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--db",
        str(planted.path),
        cwd=tmp_path,
        env={"CAMPFLOW__SYNTHESIS__LLM__MAX_RETRIES": "0"},
    )
    assert down.returncode == 1 and down.stderr.count("\n") == 1 and "cannot reach LLM endpoint" in down.stderr


# ---------------------------------------------------------------------------------------------
# Curriculum


def test_the_level_steps_up_past_the_upper_threshold_and_down_below_the_lower() -> None:
    levels = [1, 2, 3, 4]
    assert step_level(2, 0.85, levels, up=0.8, down=0.3) == 3
    assert step_level(2, 0.8, levels, up=0.8, down=0.3) == 3
    assert step_level(2, 0.5, levels, up=0.8, down=0.3) == 2
    assert step_level(2, 0.1, levels, up=0.8, down=0.3) == 1
    assert step_level(4, 1.0, levels, up=0.8, down=0.3) == 4 and step_level(1, 0.0, levels, up=0.8, down=0.3) == 1
    assert step_level(2, None, levels, up=0.8, down=0.3) == 2


def test_curriculum_moves_each_bootcamp_and_cluster_once_per_training_run(planted: Store) -> None:
    calc, maze = registry.make("calculator"), registry.make("maze")
    train = train_instances(calc, 10, seed=5, levels=[1]) + train_instances(maze, 10, seed=5, levels=[1])
    cluster_instances = planted.query(
        "SELECT i.instance_id, i.params, i.seed, i.bootcamp, v.cluster_id FROM instances i JOIN variants v "
        "USING (variant_id) WHERE v.bootcamp = 'calculator' ORDER BY i.instance_id"
    )
    cluster_id = cluster_instances[0]["cluster_id"]
    level = current_level(planted, "calculator", cluster_id)
    synthesized = [
        calc.generate(json.loads(r["params"]), r["seed"])
        for r in cluster_instances
        if r["cluster_id"] == cluster_id and json.loads(r["params"])["level"] == level
    ]
    planted.write_instances(train, split="train")

    class SolvesCalculator(Policy):
        model_id = "solves-calculator"

        async def respond(self, messages, tools, context):  # noqa: ANN001, ANN201
            inner = OraclePolicy() if context.bootcamp.name == "calculator" else WrongAnswerPolicy()
            return await inner.respond(messages, tools, context)

    specs = [EpisodeSpec(registry.make(i.bootcamp), i) for i in train + synthesized]
    planted.write_episodes(asyncio.run(run_episodes(specs, SolvesCalculator(), run_id="train-1")))
    decisions = {(d.bootcamp, d.cluster_id): d for d in update_curriculum(planted, "train-1", up=0.8, down=0.3)}
    assert decisions[("calculator", "")].next_level == 2 and decisions[("calculator", "")].pass_rate == 1.0
    assert decisions[("maze", "")].next_level == 1 and decisions[("maze", "")].pass_rate == 0.0
    assert decisions[("calculator", cluster_id)].level == level
    again = update_curriculum(planted, "train-1", up=0.8, down=0.3)  # the same run decides the same, once
    assert {(d.bootcamp, d.cluster_id): d.next_level for d in again} == {k: d.next_level for k, d in decisions.items()}
    assert current_level(planted, "calculator") == 2 and current_level(planted, "maze") == 1
    levels = {(r["bootcamp"], r["cluster_id"]): r["level"] for r in planted.query("SELECT * FROM curriculum_levels")}
    assert levels[("calculator", None)] == 2


def test_synthesis_config_orders_its_bands() -> None:
    with pytest.raises(Exception, match="band_min = 0.95 must not exceed band_max = 0.9"):
        load_config(None, {"synthesis.band_min": 0.95})


def test_prefect_tasks_are_thin_wrappers_over_the_pipeline(planted: Store) -> None:
    from campflow.tasks.synthesis import mine_failures_task, update_curriculum_task

    cfg = load_config(None, {"workspace.db": str(planted.path)})
    sizes = mine_failures_task.fn(cfg, RUN_ID)
    assert sum(sizes.values()) == planted.scalar("SELECT count(*) FROM failures WHERE run_id = ?", [RUN_ID])
    assert update_curriculum_task.fn(cfg, "no-such-run") == {}
