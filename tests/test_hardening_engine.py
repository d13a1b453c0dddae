"""Hostile model output, table-driven: each input ends in a model outcome (never ``infra_error``) with an
error that says what was wrong, within the limits, and every episode of a batch comes back and is stored.

Also here: a bootcamp that cannot set up one instance fails that episode only (through the evaluate
flow), and a model's own text tool calls come back to it rendered as the chat template renders
native calls, which is how the SFT data renders them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import Field

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.base import Instance, Observation, ToolArgs, tool
from campflow.bootcamps.calculator import Calculator
from campflow.config import load_config
from campflow.errors import ToolError
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episode, run_episodes
from campflow.rollout.episode import Episode, Termination
from campflow.rollout.parsing import parse_turn

DEEP = "[" * 5000 + "]" * 5000  # past the recursion limit of json.loads
LONG_INT = "1" * 5001  # past int <-> str conversion's 4,300 digits


def native(name: str, arguments: Any, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def says(name: str, arguments: dict[str, Any]) -> PolicyReply:
    """A reply of one native call with JSON-text arguments."""
    return PolicyReply(tool_calls=[native(name, json.dumps(arguments))])


def text_call(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


class KeyArgs(ToolArgs):
    """Arguments of peek."""

    key: str = Field(description="the constant's name")


class Fragile(Calculator):
    """A calculator with two bugs that a model's output reaches: ``peek`` looks the model's key up without
    checking it, and the note on a reply without a call handles ASCII only."""

    name = "fragile"

    @tool
    def peek(self, instance: Instance, state: Any, args: KeyArgs) -> Observation:
        """Show a named constant."""
        return Observation(str({"pi": 3.14159}[args.key]))

    def no_tool_call_reply(self, instance: Instance, state: Any, content: str) -> str:
        return "No tool call in: " + content.encode("ascii").decode()


SLOW_SQL = (
    "SELECT sum(length(upper(replace(replace(replace('aaaaa' || a.order_id, 'a', 'aaaaa'), 'a', 'aaaaa'), "
    "'a', 'aaa')))) FROM order_items a, order_items b, order_items c, order_items d"
)
LONG_VALUE_SQL = (
    "SELECT length(replace(replace(replace('aaaaaaaaaa', 'a', 'aaaaaaaaaa'), 'a', 'aaaaaaaaaa'), 'a', 'aa'))"
)
DEEP_FOLDER = "d1/d2/d3/d4/d5/d6/d7/d8"
LONG_FOLDER = "/".join(c * 60 for c in "wxyz")  # 243 characters, as mkdir allows


@dataclass
class Case:
    """A scripted start of an episode (then the oracle), and how the episode must end.

    ``fragment`` must appear in the episode's error when it ends in an error category, else in what
    the environment answered to the last scripted reply.
    """

    id: str
    bootcamp: str
    replies: list[PolicyReply]
    termination: Termination
    fragment: str
    settings: RolloutSettings = field(default_factory=RolloutSettings)


THRICE = 3  # RolloutSettings.max_consecutive_errors: three unusable turns in a row end the episode
CASES = [
    # -- item 2: output Python's JSON cannot hold is the model's invalid call, caught at both parse sites
    Case(
        "deep_json_in_a_text_call",
        "calculator",
        [PolicyReply(content=text_call(f'{{"name": "calculate", "arguments": {{"expression": {DEEP}}}}}'))] * THRICE,
        Termination.INVALID_TOOL_CALL,
        "<tool_call> body is not valid JSON (nested too deeply)",
    ),
    Case(
        "deep_json_in_native_arguments",
        "calculator",
        [PolicyReply(tool_calls=[native("calculate", f'{{"expression": {DEEP}}}')])] * THRICE,
        Termination.INVALID_TOOL_CALL,
        "arguments of calculate are not valid JSON (nested too deeply)",
    ),
    Case(
        "deep_object_as_native_arguments",
        "calculator",
        [PolicyReply(tool_calls=[native("calculate", {"expression": nested(5000)})])] * THRICE,
        Termination.INVALID_TOOL_CALL,
        "arguments of calculate cannot be read: they are nested too deeply",
    ),
    Case(
        "long_integer_in_a_text_call",
        "calculator",
        [PolicyReply(content=text_call(f'{{"name": "calculate", "arguments": {{"expression": {LONG_INT}}}}}'))]
        * THRICE,
        Termination.INVALID_TOOL_CALL,
        "not valid JSON (a number has more than 4300 digits)",
    ),
    Case(
        "long_integer_in_native_arguments",
        "calculator",
        [PolicyReply(tool_calls=[native("calculate", f'{{"expression": {LONG_INT}}}')])] * THRICE,
        Termination.INVALID_TOOL_CALL,
        "arguments of calculate are not valid JSON (a number has more than 4300 digits)",
    ),
    Case(
        "long_integer_object_as_native_arguments",
        "calculator",
        [PolicyReply(tool_calls=[native("calculate", {"expression": 10**5000})])] * THRICE,
        Termination.INVALID_TOOL_CALL,
        "cannot be read: a number has more than 4300 digits",
    ),
    Case(
        "lone_surrogate_reaching_the_sql_tool",
        "sql",
        [PolicyReply(tool_calls=[native("query", '{"sql": "SELECT \'\\ud800\'"}')])],
        Termination.SOLVED,
        "query holds a lone surrogate ('\\ud800') at position 8, which is not valid Unicode",
    ),
    # -- item 2: the last line of defence, for bootcamp code that a reply reaches
    Case(
        "a_tool_that_raises_on_the_models_arguments",
        "fragile",
        [says("peek", {"key": "tau"})],
        Termination.INVALID_TOOL_CALL,
        "tool peek raised on the model's arguments: KeyError: 'tau'",
    ),
    Case(
        "a_note_on_prose_that_raises_on_the_models_text",
        "fragile",
        [PolicyReply(content="voilà")],
        Termination.FORMAT_ERROR,
        "the reply could not be handled: UnicodeEncodeError",
    ),
    # -- item 5: limits that hold
    Case(
        "a_megabyte_of_arguments_in_one_native_call",
        "calculator",
        [says("calculate", {"expression": "1+" * 500_000 + "1"})] * THRICE,
        Termination.FORMAT_ERROR,
        "the reply has 1000030 characters; at most 32000 are read",
    ),
    Case(
        "a_megabyte_of_arguments_beside_some_text",
        "calculator",
        [
            PolicyReply(
                content="adding", tool_calls=[native("calculate", json.dumps({"expression": "1+" * 500_000 + "1"}))]
            )
        ]
        * THRICE,
        Termination.FORMAT_ERROR,
        "the reply has 1000036 characters; at most 32000 are read",
    ),
    # a long thought is not malformed output (its token budget bounds it): the call runs, the
    # transcript keeps the reasoning cut to the limit
    Case(
        "a_megabyte_of_reasoning",
        "calculator",
        [PolicyReply(reasoning="hmm " * 250_000, tool_calls=[native("calculate", '{"expression": "1+1"}')])],
        Termination.SOLVED,
        "2",
    ),
    Case(
        "fifty_thousand_unclosed_tool_call_tags",
        "calculator",
        [
            PolicyReply(
                content=text_call('{"name": "calculate", "arguments": {"expression": "2+2"}}') + "<tool_call>" * 50_000
            )
        ],
        Termination.SOLVED,
        "Error: a <tool_call> was not closed; it was ignored\n4",
        RolloutSettings(max_reply_chars=1_000_000),
    ),
    Case(
        "an_sql_query_past_the_step_budget",
        "sql",
        [says("query", {"sql": SLOW_SQL})],
        Termination.SOLVED,
        "query stopped after 1,000,000 steps, the limit",
    ),
    Case(
        "an_sql_value_past_the_length_limit",
        "sql",
        [says("query", {"sql": LONG_VALUE_SQL})],
        Termination.SOLVED,
        "a value grew past 500 characters, the limit",
    ),
    Case(
        "an_sql_comment_then_a_long_run_of_whitespace",
        "sql",
        [says("query", {"sql": "/**/" + " \t" * 40 + "1"})],
        Termination.SOLVED,
        "query refused",
    ),
    # -- item 7: mv obeys mkdir's limits; names match in full
    Case(
        "mv_a_file_into_a_folder_eight_deep",
        "filesystem",
        [
            says("mkdir", {"path": DEEP_FOLDER}),
            says("write", {"path": "zz.keep", "content": "x"}),
            says("mv", {"source": "zz.keep", "destination": DEEP_FOLDER}),
        ],
        Termination.SOLVED,
        "would make a path 9 folders deep; expected at most 8",
    ),
    Case(
        "mv_a_file_into_a_folder_with_a_long_path",
        "filesystem",
        [
            says("mkdir", {"path": LONG_FOLDER}),
            says("write", {"path": "a-rather-long-name.keep", "content": "x"}),
            says("mv", {"source": "a-rather-long-name.keep", "destination": LONG_FOLDER}),
        ],
        Termination.SOLVED,
        "would make a path 267 characters long; expected at most 256",
    ),
    Case(
        "mv_a_folder_whose_files_would_get_too_long_a_path",
        "filesystem",
        [
            says("mkdir", {"path": LONG_FOLDER}),
            says("mkdir", {"path": "pack"}),
            says("write", {"path": "pack/a-rather-long-name.keep", "content": "x"}),
            says("mv", {"source": "pack", "destination": LONG_FOLDER}),
        ],
        Termination.SOLVED,
        "would make a path 272 characters long; expected at most 256",
    ),
    Case(
        "a_folder_name_ending_in_a_newline",
        "filesystem",
        [says("mkdir", {"path": "inbox\n/fake.txt"})],
        Termination.SOLVED,
        "has a bad name 'inbox\\n'",
    ),
]


class Scripted(Policy):
    """Each episode plays its case's replies (chosen by the episode's sample index), then the oracle."""

    model_id = "scripted"

    def __init__(self, scripts: Sequence[Sequence[PolicyReply]]) -> None:
        self.scripts = [list(s) for s in scripts]
        self.oracle = OraclePolicy()

    async def respond(self, messages, tools, context: TurnContext) -> PolicyReply:
        script = self.scripts[context.sample]
        if context.turn < len(script):
            return script[context.turn]
        return await self.oracle.respond(messages, tools, context)


@pytest.fixture(scope="module", autouse=True)
def fragile_bootcamp():
    registry.register("fragile", Fragile, origin="test")
    yield
    registry.unregister("fragile")


def _spec(case: Case, sample: int = 0) -> EpisodeSpec:
    b = registry.make(case.bootcamp)
    return EpisodeSpec(b, b.generate(2, 11), sample)


def _answer_to_reply(transcript: list[dict[str, Any]], k: int) -> str:
    """What the environment said after the ``k``-th assistant message (0-based)."""
    starts = [i for i, m in enumerate(transcript) if m["role"] == "assistant"]
    end = starts[k + 1] if k + 1 < len(starts) else len(transcript)
    return "\n".join(str(m.get("content")) for m in transcript[starts[k] + 1 : end])


def _check(case: Case, episode: Episode) -> None:
    assert episode.termination == case.termination, (episode.termination, episode.error)
    if case.termination.is_model_failure:
        assert case.fragment in (episode.error or ""), episode.error
    else:
        said = _answer_to_reply(episode.transcript, len(case.replies) - 1)
        assert case.fragment in said, said
    stored = episode.transcript_json()  # what the store writes: it serializes, and stays within the limits
    json.loads(stored)
    assert len(stored) < 4 * case.settings.max_reply_chars + 50_000, len(stored)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_output_ends_as_the_models_outcome_with_the_error_named(case: Case) -> None:
    episode = asyncio.run(run_episode(_spec(case), Scripted([case.replies]), case.settings))
    _check(case, episode)


def test_a_tool_that_raised_leaves_the_episode_unscored() -> None:
    case = next(c for c in CASES if c.id == "a_tool_that_raises_on_the_models_arguments")
    episode = asyncio.run(run_episode(_spec(case), Scripted([case.replies])))
    assert episode.reward == 0.0 and episode.details == {"reason": "tool_failed"}
    assert _answer_to_reply(episode.transcript, 0).startswith("Error: the tool failed on these arguments (KeyError")


def test_a_batch_of_every_hostile_input_comes_back_whole_and_is_stored(store) -> None:
    """All cases in one batch beside healthy episodes (default limits): each ends as it does alone, and
    the store holds every episode."""
    cases = [c for c in CASES if c.settings == RolloutSettings()]
    specs = [_spec(c, i) for i, c in enumerate(cases)]
    calc = registry.make("calculator")
    specs += [EpisodeSpec(calc, calc.generate(1, seed), len(cases) + k) for k, seed in enumerate(range(5))]
    episodes = asyncio.run(
        run_episodes(specs, Scripted([c.replies for c in cases] + [[]] * 5), run_id="hostile", concurrency=8)
    )
    assert len(episodes) == len(specs)
    for case, episode in zip(cases, episodes):
        _check(case, episode)
    assert all(e.termination == Termination.SOLVED for e in episodes[len(cases) :])
    store.write_episodes([e.freeze() for e in episodes])
    rows = store.query("SELECT sample_index, termination FROM episodes WHERE run_id = 'hostile' ORDER BY sample_index")
    assert [(r["sample_index"], r["termination"]) for r in rows] == [(e.sample, e.termination.value) for e in episodes]


def test_an_sql_query_is_stopped_by_counting_steps_not_by_a_clock() -> None:
    from campflow.bootcamps.sql.bootcamp import MAX_STEPS, STEP_BATCH

    b = registry.make("sql")
    inst = b.generate(5, 0)
    state = b.new_state(inst)
    with pytest.raises(ToolError, match=f"stopped after {MAX_STEPS:,} steps, the limit"):
        state.db.run(SLOW_SQL)
    assert state.db.steps == MAX_STEPS + STEP_BATCH  # the budget ran out, every time, on every machine


class CountedText(str):
    """Text that counts the characters ``find`` reads: a measure of the scanner's work that no clock gives."""

    read = 0

    def find(self, sub: str, start: int = 0, *args: Any) -> int:  # type: ignore[override]
        at = super().find(sub, start, *args)
        CountedText.read += (at + len(sub) if at >= 0 else len(self)) - start
        return at


