"""The text bootcamps (filesystem, sql, shop, calendar, wordle): hostile tool calls, no-op bounds, rewards."""

from __future__ import annotations

import asyncio
import builtins
import copy
import dataclasses
import os
import random
from collections import Counter
from typing import Any

import pytest

from campflow.agents.base import Policy, PolicyReply
from campflow.agents.oracle import NoisyOraclePolicy, native_call
from campflow.bootcamps import registry
from campflow.bootcamps.base import Action, Bootcamp, Instance, State
from campflow.errors import ToolError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination

TEXT = ["filesystem", "sql", "shop", "calendar", "wordle"]
SEEDS = range(30)
LONG = "x" * 100_000
# What a policy that calls the final tool at once earns, at most, per bootcamp: nothing is done yet,
# and every goal condition starts unmet.
NOOP_BOUND = {"filesystem": 0.0, "sql": 0.0, "shop": 0.0, "calendar": 0.0, "wordle": 0.0}
NOOP_ACTION = {
    "filesystem": Action("done"),
    "sql": Action("submit", {"answer": ""}),
    "shop": Action("checkout"),
    "calendar": Action("done"),
    "wordle": Action("give_up"),
}


def _instances(name: str, seeds: range = SEEDS) -> list[Instance]:
    b = registry.make(name)
    return [b.generate(level, s) for level in sorted(b.levels) for s in seeds]


def _snapshot(state: State) -> dict[str, Any]:
    """Everything a tool call could change: the compared fields of the state, and the SQL tables."""
    out = {f.name: copy.deepcopy(getattr(state, f.name)) for f in dataclasses.fields(state) if f.compare}
    if getattr(state, "db", None) is not None:
        out["db"] = state.db.dump()
    return out


def _call(b: Bootcamp, inst: Instance, state: State, name: str, **arguments: Any):
    """Run a tool as the engine does: validate the arguments with the tool's model, then call it."""
    args = b._tools[name].args_model.model_validate(arguments)
    return b.call(inst, state, name, args)


def _rejects(b: Bootcamp, inst: Instance, state: State, name: str, arguments: dict[str, Any], *fragments: str) -> str:
    """Assert that a call raises ToolError naming ``fragments`` and leaves the world as it was."""
    before = _snapshot(state)
    with pytest.raises(ToolError) as err:
        _call(b, inst, state, name, **arguments)
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert len(message) < 600, "error messages stay short, even for huge arguments"
    assert _snapshot(state) == before, f"{name}({arguments!r:.80}) changed the world"
    return message


def _play(specs: list[EpisodeSpec], policy: Policy):
    return asyncio.run(run_episodes(specs, policy))


class _Scripted(Policy):
    """Calls one fixed action every turn."""

    def __init__(self, actions: dict[str, Action]) -> None:
        self.actions = actions

    async def respond(self, messages, tools, context) -> PolicyReply:
        return PolicyReply(tool_calls=[native_call(self.actions[context.bootcamp.name], f"c{context.turn}")])


# -- every text bootcamp ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", TEXT)
def test_text_bootcamp_documents_itself_and_bounds_every_knob(name: str) -> None:
    b = registry.make(name)
    assert b.modality == "text" and len(b.levels) >= 3
    doc = b.describe()["description"].split("\n\n")
    assert len(doc) >= 3, "summary, agent instructions, then levels and reward for developers"
    assert "\n" not in doc[0] and b.describe_task().startswith(doc[0])
    assert "eward" in " ".join(doc[2:]), "the developer paragraphs explain the reward"
    for key, prop in b.params_model.model_json_schema()["properties"].items():
        assert prop.get("description"), f"{name}.{key} has no description"
        if prop.get("type") in ("integer", "number"):
            assert "minimum" in prop and "maximum" in prop, f"{name}.{key} is unbounded"
        else:
            assert prop.get("type") == "boolean" or "enum" in prop, f"{name}.{key} is neither bounded nor a choice"


