"""Where a failure began: the first call of a failed episode after which no correct path was left."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.oracle import NoisyOraclePolicy, OraclePolicy, native_call
from campflow.bootcamps import registry
from campflow.bootcamps.arithmetic import format_number
from campflow.bootcamps.base import Action, Instance
from campflow.bootcamps.maze.bootcamp import STEPS, WALL, MazeState
from campflow.bootcamps.splits import eval_instances
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episode, run_episodes
from campflow.rollout.episode import MODEL_FAILURES, Episode, Termination
from campflow.sources import ImportSpec, build_bootcamp
from campflow.storage.store import Store
from campflow.synthesis.divergence import PATH_RIGHT_BUDGET_SPENT, find_divergence
from campflow.synthesis.divergence_records import record_divergences
from campflow.synthesis.pipeline import analyze_run

REFINED = {"operator_flipped", "distractor_number", "step_skipped", "wall", "revisit", "away_from_goal"}
GENERIC = {"no_call", "invalid_call", "early_submit", "no_submit", "extra_step", "wrong_tool"}


class Plan(Policy):
    """Plays ``plan(instance, state, turn)``: an action, or None for a reply without a call."""

    model_id = "plan"
    suspends = False

    def __init__(self, plan: Callable[[Instance, object, int], Action | None]) -> None:
        self.plan = plan

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        action = self.plan(context.instance, context.state, context.turn)
        if action is None:
            return PolicyReply(content="Let me think.")
        return PolicyReply(tool_calls=[native_call(action, f"call_{context.turn}")])


def play(name: str, instance: Instance, plan: Callable, max_turns: int | None = None) -> Episode:
    spec = EpisodeSpec(registry.make(name), instance)
    return asyncio.run(run_episode(spec, Plan(plan), RolloutSettings(max_turns=max_turns)))


def test_every_failed_episode_of_the_ten_builtin_bootcamps_has_a_divergence_or_a_reason(store: Store) -> None:
    specs, instances = [], []
    for name in registry.BUILTIN:
        b = registry.make(name)
        insts = eval_instances(b, 3 * len(b.levels))
        instances += insts
        specs += [EpisodeSpec(b, i) for i in insts]
    store.write_instances(instances, split="eval")
    policy = NoisyOraclePolicy(p_wrong_move=0.2, p_malformed=0.3, p_wrong_answer=0.3)
    episodes = asyncio.run(run_episodes(specs, policy, run_id="noisy"))
    store.write_episodes(episodes)
    failed = {e.id: e for e in episodes if e.termination in MODEL_FAILURES}
    assert len({e.bootcamp for e in failed.values()}) == 10

    found = record_divergences(store, "noisy")

    rows = store.query("SELECT * FROM divergences WHERE run_id = 'noisy'")
    assert {r["episode_id"] for r in rows} == set(failed) and len(rows) == len(failed) == len(found)
    for r in rows:
        assert (r["kind"] is None) != (r["reason"] is None), r
        if r["kind"] is not None:
            # a bootcamp without kinds of its own adds its reward's reason: argument:path:collateral
            assert r["kind"] in REFINED or r["kind"].split(":")[0] in GENERIC | {"argument"}, r
            assert r["turn"] is not None and r["turn"] < failed[r["episode_id"]].turns, r
            assert r["oracle_tool"] is not None, r
        if r["termination"] == Termination.WRONG_ANSWER:  # a wrong final call leaves no way back
            assert r["kind"] is not None, r
    labelled = [r for r in rows if r["kind"] is not None and r["demonstrator_tool"] is not None]
    assert len(labelled) >= len([r for r in rows if r["kind"] is not None]) * 0.9
    summary = store.query("SELECT bootcamp, kind, episodes FROM divergence_summary WHERE run_id = 'noisy'")
    assert sum(s["episodes"] for s in summary) == len(failed)
    assert len(found) == len(record_divergences(store, "noisy"))  # a second pass replaces the run's rows
    assert store.scalar("SELECT count(*) FROM divergences WHERE run_id = 'noisy'") == len(failed)
    rewarded = [r["kind"] for r in rows if r["kind"] and r["bootcamp"] not in ("calculator", "maze")]
    assert sum(k.count(":") >= 1 + k.startswith("argument:") for k in rewarded) >= len(rewarded) * 0.7, rewarded

    # failure mining names each failure by where it diverged; one bootcamp's cluster labels are all distinct
    analysis = analyze_run(store, "noisy", refresh=True)
    by_episode = {r["episode_id"]: r for r in rows}
    for f in store.query("SELECT episode_id, category, signature, features FROM failures WHERE run_id = 'noisy'"):
        d = by_episode[f["episode_id"]]
        if d["kind"] and d["kind"] not in ("invalid_call", "no_call"):
            assert f["category"] == f"{d['termination']}:{d['kind']}", (f, d)
            assert f["signature"].startswith(f"{f['category']}|{d['model_tool']}"), f
        if d["reason"] == PATH_RIGHT_BUDGET_SPENT:
            assert f["category"] == "max_turns:path_right_budget_spent", f
        assert json.loads(f["features"])["divergence"]["kind"] == d["kind"]
    labels = Counter((c.bootcamp, c.label) for c in analysis.clusters)
    assert labels and max(labels.values()) == 1, labels
    assert any(c.traits["divergence"] for c in analysis.clusters)


def _calculator_cases(level: int, seeds: range) -> list[Instance]:
    b = registry.make("calculator")
    return [b.generate(level, s) for s in seeds]


def _chain_plan(values: Sequence[tuple[str, str]]) -> Callable:
    """Compute the given (operator, operand) steps on the model's own last result, then submit it."""

    def plan(instance: Instance, state, turn: int) -> Action:
        current = state.results[-1] if state.results else instance.data["start"]
        if turn < len(values):
            op, n = values[turn]
            return Action("calculate", {"expression": f"{format_number(current)} {op} {n}"})
        return Action("submit", {"answer": current})

    return plan


