"""Malformed model output, table-driven: each case gets an error observation or a termination, and the
engine never raises. Each case runs in-process and through a real HTTP endpoint with the openai client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.openai_policy import EndpointPolicy
from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.errors import ContextOverflowError, PolicyError
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episode
from campflow.rollout.episode import Termination
from campflow.testing.scripted_server import ReplyScript, ScriptedEndpoint


def native(name: str, arguments: Any, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def text_call(name: str, arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# (case id, reply content, native tool calls, text that must appear in what the environment says next)
CASES: list[tuple[str, Any, Any, str]] = [
    ("invalid_json_arguments", None, [native("calculate", "{expression: 1+1")], "not valid JSON"),
    ("unknown_tool", None, [native("rm_rf", "{}")], "unknown tool 'rm_rf'"),
    ("missing_argument", None, [native("calculate", "{}")], "expression is required"),
    ("extra_argument", None, [native("calculate", '{"expression": "1+1", "x": 2}')], "x is not a known field"),
    ("mistyped_argument", None, [native("calculate", '{"expression": 123}')], "valid string"),
    ("arguments_not_an_object", None, [native("calculate", "[1, 2]")], "must be a JSON object"),
    ("null_arguments", None, [native("calculate", "null")], "expression is required"),
    ("call_without_function", None, [{"id": "c1", "type": "function"}], "without a function"),
    (
        "unclosed_tool_call",
        '<tool_call>{"name": "calculate", "arguments": {"expression": "1+1"}}',
        None,
        "without a closing </tool_call>",
    ),
    ("tool_call_body_not_json", "<tool_call>{name: calculate}</tool_call>", None, "body is not valid JSON"),
    ("tool_call_body_without_name", '<tool_call>{"arguments": {}}</tool_call>', None, 'must hold {"name"'),
    ("empty_reply", "", None, "No tool call found"),
    ("no_content_no_calls", None, None, "No tool call found"),
    ("prose_only", "The answer is probably 42.", None, "No tool call found"),
    ("one_megabyte_reply", "x" * 1_000_000, None, "1000000 characters"),
    (
        "invalid_unicode",
        "\ud800 broken \udfff" + text_call("calculate", {"expression": "\ud83d 1+"}),
        None,
        "cannot parse",
    ),
    (
        "too_many_calls",
        "".join(text_call("calculate", {"expression": f"{i}+1"}) for i in range(12)),
        None,
        "more than 8 calls",
    ),
    ("submit_with_string_answer", text_call("submit", {"answer": "forty"}), None, "valid number"),
]


class ThenOracle(Policy):
    """Plays the scripted replies first, then the oracle."""

    model_id = "scripted-then-oracle"

    def __init__(self, replies: Sequence[PolicyReply]) -> None:
        self.replies = list(replies)
        self.oracle = OraclePolicy()

    async def respond(self, messages, tools, context: TurnContext) -> PolicyReply:
        if self.replies:
            return self.replies.pop(0)
        return await self.oracle.respond(messages, tools, context)


def _spec() -> EpisodeSpec:
    calc = registry.make("calculator")
    return EpisodeSpec(calc, calc.generate(2, 11))


def _said_after_first_turn(transcript: list[dict[str, Any]]) -> str:
    first = next(i for i, m in enumerate(transcript) if m["role"] == "assistant")
    rest = []
    for m in transcript[first + 1 :]:
        if m["role"] == "assistant":
            break
        rest.append(str(m.get("content")))
    return "\n".join(rest)


def _check(episode, expected: str) -> None:
    text = json.dumps(episode.transcript, ensure_ascii=False)  # must serialize: no lone surrogates left
    text.encode("utf-8")
    assert expected in _said_after_first_turn(episode.transcript), _said_after_first_turn(episode.transcript)
    assert episode.termination == Termination.SOLVED, (episode.termination, episode.error)


@pytest.mark.parametrize(("case", "content", "calls", "expected"), CASES, ids=[c[0] for c in CASES])
def test_malformed_reply_in_process_gets_an_error_observation(case, content, calls, expected) -> None:
    policy = ThenOracle([PolicyReply(content=content, tool_calls=calls)])
    episode = asyncio.run(run_episode(_spec(), policy))
    _check(episode, expected)


@pytest.fixture(scope="module")
def http_cases():
    """Every case through one endpoint: each reply is served once, in order, to its own episode."""
    replies = []
    for _, content, calls, _ in CASES:
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if calls is not None:
            msg["tool_calls"] = calls
        replies.append(msg)
    return replies


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_malformed_reply_over_http_through_the_openai_client(http_cases, index: int) -> None:
    case, _, _, expected = CASES[index]

    class HttpThenOracle(Policy):
        model_id = "http-then-oracle"

        def __init__(self, url: str) -> None:
            self.http = EndpointPolicy("scripted", base_url=url, max_retries=0)
            self.oracle = OraclePolicy()
            self.used = False

        async def respond(self, messages, tools, context):
            if not self.used:
                self.used = True
                return await self.http.respond(messages, tools, context)
            return await self.oracle.respond(messages, tools, context)

        async def aclose(self):
            await self.http.aclose()

    with ScriptedEndpoint(ReplyScript([http_cases[index]])) as server:
        policy = HttpThenOracle(server.url)

        async def go():
            try:
                return await run_episode(_spec(), policy)
            finally:
                await policy.aclose()

        episode = asyncio.run(go())
    _check(episode, expected)


def test_both_native_and_text_calls_run_once() -> None:
    reply = PolicyReply(
        content=text_call("calculate", {"expression": "2+2"}), tool_calls=[native("calculate", '{"expression": "2+2"}')]
    )
    episode = asyncio.run(run_episode(_spec(), ThenOracle([reply])))
    first_turn_tools = _said_after_first_turn(episode.transcript).splitlines()
    assert first_turn_tools == ["4"]
    assert episode.termination == Termination.SOLVED


def test_reasoning_is_kept_apart_from_content() -> None:
    reply = PolicyReply(content="<think>add them first</think>" + text_call("calculate", {"expression": "2+2"}))
    episode = asyncio.run(run_episode(_spec(), ThenOracle([reply])))
    first = next(m for m in episode.transcript if m["role"] == "assistant")
    assert first["reasoning_content"] == "add them first"
    assert "<think>" not in first["content"]


def test_several_valid_calls_in_one_turn_all_run_in_order() -> None:
    reply = PolicyReply(
        content=text_call("calculate", {"expression": "1+1"}) + text_call("calculate", {"expression": "2*3"})
    )
    episode = asyncio.run(run_episode(_spec(), ThenOracle([reply])))
    assert _said_after_first_turn(episode.transcript).splitlines() == ["2", "6"]


def test_prose_three_times_in_a_row_ends_as_format_error() -> None:
    policy = ThenOracle([PolicyReply(content="hmm")] * 3)
    episode = asyncio.run(run_episode(_spec(), policy))
    assert episode.termination == Termination.FORMAT_ERROR and episode.reward == 0.0


def test_invalid_calls_three_times_in_a_row_end_as_invalid_tool_call() -> None:
    policy = ThenOracle([PolicyReply(tool_calls=[native("nope", "{}")])] * 3)
    episode = asyncio.run(run_episode(_spec(), policy))
    assert episode.termination == Termination.INVALID_TOOL_CALL
    assert episode.invalid_calls == 3


def test_a_valid_call_resets_the_error_streak() -> None:
    bad, good = PolicyReply(content="hmm"), PolicyReply(content=text_call("calculate", {"expression": "1+1"}))
    episode = asyncio.run(run_episode(_spec(), ThenOracle([bad, bad, good, bad, bad])))
    assert episode.termination == Termination.SOLVED


class Raising(Policy):
    model_id = "raising"

    def __init__(self, exc: BaseException | None = None, sleep: float = 0.0) -> None:
        self.exc, self.sleep = exc, sleep

    async def respond(self, messages, tools, context):
        if self.sleep:
            await asyncio.sleep(self.sleep)
        raise self.exc  # type: ignore[misc]


@pytest.mark.parametrize(
    ("exc", "termination"),
    [
        (PolicyError("endpoint down"), Termination.INFRA_ERROR),
        (ContextOverflowError("maximum context length is 4096 tokens"), Termination.CONTEXT_OVERFLOW),
        (RuntimeError("a bug in a policy"), Termination.INFRA_ERROR),
    ],
)
def test_policy_failures_become_terminations(exc, termination) -> None:
    episode = asyncio.run(run_episode(_spec(), Raising(exc)))
    assert episode.termination == termination and exc.args[0] in episode.error


def test_an_episode_past_its_wall_clock_budget_ends_as_timeout() -> None:
    episode = asyncio.run(
        run_episode(_spec(), Raising(RuntimeError("never"), sleep=5), RolloutSettings(episode_timeout=0.2))
    )
    assert episode.termination == Termination.TIMEOUT


def test_the_turn_budget_ends_as_max_turns() -> None:
    episode = asyncio.run(
        run_episode(
            _spec(),
            ThenOracle([PolicyReply(content=text_call("calculate", {"expression": "1"}))] * 50),
            RolloutSettings(max_turns=4),
        )
    )
    assert episode.termination == Termination.MAX_TURNS and episode.turns == 4


def test_the_token_budget_ends_as_context_overflow() -> None:
    episode = asyncio.run(run_episode(_spec(), OraclePolicy(), RolloutSettings(max_context_tokens=64)))
    assert episode.termination == Termination.CONTEXT_OVERFLOW


def test_the_single_call_fast_path_records_what_the_general_path_does(monkeypatch) -> None:
    """Turns of one valid native call skip the general parse; the episodes must come out identical
    (transcript, counts, token estimates, outcome), including tool errors, images and wrong moves."""
    from campflow.agents.oracle import NoisyOraclePolicy
    from campflow.rollout import engine

    specs = [
        EpisodeSpec(b, inst, sample)
        for b in map(registry.make, registry.names())
        for inst in [b.generate(level, 7 + level) for level in (1, 2)]
        for sample in (0, 1)
    ]

    def play() -> list[dict[str, Any]]:
        policy = NoisyOraclePolicy(p_wrong_move=0.3, p_malformed=0.1, p_wrong_answer=0.2, seed=3)
        episodes = asyncio.run(engine.run_episodes(specs, policy))
        return [
            {k: v for k, v in vars(e).items() if k not in ("wall_s", "latency_s", "_transcript_json")} for e in episodes
        ]

    fast = play()
    monkeypatch.setattr(engine, "one_native_call", lambda *args: None)
    general = play()
    assert len(fast) == len(specs) and fast == general
    assert any(e["invalid_calls"] for e in fast) and any(e["termination"] == Termination.SOLVED for e in fast)
    messages = [m for e in fast for m in e["transcript"][2:]]
    assert any(m["role"] == "tool" and m["content"].startswith("Error:") for m in messages)  # tool errors
    assert any(m["role"] == "user" and isinstance(m["content"], list) for m in messages)  # images


def test_policies_declared_non_suspending_answer_without_yielding_to_the_loop() -> None:
    """The engine arms no episode timer for ``suspends = False`` policies; that is only sound if their
    respond() finishes on its first step, without ever giving the event loop control."""
    from campflow.agents.oracle import NoisyOraclePolicy
    from tests.policies import WrongAnswerPolicy

    spec = _spec()
    state = spec.bootcamp.new_state(spec.instance)
    for policy in (OraclePolicy(), NoisyOraclePolicy(p_malformed=0.5, seed=1), WrongAnswerPolicy()):
        assert policy.suspends is False
        for turn in range(5):
            coro = policy.respond([], [], TurnContext(spec.bootcamp, spec.instance, state, turn, 0))
            with pytest.raises(StopIteration) as done:
                coro.send(None)
            assert isinstance(done.value.value, PolicyReply)