@pytest.mark.parametrize("name", TEXT)
def test_a_policy_that_ends_at_once_scores_at_most_the_no_op_bound(name: str) -> None:
    b = registry.make(name)
    episodes = _play([EpisodeSpec(b, i) for i in _instances(name)], _Scripted(NOOP_ACTION))
    assert {e.termination for e in episodes} == {Termination.WRONG_ANSWER}
    assert max(e.reward for e in episodes) <= NOOP_BOUND[name]


@pytest.mark.parametrize("name", TEXT)
def test_noisy_oracle_episodes_end_cleanly_and_mostly_recover(name: str) -> None:
    b = registry.make(name)
    policy = NoisyOraclePolicy(p_wrong_move=0.3, p_malformed=0.1, p_wrong_answer=0.0, seed=3)
    episodes = _play([EpisodeSpec(b, i) for i in _instances(name, range(15))], policy)
    assert not [e.error for e in episodes if e.termination == Termination.INFRA_ERROR]
    assert all(0.0 <= e.reward <= 1.0 for e in episodes)
    # Some wrong steps cannot be undone (a deleted bystander, a cancelled meeting); most can.
    assert sum(e.success for e in episodes) >= len(episodes) // 4, Counter(e.termination for e in episodes)


@pytest.mark.parametrize("name", TEXT)
def test_perturbed_steps_differ_from_the_oracle_and_wrong_answers_never_succeed(name: str) -> None:
    b = registry.make(name)
    changed = total = 0
    for inst in _instances(name, range(10)):
        state = b.new_state(inst)
        rng = random.Random(inst.id)
        action = b.oracle(inst, state)
        if not b.is_final(action.name):
            total += 1
            changed += b.perturb(inst, state, action, rng) != action
        for _ in range(b.max_turns(inst)):
            b.apply(inst, state, b.wrong_answer(inst, state, rng) or b.oracle(inst, state))
            if state.finished:
                break
        score = b.score(inst, state, ())
        assert state.finished and not score.success and score.reward <= b.wrong_answer_bound
    assert changed >= 0.8 * total


# -- filesystem ---------------------------------------------------------------------------------------


def test_filesystem_refuses_paths_outside_the_workspace_and_leaves_the_tree_alone() -> None:
    b = registry.make("filesystem")
    for inst in _instances("filesystem", range(5)):
        state = b.new_state(inst)
        src = inst.data["rules"][0].get("paths", [p[0] for p in inst.data["rules"][0].get("pairs", [])])[0]
        for bad, expected in [
            ("../etc/passwd", "'..'"),
            ("inbox/../../x", "'..'"),
            ("/etc/passwd", "outside"),
            ("/workspace/../etc", "'..'"),
            ("~/notes", "outside"),
            ("/tmp", "outside"),
            (LONG, "100000 characters"),
            ("inbox/bad name!", "bad name"),
            ("/".join(["d"] * 12), "12 folders deep"),
        ]:
            for tool, args in [
                ("ls", {"path": bad}),
                ("cat", {"path": bad}),
                ("mkdir", {"path": bad}),
                ("rm", {"path": bad}),
                ("write", {"path": bad, "content": "x"}),
                ("mv", {"source": bad, "destination": "inbox"}),
                ("mv", {"source": src, "destination": bad}),
            ]:
                message = _rejects(b, inst, state, tool, args, expected, "expected")
                assert bad[:30] in message or "characters long" in message
        _rejects(b, inst, state, "write", {"path": "new.txt", "content": LONG}, "100000", "at most 10000")
        _rejects(b, inst, state, "rm", {"path": "/workspace"}, "root")
        _rejects(b, inst, state, "rm", {"path": "inbox"}, "not empty", "recursive")
        _rejects(b, inst, state, "mv", {"source": "inbox", "destination": "inbox/deeper"}, "into itself")
        _rejects(b, inst, state, "mv", {"source": "nope.txt", "destination": "inbox"}, "nope.txt", "does not exist")
        _rejects(b, inst, state, "cat", {"path": "inbox"}, "a folder", "expected an existing file")
        _rejects(b, inst, state, "write", {"path": "inbox", "content": "x"}, "is a folder")
        _rejects(b, inst, state, "mkdir", {"path": f"{src}/sub"}, "is a file")
        _rejects(b, inst, state, "write", {"path": "missing/new.txt", "content": "x"}, "missing", "existing folder")
        target = inst.data["protected"][0]
        _rejects(b, inst, state, "mv", {"source": src, "destination": target}, "already exists")