def test_a_flipped_operator_where_the_story_says_finds_extra_is_named_for_the_operator() -> None:
    checked = 0
    for instance in _calculator_cases(2, range(80)) + _calculator_cases(3, range(80)):
        d = instance.data
        for i, (op, n) in enumerate(zip(d["ops"], d["operands"], strict=True)):
            if op != "+" or f"finds {n} extra" not in d["story"]:
                continue
            steps = [(o, str(x)) for o, x in zip(d["ops"], d["operands"], strict=True)]
            steps[i] = ("-", str(n))  # the model took "finds 5 extra" for a loss
            ep = play("calculator", instance, _chain_plan(steps))
            assert ep.termination == Termination.WRONG_ANSWER
            div = find_divergence(registry.make("calculator"), instance, ep.transcript, ep.termination)
            assert div.kind == "operator_flipped", (d["story"], steps, div)
            assert div.turn == len(steps) and div.model_action.name == "submit"
            assert div.demonstrator_action == div.oracle_action  # calculator demonstrates with its oracle
            checked += 1
    assert checked >= 5


def test_calculator_failures_cluster_under_the_operator_when_operators_are_what_the_model_gets_wrong() -> None:
    kinds = Counter()
    for instance in _calculator_cases(3, range(30)):
        d = instance.data
        steps = [(o, str(x)) for o, x in zip(d["ops"], d["operands"], strict=True)]
        if instance.seed % 3:  # two failures in three flip the first operator
            steps[0] = ({"+": "-", "-": "+", "*": "+", "/": "*"}[steps[0][0]], steps[0][1])
        else:  # the rest stop one step short
            steps = steps[:-1]
        ep = play("calculator", instance, _chain_plan(steps))
        kinds[find_divergence(registry.make("calculator"), instance, ep.transcript, ep.termination).kind] += 1
    assert kinds.most_common(1)[0][0] == "operator_flipped", kinds
    assert kinds["early_submit"] == 10


def test_a_distractors_number_and_a_skipped_step_are_named() -> None:
    b = registry.make("calculator")
    distractor = skipped = 0
    for instance in _calculator_cases(4, range(20)):
        d = instance.data
        steps = [(o, str(x)) for o, x in zip(d["ops"], d["operands"], strict=True)]
        chain = {d["start"], *d["operands"], *d["values"]}
        numbers = [int(x) for x in re.findall(r"\d+", d["story"])]
        extra = [x for x in numbers if x not in chain]
        if extra and d["ops"][0] in "+-":
            used = [(steps[0][0], str(extra[0])), *steps[1:]]
            ep = play("calculator", instance, _chain_plan(used))
            assert find_divergence(b, instance, ep.transcript, ep.termination).kind == "distractor_number"
            distractor += 1
        if d["operands"][1] > 1:
            ep = play("calculator", instance, _chain_plan([steps[0], *steps[2:]]))
            assert find_divergence(b, instance, ep.transcript, ep.termination).kind == "step_skipped", d
            skipped += 1
    assert distractor >= 3 and skipped >= 5


