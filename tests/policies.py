"""A test policy that fails on purpose in the one way the noisy oracle does not draw: always.

It lives with the tests because only they have a use for it: the reward bound it probes is part of
the bootcamp contract (:mod:`campflow.bootcamps.contract`), which plays the same moves without an engine;
this policy plays them through the engine, where tool calls round-trip through JSON and the parser.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.oracle import native_call
from campflow.bootcamps.contract import wrong_ending


class WrongAnswerPolicy(Policy):
    """Ends every episode as early as it can with a wrong final answer (scores 0, or the bootcamp's bound).

    Until the bootcamp offers a wrong final action it follows the oracle; most offer one at once.
    """

    model_id = "wrong-answer"
    suspends = False

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        rng = random.Random(f"wrong:{context.instance.id}:{context.sample}:{context.turn}")
        action = wrong_ending(context.bootcamp, context.instance, context.state, rng)
        return PolicyReply(tool_calls=[native_call(action, f"call_{context.turn}_0")])