def test_filesystem_never_touches_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"host filesystem call with {args!r:.80}")

    b = registry.make("filesystem")
    instances = _instances("filesystem", range(5))
    for fn in ("open",):
        monkeypatch.setattr(builtins, fn, boom)
    for fn in ("listdir", "remove", "rename", "mkdir", "makedirs", "rmdir", "scandir", "stat", "unlink"):
        monkeypatch.setattr(os, fn, boom)
    for inst in instances:
        state, score = b.solve(inst)
        assert score.success
        _call(b, inst, state, "write", path="/workspace/etc-passwd.txt", content="not the host's")
    assert "etc-passwd.txt" in state.tree.files


def test_filesystem_reward_is_the_share_of_conditions_met_and_zero_once_a_protected_file_is_gone() -> None:
    b = registry.make("filesystem")
    for inst in _instances("filesystem", range(10)):
        state = b.new_state(inst)
        conditions = b.score(inst, state, ()).details["conditions"]
        rewards = []
        while True:
            action = b.oracle(inst, state)
            if action.name == "done":
                break
            b.apply(inst, state, action)
            rewards.append(b.score(inst, state, ()).reward)
        assert rewards == sorted(rewards) and rewards[-1] == 1.0
        assert all(round(r * conditions) == pytest.approx(r * conditions, abs=1e-4) for r in rewards)
        bystanders = [p for p in inst.data["bystanders"] if p in state.tree.files]
        if bystanders:
            spoiled = copy.deepcopy(state)
            _call(b, inst, spoiled, "write", path=bystanders[0], content="oops")
            assert b.score(inst, spoiled, ()).reward == 0.5
            assert b.score(inst, spoiled, ()).details["reason"] == "collateral"
        _call(b, inst, state, "rm", path=inst.data["protected"][0])
        score = b.score(inst, state, ())
        assert score.reward == 0.0 and score.details["reason"] == "protected_destroyed"


def test_filesystem_oracle_repairs_a_file_moved_to_the_wrong_folder() -> None:
    b = registry.make("filesystem")
    for inst in _instances("filesystem", range(10)):
        state = b.new_state(inst)
        action = b.oracle(inst, state)
        while action.name != "mv":
            b.apply(inst, state, action)
            action = b.oracle(inst, state)
        b.apply(inst, state, b.perturb(inst, state, action, random.Random(0)))
        for _ in range(b.max_turns(inst)):
            b.apply(inst, state, b.oracle(inst, state))
            if state.finished:
                break
        assert b.score(inst, state, ()).success


# -- sql ---------------------------------------------------------------------------------------------

WRITES = {
    "INSERT INTO customers VALUES (99, 'Eve', 'Oslo', 2020)": "INSERT",
    "UPDATE products SET price = 0": "UPDATE",
    "DELETE FROM orders": "DELETE",
    "DROP TABLE customers": "DROP",
    "CREATE TABLE t (x)": "CREATE",
    "ALTER TABLE customers ADD COLUMN z": "ALTER",
    "ATTACH DATABASE '/tmp/evil.db' AS evil": "ATTACH",
    "PRAGMA writable_schema = ON": "PRAGMA",
    "SELECT * FROM pragma_table_info('customers')": "PRAGMA",
    "BEGIN": "BEGIN",
    "VACUUM": "VACUUM",
    "REINDEX": "REINDEX",
    "  /* hidden */ -- comment\n DELETE FROM orders": "DELETE",
    "WITH x AS (SELECT 1) INSERT INTO customers SELECT 99, 'Eve', 'Oslo', 2020 FROM x": "INSERT",
    "WITH x AS (SELECT 1) DELETE FROM orders": "DELETE",
    "SELECT randomblob(1000000000)": "randomblob()",
    "SELECT zeroblob(1000000000)": "zeroblob()",
    "SELECT printf('%.*c', 1000000000, 'x')": "printf()",
    "SELECT load_extension('/tmp/x.so')": "load_extension()",
    "SELECT 1; DROP TABLE customers": "more than one statement",
}