def test_the_tool_call_scanner_reads_fifty_thousand_unclosed_tags_in_one_pass() -> None:
    from campflow.rollout.parsing import tool_call_blocks

    calc = registry.make("calculator")
    tools = {t.name: t for t in calc.tools(calc.generate(1, 0))}
    good = text_call('{"name": "calculate", "arguments": {"expression": "1+1"}}')
    for text in (good + "<tool_call>" * 50_000, "<tool_call>" * 50_000 + good + "<tool_call>" * 50_000):
        CountedText.read = 0
        assert len(tool_call_blocks(CountedText(text))) == 1
        assert CountedText.read <= len(text)  # every character once (a regex rescans the rest from every tag)
    parsed = parse_turn(good + "<tool_call>" * 50_000, None, tools)
    assert [c.name for c in parsed.calls] == ["", "calculate"] and parsed.has_valid_call
    assert parsed.calls[0].error == "a <tool_call> was not closed; it was ignored"
    # the first block runs from the first tag to the first closing tag; the other 100,000 tags stay unclosed
    parsed = parse_turn("<tool_call>" * 50_000 + good + "<tool_call>" * 50_000, None, tools)
    assert [c.error_kind for c in parsed.calls] == ["invalid_json", "invalid_json"]


# -- item 3: a failing setup ends one episode ----------------------------------------------------------