def test_a_calculation_in_another_order_is_not_a_divergence() -> None:
    b = registry.make("calculator")
    instance = next(i for i in _calculator_cases(2, range(50)) if i.data["ops"][0] == "+")
    d = instance.data

    def plan(instance: Instance, state, turn: int) -> Action:
        if turn == 0:  # the first step written the other way round: the same number, the same path
            return Action("calculate", {"expression": f"{d['operands'][0]}+{d['start']}"})
        if turn == 1:
            return Action("calculate", {"expression": "1 + 1"})  # a harmless extra sum
        return Action("submit", {"answer": d["answer"] + 1})

    ep = play("calculator", instance, plan)
    div = find_divergence(b, instance, ep.transcript, ep.termination)
    assert div.turn == 2 and div.kind == "early_submit", div  # the oracle would go on to the second step


def _into_a_wall(instance: Instance, state: MazeState) -> str:
    grid = instance.data["grid"]
    return next(n for n, (dx, dy) in STEPS.items() if grid[state.y + dy][state.x + dx] == WALL)


def test_walking_into_walls_diverges_where_the_budget_can_no_longer_reach_the_goal() -> None:
    b = registry.make("maze")
    for seed in range(8):
        instance = b.generate(2, seed)

        def plan(instance: Instance, state: MazeState, turn: int) -> Action:
            if turn == 0:
                return Action("look", {})  # harmless: the budget has room for it
            return Action("move", {"direction": _into_a_wall(instance, state)})

        ep = play("maze", instance, plan)
        assert ep.termination == Termination.MAX_TURNS
        div = find_divergence(b, instance, ep.transcript, ep.termination)
        need = instance.data["shortest"] + 1  # the oracle's moves and its submit
        assert div.kind == "wall" and div.turn == b.max_turns(instance) - need, div
        assert div.oracle_action.name == "move"
        assert div.demonstrator_action is not None and div.demonstrator_action.name == "move"  # from the views seen


def _back_and_forth() -> Callable:
    """A step towards the goal, then the same step back, and so on."""
    back = {"north": "south", "south": "north", "east": "west", "west": "east"}
    last: list[str] = []
    maze = registry.make("maze")

    def plan(instance: Instance, state: MazeState, turn: int) -> Action:
        if turn % 2 == 0:
            last[:] = [maze.oracle(instance, state).arguments["direction"]]
            return Action("move", {"direction": last[0]})
        return Action("move", {"direction": back[last[0]]})

    return plan


def test_going_back_and_forth_is_a_revisit() -> None:
    b = registry.make("maze")
    for seed in range(8):
        instance = b.generate(3, seed)
        ep = play("maze", instance, _back_and_forth())
        assert ep.termination == Termination.MAX_TURNS
        div = find_divergence(b, instance, ep.transcript, ep.termination)
        assert div.kind == "revisit" and div.turn % 2 == 1, div


def test_a_step_away_from_the_goal_is_named() -> None:
    b = registry.make("maze")
    named = 0
    for seed in range(20):
        instance = b.generate(3, seed)
        state = b.new_state(instance)
        towards = b.oracle(instance, state)
        for direction, (dx, dy) in STEPS.items():
            if direction == towards.arguments["direction"]:
                continue
            if instance.data["grid"][state.y + dy][state.x + dx] == WALL:
                assert b.divergence_kind(instance, state, Action("move", {"direction": direction}), towards) == "wall"
            else:
                kind = b.divergence_kind(instance, state, Action("move", {"direction": direction}), towards)
                assert kind == "away_from_goal"
                named += 1
    assert named >= 5


def test_a_right_path_cut_short_by_the_budget_has_no_divergence(store: Store) -> None:
    b = registry.make("maze")
    instance = b.generate(3, 1)
    assert instance.data["shortest"] > 3
    oracle = OraclePolicy()
    ep = asyncio.run(run_episode(EpisodeSpec(b, instance), oracle, RolloutSettings(max_turns=3), run_id="short"))
    assert ep.termination == Termination.MAX_TURNS
    div = find_divergence(b, instance, ep.transcript, ep.termination, max_turns=ep.turns)
    assert not div.found and div.reason == PATH_RIGHT_BUDGET_SPENT

    store.write_instances([instance], split="eval")
    store.write_episodes([ep])
    record_divergences(store, "short")
    row = store.query("SELECT kind, reason, turn FROM divergences WHERE run_id = 'short'")
    assert row == [{"kind": None, "reason": PATH_RIGHT_BUDGET_SPENT, "turn": None}]
    assert store.query("SELECT kind, reason, episodes FROM divergence_summary WHERE run_id = 'short'") == [
        {"kind": "none", "reason": PATH_RIGHT_BUDGET_SPENT, "episodes": 1}
    ]