def test_sql_refuses_every_write_ddl_attach_and_pragma_and_the_tables_stay_the_same() -> None:
    b = registry.make("sql")
    for inst in _instances("sql", range(3)):
        state = b.new_state(inst)
        for sql, named in WRITES.items():
            _rejects(b, inst, state, "query", {"sql": sql}, "refused", named)
        _rejects(b, inst, state, "query", {"sql": LONG}, "100000 characters", "at most 4000")
        _rejects(b, inst, state, "query", {"sql": "   "}, "empty query")
        _rejects(b, inst, state, "query", {"sql": "SELECT * FROM nowhere"}, "no such table: nowhere")
        _rejects(b, inst, state, "describe_table", {"table": "nowhere"}, "'nowhere'", "customers")
        _rejects(b, inst, state, "describe_table", {"table": LONG}, "unknown table", "expected one of")
        _rejects(b, inst, state, "submit", {"answer": LONG}, "100000 characters", "at most 2000")


def test_sql_stops_queries_that_never_end_and_cuts_long_results() -> None:
    from campflow.bootcamps.sql.bootcamp import MAX_STEPS, MAX_VALUE_CHARS, STEP_BATCH

    b = registry.make("sql")
    inst = b.generate(5, 0)
    state = b.new_state(inst)
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    cross = "SELECT count(*) FROM order_items a, order_items b, order_items c, order_items d"
    for sql in (endless, cross):  # stopped by counting steps, never by a clock
        _rejects(b, inst, state, "query", {"sql": sql}, f"stopped after {MAX_STEPS:,} steps, the limit")
        assert state.db.steps == MAX_STEPS + STEP_BATCH
    growing = "WITH RECURSIVE c(x) AS (SELECT 'a' UNION ALL SELECT x || x FROM c) SELECT length(x) FROM c LIMIT 60"
    _rejects(b, inst, state, "query", {"sql": growing}, f"grew past {MAX_VALUE_CHARS} characters, the limit")
    rows = _call(
        b, inst, state, "query", sql="WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
    ).text
    assert rows.splitlines()[1:51] == [str(i) for i in range(1, 51)] and "there are more" in rows


def test_sql_gold_query_returns_the_stored_answer_for_every_instance() -> None:
    from campflow.bootcamps.sql.bootcamp import NUMBER_TOLERANCE

    b = registry.make("sql")
    for inst in _instances("sql", range(60)):
        q = inst.data["question"]
        columns, rows, cut = b.new_state(inst).db.run(q["sql"])
        values = [r[0] for r in rows]
        assert not cut
        if q["kind"] == "number":
            assert abs(values[0] - q["answer"]) <= NUMBER_TOLERANCE, (q["text"], values)
        elif q["kind"] == "name":
            assert values == [q["answer"]]
        else:
            assert sorted(values) == q["answer"]
        assert b.new_state(inst).db.run(q["wrong_sql"])[0], "the perturbed query runs too"


def test_sql_list_answers_earn_f1_partial_credit() -> None:
    b = registry.make("sql")
    lists = [
        i
        for i in _instances("sql", range(40))
        if i.data["question"]["kind"] == "names" and len(i.data["question"]["answer"]) >= 2
    ]
    assert lists
    for inst in lists:
        right = inst.data["question"]["answer"]
        state = b.new_state(inst)
        state.answer = ", ".join(right[1:]).upper()  # one missing, case differs
        score = b.score(inst, state, ())
        n = len(right)
        assert not score.success and score.details["reason"] == "partial_list"
        assert score.reward == pytest.approx(2 * (n - 1) / (2 * n - 1), abs=1e-6)


