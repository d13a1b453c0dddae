"""Function-calling data (a JSONL file written here, and the same rows as a saved HF dataset) as bootcamps."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from campflow.agents.oracle import NoisyOraclePolicy, OraclePolicy
from campflow.bootcamps.base import Action
from campflow.errors import ImportSourceError, InvalidParamsError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec, build_bootcamp
from tests.policies import WrongAnswerPolicy

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "city name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            },
            "required": ["city"],
        },
    },
}
EMAIL = {
    "name": "send_email",
    "description": "Send an email.",
    "parameters": {
        "type": "object",
        "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "urgent": {"type": "boolean"}},
        "required": ["to", "subject"],
    },
}
CONVERT = {
    "type": "function",
    "function": {
        "name": "convert",
        "description": "Convert an amount of money.",
        "parameters": {
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "from": {"type": "string"},
                "to": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["amount", "from", "to"],
        },
    },
}


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


ROWS = [
    {
        "messages": _user("Weather in Paris?"),
        "tools": [WEATHER, EMAIL],
        "expected_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
    },
    {
        "messages": [{"role": "system", "content": "You are a travel assistant."}, *_user("Weather in Oslo, in F.")],
        "tools": [WEATHER],
        "expected_calls": [{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "fahrenheit"}}],
    },
    {
        "messages": _user("Weather in Rome and in Lima?"),
        "tools": [WEATHER],
        "expected_calls": [
            {"name": "get_weather", "arguments": {"city": "Rome"}},
            {"name": "get_weather", "arguments": {"city": "Lima"}},
        ],
        "order_sensitive": False,
    },
    {
        "messages": _user("Convert 20 EUR to USD, then email bob@x.org the subject 'rate'."),
        "tools": [CONVERT, EMAIL],
        "order_sensitive": True,
        "expected_calls": [
            {"name": "convert", "arguments": {"amount": 20, "from": "EUR", "to": "USD"}},
            {
                "type": "function",
                "function": {"name": "send_email", "arguments": '{"to": "bob@x.org", "subject": "rate"}'},
            },
        ],
    },
    {
        "messages": _user("Email ann@x.org and joe@x.org 'hi', urgently, and check the weather in Kyiv."),
        "tools": [EMAIL, WEATHER],
        "expected_calls": [
            {"name": "send_email", "arguments": {"to": "ann@x.org", "subject": "hi", "urgent": True}},
            {"name": "send_email", "arguments": {"to": "joe@x.org", "subject": "hi", "urgent": True}},
            {"name": "get_weather", "arguments": {"city": "Kyiv"}},
        ],
    },
    {
        "messages": _user("Convert 5.5 GBP to JPY."),
        "tools": [CONVERT],
        "expected_calls": [{"name": "convert", "arguments": {"amount": 5.5, "from": "GBP", "to": "JPY"}}],
    },
]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def fc(source: Path, **options):
    return build_bootcamp(ImportSpec(name="fc-test", adapter="function-calling", source=str(source), options=options))


@pytest.fixture
def calls(tmp_path: Path):
    return fc(write_jsonl(tmp_path / "calls.jsonl", ROWS))


def _play(b, instance, actions):
    state = b.new_state(instance)
    for action in actions:
        b.apply(instance, state, action)
    return b.score(instance, state, ())


def test_oracle_replays_every_row_and_wrong_answers_score_zero(calls) -> None:
    instances = [calls.generate(level, seed) for level in sorted(calls.levels) for seed in range(20)]
    assert {i.data["row"] for i in instances} == set(range(len(ROWS)))
    solved = asyncio.run(run_episodes([EpisodeSpec(calls, i) for i in instances], OraclePolicy()))
    assert {e.termination for e in solved} == {Termination.SOLVED} and {e.reward for e in solved} == {1.0}
    wrong = asyncio.run(run_episodes([EpisodeSpec(calls, i) for i in instances], WrongAnswerPolicy()))
    assert {e.termination for e in wrong} == {Termination.WRONG_ANSWER} and {e.reward for e in wrong} == {0.0}
    noisy = asyncio.run(
        run_episodes(
            [EpisodeSpec(calls, i) for i in instances],
            NoisyOraclePolicy(p_wrong_move=0.5, p_malformed=0, p_wrong_answer=0, seed=2),
        )
    )
    assert any(0 < e.reward < 1 for e in noisy)


def test_levels_are_tiers_of_expected_call_counts(calls) -> None:
    assert [(p.min_calls, p.max_calls) for p in calls.levels.values()] == [(1, 1), (2, 2), (3, 3)]
    for level, count in ((1, 1), (2, 2), (3, 3)):
        assert all(len(calls.generate(level, s).data["expected_calls"]) == count for s in range(10))
    only = calls.generate({"level": 1, "first_row": 5, "last_row": 5}, 0)
    assert only.data["row"] == 5
    with pytest.raises(InvalidParamsError, match="no row in 0..1 expects 3..3 calls"):
        calls.params({"level": 1, "first_row": 0, "last_row": 1, "min_calls": 3, "max_calls": 3})


def test_the_agent_sees_the_rows_messages_and_tool_schemas_verbatim(calls) -> None:
    instance = calls.generate({"level": 1, "first_row": 1, "last_row": 1}, 0)
    messages = calls.prompt(instance)
    assert messages[0]["role"] == "system" and messages[0]["content"].endswith("You are a travel assistant.")
    assert "finish" in messages[0]["content"] and messages[1:] == ROWS[1]["messages"][1:]
    schemas = calls.tool_schemas(instance)
    assert schemas[0] == WEATHER and schemas[-1]["function"]["name"] == "finish"


def test_reward_is_call_matching_on_names_and_arguments(calls) -> None:
    def row(i):
        return calls.generate({"level": 1, "first_row": i, "last_row": i, "min_calls": 0, "max_calls": 3}, 0)

    def call(name, **arguments):
        return Action(name, arguments)

    finish = Action("finish", {})
    two_cities = row(2)
    swapped = _play(calls, two_cities, [call("get_weather", city="Lima"), call("get_weather", city="Rome"), finish])
    assert swapped.success and swapped.reward == 1.0, "order-insensitive rows match as multisets"
    extra = _play(
        calls,
        two_cities,
        [call("get_weather", city="Rome"), call("get_weather", city="Lima"), call("get_weather", city="Oslo"), finish],
    )
    assert extra.reward == pytest.approx(2 / 3) and extra.details["reason"] == "extra_call"
    wrong_city = _play(calls, two_cities, [call("get_weather", city="Rome"), call("get_weather", city="Lim"), finish])
    assert wrong_city.reward == 0.5 and wrong_city.details["reason"] == "wrong_arguments"
    default_spelled_out = _play(calls, row(0), [call("get_weather", city="Paris", unit="celsius"), finish])
    assert default_spelled_out.success, "an optional argument at its default equals omitting it"
    ordered = row(3)
    email = call("send_email", to="bob@x.org", subject="rate")
    convert = call("convert", amount=20.0, **{"from": "EUR", "to": "USD"})
    assert _play(calls, ordered, [convert, email, finish]).success, "20 and 20.0 are the same number"
    out_of_order = _play(calls, ordered, [email, convert, finish])
    assert out_of_order.reward == 0.5 and out_of_order.details["reason"] == "wrong_order"
    assert _play(calls, ordered, [finish]).details["reason"] == "no_calls"
    wrong_tool = _play(calls, row(0), [call("send_email", to="a@b.c", subject="Paris"), finish])
    assert wrong_tool.reward == 0.0 and wrong_tool.details["reason"] == "wrong_tool"


def test_arguments_are_validated_against_the_rows_schema(calls) -> None:
    instance = calls.generate(1, 0)
    weather = next(t for t in calls.tools(instance) if t.name == "get_weather")
    with pytest.raises(ValueError):
        weather.args_model.model_validate({"city": "Paris", "unit": "kelvin"})
    with pytest.raises(ValueError):
        weather.args_model.model_validate({"town": "Paris"})


def test_a_saved_hugging_face_dataset_imports_like_the_jsonl_file(tmp_path: Path, calls) -> None:
    datasets = pytest.importorskip("datasets")
    flat = [
        {
            "messages": json.dumps(r["messages"]),
            "tools": json.dumps(r["tools"]),
            "expected_calls": json.dumps(r["expected_calls"]),
            "order_sensitive": r.get("order_sensitive", False),
        }
        for r in ROWS
    ]
    datasets.Dataset.from_list(flat).save_to_disk(str(tmp_path / "saved"))
    saved = fc(tmp_path / "saved")
    assert [p.model_dump() for p in saved.levels.values()] == [p.model_dump() for p in calls.levels.values()]
    for i in range(len(ROWS)):
        params = {"level": 1, "first_row": i, "last_row": i, "min_calls": 0, "max_calls": 3}
        a, b = calls.generate(params, 0), saved.generate(params, 0)
        assert a.data == b.data and saved.solve(b)[1].success
    assert saved.version != calls.version, "the dataset's fingerprint, not the JSONL hash, versions it"


def test_the_version_changes_when_the_file_does(tmp_path: Path, calls) -> None:
    changed = fc(write_jsonl(tmp_path / "calls.jsonl", ROWS[:-1]))
    assert changed.version != calls.version and changed.version.startswith("fc")


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ({"messages": _user("hi"), "expected_calls": []}, r"line 3: missing field 'tools'"),
        ({"tools": [WEATHER], "expected_calls": []}, r"line 3: missing field 'messages'"),
        ({"messages": _user("hi"), "tools": [WEATHER]}, r"line 3: missing field 'expected_calls'"),
        ('{"messages": [', r"line 3: not valid JSON"),
        (
            {"messages": _user("hi"), "tools": [WEATHER], "expected_calls": [{"name": "book_flight", "arguments": {}}]},
            r"line 3: expected call 'book_flight' names no tool",
        ),
        (
            {"messages": _user("hi"), "tools": [WEATHER], "expected_calls": [{"name": "get_weather", "arguments": {}}]},
            r"line 3: expected call 'get_weather' does not fit its tool's schema: city is required",
        ),
    ],
)
def test_rows_with_missing_or_wrong_fields_are_one_clear_error_naming_the_line(
    tmp_path: Path, bad_line, message
) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], ROWS[1], bad_line, ROWS[2]])
    with pytest.raises(ImportSourceError, match=message):
        fc(path)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ImportSourceError, match="does not exist"):
        fc(tmp_path / "nope.jsonl")


def test_perturbed_calls_stay_valid_and_cost_reward(calls) -> None:
    instance = calls.generate(1, 0)
    state = calls.new_state(instance)
    action = calls.oracle(instance, state)
    wrong = calls.perturb(instance, state, action, random.Random(0))
    assert wrong != action
    assert _play(calls, instance, [wrong, Action("finish", {})]).reward == 0.0