class SetupFails(Calculator):
    """A calculator whose ``new_state`` has a bug on every fifth seed."""

    name = "setupfails"

    def new_state(self, instance: Instance) -> Any:
        if instance.seed % 5 == 0:
            raise IndexError("list index out of range")
        return super().new_state(instance)


@pytest.mark.usefixtures("prefect_harness")
def test_an_episode_whose_setup_fails_ends_alone_and_the_rest_of_its_shard_is_stored(workspace) -> None:
    from campflow.flows.evaluate import evaluate
    from campflow.storage.store import Store

    registry.register("setupfails", SetupFails, origin="test")
    try:
        cfg = load_config(
            None,
            {
                "workspace.path": str(workspace),
                "policy.kind": "oracle",
                "eval.n": 10,
                "eval.bootcamps": ["setupfails", "calculator"],
                "rollout.shard_size": 25,
            },
        )
        summary = evaluate(cfg, run_id="setup")
    finally:
        registry.unregister("setupfails")
    rows = Store(workspace / "campflow.duckdb").query(
        "SELECT e.bootcamp, e.termination, e.error, i.seed FROM episodes e JOIN instances i USING (instance_id) "
        "WHERE e.run_id = 'setup'"
    )
    assert len(rows) == 20 and summary.ran == 20  # one shard of 20: the failures did not take it down
    broken = [r for r in rows if r["bootcamp"] == "setupfails" and r["seed"] % 5 == 0]
    assert broken and {(r["termination"], r["error"]) for r in broken} == {
        ("infra_error", "episode setup failed: IndexError: list index out of range")
    }
    assert {r["termination"] for r in rows if r not in broken} == {"solved"}