# -- shop --------------------------------------------------------------------------------------------


def test_shop_refuses_unknown_products_options_and_pages_by_name() -> None:
    b = registry.make("shop")
    for inst in _instances("shop", range(5)):
        state = b.new_state(inst)
        target = state.products[inst.data["target"]]
        dim, values = next(iter(target["options"].items()))
        good = {d: v[0] for d, v in target["options"].items()}
        _rejects(b, inst, state, "view", {"product_id": "B00000"}, "'B00000'", "expected an id")
        _rejects(b, inst, state, "view", {"product_id": LONG}, "unknown product id", "...")
        _rejects(b, inst, state, "add_to_cart", {"product_id": "nope", "options": good}, "'nope'")
        _rejects(
            b,
            inst,
            state,
            "add_to_cart",
            {"product_id": target["id"], "options": {**good, dim: "plaid"}},
            "'plaid'",
            "expected one of",
            values[0],
        )
        _rejects(
            b,
            inst,
            state,
            "add_to_cart",
            {"product_id": target["id"], "options": {**good, "flavor": "x"}},
            "no option 'flavor'",
            dim,
        )
        _rejects(
            b,
            inst,
            state,
            "add_to_cart",
            {"product_id": target["id"], "options": {d: v for d, v in good.items() if d != dim}},
            f"choose a {dim}",
        )
        _rejects(
            b,
            inst,
            state,
            "add_to_cart",
            {"product_id": target["id"], "options": {**good, dim: LONG}},
            "does not come in",
            "...",
        )
        for page in (0, -1, 10**18):
            _rejects(
                b, inst, state, "search", {"query": target["category"], "page": page}, f"page {page}", "expected 1 to"
            )
        _rejects(b, inst, state, "search", {"query": LONG}, "100000 characters", "expected 1 to 200")
        _rejects(b, inst, state, "search", {"query": "?!"}, "no words")


def test_shop_rewards_near_misses_below_half_and_other_kinds_with_nothing() -> None:
    b = registry.make("shop")
    for inst in _instances("shop", range(20)):
        goal = inst.data["goal"]
        for pid in inst.data["near_misses"]:
            state = b.new_state(inst)
            b.apply(inst, state, b._near_miss_purchase(inst, state, random.Random(pid)))
            b.apply(inst, state, Action("checkout"))
            score = b.score(inst, state, ())
            assert 0.0 < score.reward < 0.5 and not score.success, score
        other = next(p for p in inst.data["products"] if p["category"] != goal["category"])
        state = b.new_state(inst)
        b.apply(
            inst,
            state,
            Action(
                "add_to_cart", {"product_id": other["id"], "options": {d: v[0] for d, v in other["options"].items()}}
            ),
        )
        b.apply(inst, state, Action("checkout"))
        assert b.score(inst, state, ()).details["reason"] == "wrong_category"


# -- calendar ----------------------------------------------------------------------------------------


