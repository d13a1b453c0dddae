"""The oracle policy (privileged, for validation), the grounded demonstrator (the teacher) and a seeded
noisy oracle that fails on purpose."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.bootcamps.base import Action, Instance
from campflow.serialization import to_json


def native_call(action: Action, call_id: str) -> dict[str, Any]:
    """An :class:`Action` as a native OpenAI tool call."""
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": action.name,
            "arguments": to_json(action.arguments if type(action.arguments) is dict else dict(action.arguments)),
        },
    }


class OraclePolicy(Policy):
    """Plays each bootcamp's oracle: always correct, reads the live state."""

    model_id = "oracle"
    suspends = False

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        action = context.bootcamp.oracle(context.instance, context.state)
        return PolicyReply(tool_calls=[native_call(action, f"call_{context.turn}_0")])


class DemonstratorPolicy(Policy):
    """Plays each bootcamp's grounded demonstrator (:meth:`~campflow.bootcamps.base.Bootcamp.demonstrate`):
    it observes before it acts and passes only what the conversation has shown, so its transcripts
    are fit to imitate. The teacher of SFT data and of ``campflow bootcamps sample``.

    In image mode it first says what the last frame shows (the bootcamp's
    :meth:`~campflow.bootcamps.base.Bootcamp.caption` of the state, where it has one), then acts: a
    model imitating it learns to read each frame, in words it can act on, on every turn. Measured on
    gridworld level 1 (benchmarks/RESULTS.md, Vision): imitating silent demonstrations, the tiny VLM ignored the
    frames (the same first move everywhere) even from a base that read them exactly."""

    model_id = "demonstrator"
    suspends = False

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        bootcamp, instance = context.bootcamp, context.instance
        action = bootcamp.demonstrate(instance, context.state, messages)
        seen = None
        if getattr(instance.params, "observation", None) == "image":
            seen = bootcamp.caption(instance, context.state)
        return PolicyReply(content=seen, tool_calls=[native_call(action, f"call_{context.turn}_0")])


MALFORMED_KINDS = ("invalid_json", "unknown_tool", "missing_argument", "no_tool_call")


class NoisyOraclePolicy(Policy):
    """The oracle with seeded mistakes, for tests, demos and planted failure modes.

    Per turn, with ``p_malformed`` it emits a malformed call (invalid JSON, an unknown tool, a missing
    argument, or prose without a call), and with ``p_wrong_move`` a plausible wrong step
    (:meth:`~campflow.bootcamps.base.Bootcamp.perturb`). Per episode, with ``p_wrong_answer`` it ends
    early with a wrong final answer (:meth:`~campflow.bootcamps.base.Bootcamp.wrong_answer`).
    ``when`` restricts all noise to the instances it accepts. Every decision is drawn from
    ``(seed, instance id, sample, turn)``, so re-runs make the same mistakes.
    """

    suspends = False

    def __init__(
        self,
        p_wrong_move: float = 0.1,
        p_malformed: float = 0.05,
        p_wrong_answer: float = 0.2,
        seed: int = 0,
        when: Callable[[Instance], bool] | None = None,
        model_id: str | None = None,
    ) -> None:
        for key, p in (
            ("p_wrong_move", p_wrong_move),
            ("p_malformed", p_malformed),
            ("p_wrong_answer", p_wrong_answer),
        ):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{key} = {p!r}: expected a probability in [0, 1]")
        self.p_wrong_move, self.p_malformed, self.p_wrong_answer = p_wrong_move, p_malformed, p_wrong_answer
        self.seed, self.when = seed, when
        self.model_id = model_id or (f"noisy(m{p_wrong_move:g},f{p_malformed:g},a{p_wrong_answer:g},s{seed})")

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        bootcamp, instance, state = context.bootcamp, context.instance, context.state
        action = bootcamp.oracle(instance, state)
        call_id = f"call_{context.turn}_0"
        if self.when is not None and not self.when(instance):
            return PolicyReply(tool_calls=[native_call(action, call_id)])
        episode = random.Random(f"{self.seed}:{instance.id}:{context.sample}")
        give_up = episode.random() < self.p_wrong_answer
        give_up_turn = episode.randrange(3)
        rng = random.Random(f"{self.seed}:{instance.id}:{context.sample}:{context.turn}")
        if give_up and (context.turn >= give_up_turn or bootcamp.is_final(action.name)):
            wrong = bootcamp.wrong_answer(instance, state, rng)
            if wrong is not None:
                return PolicyReply(tool_calls=[native_call(wrong, call_id)])
        if rng.random() < self.p_malformed:
            return _malformed(action, call_id, rng)
        if not bootcamp.is_final(action.name) and rng.random() < self.p_wrong_move:
            action = bootcamp.perturb(instance, state, action, rng)
        return PolicyReply(tool_calls=[native_call(action, call_id)])


def _malformed(action: Action, call_id: str, rng: random.Random) -> PolicyReply:
    kind = rng.choice(MALFORMED_KINDS)
    if kind == "no_tool_call":
        return PolicyReply(content="I think I know the answer, let me think about it more.")
    if kind == "invalid_json":
        return PolicyReply(
            tool_calls=[
                {"id": call_id, "type": "function", "function": {"name": action.name, "arguments": "{not json"}}
            ]
        )
    if kind == "unknown_tool":
        return PolicyReply(tool_calls=[native_call(Action("solve_everything", dict(action.arguments)), call_id)])
    args = dict(action.arguments)
    if args:
        args.pop(next(iter(args)))
    else:
        args = {"unexpected": 1}
    return PolicyReply(tool_calls=[native_call(Action(action.name, args), call_id)])