def test_an_imported_bootcamp_with_its_own_tools_gets_the_argument_it_got_wrong(tmp_path) -> None:
    weather = {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    row = {
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [weather],
        "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
    }
    source = tmp_path / "calls.jsonl"
    source.write_text(json.dumps(row) + "\n")
    b = build_bootcamp(ImportSpec(name="fc-div", adapter="function-calling", source=str(source), options={}))
    instance = b.generate(None, 0)

    def plan(instance: Instance, state, turn: int) -> Action:
        return Action("get_weather", {"city": "Lyon"}) if turn == 0 else Action("finish", {})

    ep = asyncio.run(run_episode(EpisodeSpec(b, instance), Plan(plan)))
    assert ep.termination == Termination.WRONG_ANSWER
    div = find_divergence(b, instance, ep.transcript, ep.termination)
    # the import's reward adds what the wrong call cost: the oracle's right call after it is one call too many
    assert (div.turn, div.kind) == (0, "argument:city:extra_call"), div
    assert div.oracle_action == Action("get_weather", {"city": "Paris"})


def test_a_runs_largest_calculator_cluster_is_named_for_the_operator(store: Store) -> None:
    # what a trained model did (issue 40): every `calculate` call right by the tool, the operator of the
    # story's "finds 5 extra" flipped; mining used to call these wrong_answer:arithmetic and :carry
    b = registry.make("calculator")
    instances, episodes = [], []
    for instance in _calculator_cases(2, range(24)) + _calculator_cases(3, range(12)):
        d = instance.data
        steps = [(o, str(x)) for o, x in zip(d["ops"], d["operands"], strict=True)]
        if instance.seed % 4:  # three in four flip the last operator
            steps[-1] = ({"+": "-", "-": "+", "*": "+", "/": "*"}[steps[-1][0]], steps[-1][1])
        else:  # the rest stop one step short
            steps = steps[:-1]
        spec = EpisodeSpec(b, instance)
        episodes.append(asyncio.run(run_episode(spec, Plan(_chain_plan(steps)), run_id="trained")))
        instances.append(instance)
    store.write_instances(instances, split="eval")
    store.write_episodes(episodes)
    analysis = analyze_run(store, "trained")
    largest = max(analysis.clusters, key=lambda c: c.size)
    assert largest.label.startswith("wrong_answer:operator_flipped"), [c.label for c in analysis.clusters]
    assert largest.traits["divergence"]["kind"] == "operator_flipped"
    assert largest.traits["divergence"]["model"]["tool"] == "submit"
    assert len({c.label for c in analysis.clusters}) == len(analysis.clusters)

    # synthesis is shown the mistake itself (deliverable 2): the kind, the state and both calls
    from campflow.bootcamps.calculator.bootcamp import parse_problem
    from campflow.synthesis.llm import LLMSynthesizer
    from campflow.synthesis.mutate import MutationSynthesizer
    from campflow.synthesis.proposals import load_contexts

    context = next(
        c for c in load_contexts(store, "trained", with_transcripts=True) if c.cluster_id == largest.cluster_id
    )
    first = context.divergences[0]
    assert first.kind == "operator_flipped" and first.model_action["tool"] == "submit"
    assert first.state and first.state[-1]["role"] == "tool"  # the last `calculate` result, before the submit
    prompt = LLMSynthesizer("m").messages(context, 4)[1]["content"]
    assert "`operator_flipped`" in prompt and "The agent called: submit(" in prompt
    assert "A correct solver would call: calculate(" in prompt and first.state[1]["content"] in prompt
    # mutate proposes the failed problem and its twin with the deciding words changed, side by side
    proposals = MutationSynthesizer(seed=0).propose(context, 6)
    a, twin = proposals[0].params, proposals[1].params
    assert proposals[0].parent_instance_ids == proposals[1].parent_instance_ids
    parent = next(i for i in instances if i.id == proposals[0].parent_instance_ids[0])
    (sa, steps_a), (sb, steps_b) = parse_problem(a["problem"]), parse_problem(twin["problem"])
    assert sa == sb == parent.data["start"] and [n for _, n, _ in steps_a] == [n for _, n, _ in steps_b]
    assert [op for op, _, _ in steps_a] == parent.data["ops"]
    assert sum(x[0] != y[0] for x, y in zip(steps_a, steps_b, strict=True)) == 1  # one operator, told otherwise
    twin_a, twin_b = b.generate(a, 0), b.generate(twin, 0)
    assert twin_a.data["story"] != twin_b.data["story"] and twin_a.data["answer"] != twin_b.data["answer"]
    words_a, words_b = twin_a.data["story"].split(". "), twin_b.data["story"].split(". ")
    assert sum(x != y for x, y in zip(words_a, words_b, strict=True)) == 1  # one sentence apart
    assert all("where operator_flipped decides" in p.rationale or p.rationale.startswith("contrast") for p in proposals)