def test_calendar_refuses_bad_days_times_durations_people_and_ids_by_name() -> None:
    b = registry.make("calendar")
    for inst in _instances("calendar", range(5)):
        state = b.new_state(inst)
        who = sorted(inst.data["people"])[:2]
        day = inst.data["days"][0]
        eid = inst.data["events"][0]["id"]
        ok = {"title": "Sync", "attendees": who, "day": day, "start": "10:00", "duration": 30}
        for bad_day in ("Sun", LONG, ""):
            _rejects(b, inst, state, "create_event", {**ok, "day": bad_day}, "day", "expected one of")
        for bad_time in ("25:00", "9:07", "-1:00", "noon", LONG):
            _rejects(b, inst, state, "create_event", {**ok, "start": bad_time}, "expected")
        _rejects(b, inst, state, "create_event", {**ok, "start": "10:10"}, "quarter hour")
        for bad_len in (-30, 0, 10, 481, 10**18):
            _rejects(b, inst, state, "create_event", {**ok, "duration": bad_len}, f"duration {bad_len}", "15 to 480")
        _rejects(b, inst, state, "create_event", {**ok, "start": "23:30", "duration": 60}, "after midnight")
        _rejects(b, inst, state, "create_event", {**ok, "title": LONG}, "100000 characters", "1 to 80")
        _rejects(b, inst, state, "create_event", {**ok, "attendees": ["Mallory"]}, "'Mallory'", who[0])
        _rejects(b, inst, state, "create_event", {**ok, "attendees": [who[0], who[0].lower()]}, "twice")
        _rejects(b, inst, state, "create_event", {**ok, "attendees": []}, "0 attendees")
        _rejects(b, inst, state, "find_free_slots", {"attendees": who, "day": day, "duration": -15}, "-15")
        for bad_id in ("e999", "", LONG):
            _rejects(
                b,
                inst,
                state,
                "move_event",
                {"event_id": bad_id, "day": day, "start": "10:00"},
                "unknown event id",
                "e1",
            )
            _rejects(b, inst, state, "cancel_event", {"event_id": bad_id}, "unknown event id")
        _rejects(b, inst, state, "move_event", {"event_id": eid, "day": day, "start": "23:45"}, "after midnight")


def test_calendar_generates_consistent_calendars_and_fails_any_collateral_change() -> None:
    from campflow.bootcamps.calendar.schedule import check

    b = registry.make("calendar")
    for inst in _instances("calendar", range(20)):
        d = inst.data
        assert check({**d, "requests": []}, b.new_state(inst).events)[0] is None, "no overlaps at the start"
        for e in d["events"]:
            assert all(d["people"][p][0] <= e["start"] and e["end"] <= d["people"][p][1] for p in e["attendees"])
        solved, _ = b.solve(inst)
        touched = {r.get(k) for r in d["requests"] for k in ("id", "movable")}
        other = next((e for e in d["events"] if e["id"] not in touched), None)
        extra = copy.deepcopy(solved)
        b.apply(
            inst,
            extra,
            Action(
                "create_event",
                {
                    "title": "Extra",
                    "attendees": [sorted(d["people"])[0]],
                    "day": d["days"][0],
                    "start": "00:00",
                    "duration": 15,
                },
            ),
        )
        assert b.score(inst, extra, ()).details["reason"] == "extra_event"
        if other is not None:
            cancelled = copy.deepcopy(solved)
            b.apply(inst, cancelled, Action("cancel_event", {"event_id": other["id"]}))
            assert b.score(inst, cancelled, ()).reward == 0.0
            assert b.score(inst, cancelled, ()).details["reason"] == "changed_other"


def test_calendar_double_booking_scores_zero() -> None:
    b = registry.make("calendar")
    for inst in _instances("calendar", range(20)):
        state = b.new_state(inst)
        create = (
            next(r for r in inst.data["requests"] if r["kind"] == "create")
            if any(r["kind"] == "create" for r in inst.data["requests"])
            else None
        )
        if create is None:
            continue
        busy = next(
            (
                e
                for e in inst.data["events"]
                if set(e["attendees"]) & set(create["attendees"])
                and e["day"] in create["days"]
                and e["id"] not in {r.get("movable") for r in inst.data["requests"]}
            ),
            None,
        )
        if busy is None:
            continue
        obs = b.apply(
            inst,
            state,
            Action(
                "create_event",
                {
                    "title": create["title"],
                    "attendees": create["attendees"],
                    "day": busy["day"],
                    "start": f"{busy['start'] // 60:02d}:{busy['start'] % 60:02d}",
                    "duration": create["duration"],
                },
            ),
        )
        assert "Warning: overlaps" in obs.text
        assert b.score(inst, state, ()).reward == 0.0