# -- item 8: the model's history as training renders it -----------------------------------------------


class Recording(Policy):
    """Plays fixed replies, one per turn, and keeps the messages it was shown on each turn."""

    model_id = "recording"

    def __init__(self, replies: Sequence[PolicyReply]) -> None:
        self.replies, self.seen = list(replies), []

    async def respond(self, messages, tools, context: TurnContext) -> PolicyReply:
        self.seen.append(list(messages))
        return self.replies[context.turn]


def test_a_models_text_tool_calls_come_back_to_it_rendered_as_native_calls_are() -> None:
    """The local policy renders the conversation with the model's chat template: text calls must render
    as the same calls sent natively do (once each), and the episodes make the same SFT messages."""
    from campflow.agents.chat import template_messages
    from campflow.training.tinymodel import build_tokenizer

    tokenizer = build_tokenizer(["<|im_start|>user\nhello<|im_end|>"], 300)
    calc = registry.make("calculator")
    spec = EpisodeSpec(calc, calc.generate(2, 11))
    calls = [("calculate", {"expression": "2+3"}), ("calculate", {"expression": "5*4"}), ("submit", {"answer": 20})]
    as_text = Recording([PolicyReply(content=text_call(json.dumps({"name": n, "arguments": a}))) for n, a in calls])
    as_native = Recording(
        [PolicyReply(tool_calls=[native(n, json.dumps(a), f"call_{t}_0")]) for t, (n, a) in enumerate(calls)]
    )
    episodes = [asyncio.run(run_episode(spec, policy)) for policy in (as_text, as_native)]

    def render(messages: list[dict[str, Any]]) -> str:
        return tokenizer.apply_chat_template(
            template_messages(messages, strict=False),
            tools=calc.tool_schemas(spec.instance),
            add_generation_prompt=True,
            tokenize=False,
        )

    second, third = render(as_text.seen[1]), render(as_text.seen[2])
    assert second == render(as_native.seen[1]) and third == render(as_native.seen[2])
    assert third.count('{"name": "calculate", "arguments": {"expression": "2+3"}}') == 1
    assert third.count('<tool_call>\n{"name": "calculate"') == 2
    assert template_messages(episodes[0].transcript) == template_messages(episodes[1].transcript)  # SFT rows


def test_a_text_call_is_recorded_once_and_a_broken_one_stays_visible() -> None:
    broken = "<tool_call>{name: calculate}</tool_call>"
    unknown = text_call('{"name": "add", "arguments": {"a": 1}}')
    prose = "First the sum.\n" + text_call('{"name": "calculate", "arguments": {"expression": "2+3"}}') + "\n"
    replies = [PolicyReply(content=broken), PolicyReply(content=unknown), PolicyReply(content=prose)]
    episode = asyncio.run(run_episode(_spec(CASES[0]), Scripted([replies])))
    first, second, third = [m for m in episode.transcript if m["role"] == "assistant"][:3]
    assert first["content"] == broken and "tool_calls" not in first  # what it wrote wrong, as it wrote it
    assert second["content"] == "" and second["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1}'}
    assert "unknown tool 'add'" in _answer_to_reply(episode.transcript, 1)
    assert third["content"] == "First the sum."
    assert third["tool_calls"][0]["function"] == {"name": "calculate", "arguments": '{"expression": "2+3"}'}
    assert episode.termination == Termination.SOLVED