# -- wordle ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("guess", "target", "colors"),
    [
        ("crane", "crane", "green green green green green"),
        ("speed", "abide", "gray gray yellow gray yellow"),  # the second e has no e left to match
        ("llama", "hello", "yellow yellow gray gray gray"),  # hello has two l's, so both are yellow
        ("eerie", "there", "yellow gray yellow gray green"),  # the green e uses one of two; one e is left
        ("apple", "paper", "yellow yellow green gray yellow"),
        ("robot", "floor", "yellow yellow gray green gray"),
        ("sissy", "oasis", "yellow yellow green gray gray"),  # oasis has two s: one green, one for the first s
    ],
)
def test_wordle_feedback_handles_repeated_letters_like_the_game(guess: str, target: str, colors: str) -> None:
    from campflow.bootcamps.wordle.bootcamp import feedback, render

    assert [part.split("=")[1] for part in render(guess, feedback(guess, target)).split()] == colors.split()


def test_wordle_word_list_is_package_data_of_distinct_common_five_letter_words() -> None:
    from importlib import resources

    from campflow.bootcamps.wordle.bootcamp import word_list

    words = word_list()
    assert 300 <= len(words) <= 2000 and len(set(words)) == len(words)
    assert all(len(w) == 5 and w.isascii() and w.isalpha() and w.islower() for w in words)
    assert resources.files("campflow").joinpath("data/words.txt").is_file()


def test_wordle_solver_finds_every_word_of_every_level_within_its_budget() -> None:
    from campflow.bootcamps.wordle.bootcamp import solver_guesses, word_list

    b = registry.make("wordle")
    for level, p in b.levels.items():
        worst = max(solver_guesses(p.vocabulary, w) for w in word_list()[: p.vocabulary])
        assert worst <= p.max_guesses, (level, worst)


def test_wordle_oracle_reads_only_the_feedback_never_the_hidden_word() -> None:
    b = registry.make("wordle")
    for inst in _instances("wordle", range(20)):
        state, _ = b.solve(inst)
        decoy = dataclasses.replace(inst, data={**inst.data, "target": "zebra"})
        replay = b.new_state(inst)
        for guess, code in zip(state.guesses, state.codes):
            assert b.oracle(decoy, replay).arguments["word"] == guess
            replay.guesses.append(guess)
            replay.codes.append(code)


def test_wordle_refuses_non_words_and_hard_mode_violations_without_spending_a_guess() -> None:
    b = registry.make("wordle")
    for inst in [i for i in _instances("wordle", range(10)) if i.params.hard_mode]:
        state = b.new_state(inst)
        for bad, named in (
            (LONG, "100000 characters"),
            ("abc", "'abc'"),
            ("12345", "'12345'"),
            ("zzzzz", "not in the dictionary"),
            ("", "5 letters"),
        ):
            _rejects(b, inst, state, "guess", {"word": bad}, named, "expected")
        b.apply(inst, state, b.oracle(inst, state))
        first, code = state.guesses[0], state.codes[0]
        from campflow.bootcamps.wordle.bootcamp import colors, word_list

        cs = colors(code)
        for w in word_list():
            greens_kept = all(w[i] == first[i] for i in range(5) if cs[i] == 2)
            yellows_used = all(w.count(ch) >= sum(1 for p, c in zip(first, cs) if p == ch and c) for ch in set(first))
            if not (greens_kept and yellows_used):
                _rejects(b, inst, state, "guess", {"word": w}, "hard mode", repr(w))
                break


def test_wordle_rewards_solving_at_par_fully_later_less_and_never_for_running_out() -> None:
    b = registry.make("wordle")
    for inst in _instances("wordle", range(20)):
        par, budget = inst.data["par"], inst.params.max_guesses
        late = b.new_state(inst)
        wrong = next(w for w in ("about", "other") if w != inst.data["target"])
        for _ in range(budget - par):
            b.apply(
                inst,
                late,
                Action("guess", {"word": wrong})
                if not inst.params.hard_mode or not late.guesses
                else Action("guess", {"word": late.guesses[-1]}),
            )
        while not late.finished:
            b.apply(inst, late, b.oracle(inst, late))
        score = b.score(inst, late, ())
        if late.solved:
            assert score.success and 0.5 <= score.reward <= 1.0
        else:
            assert score.reward == 0.0 and score.details["reason"] == "out_of_guesses"
