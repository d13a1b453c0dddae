"""Re-scoring a stored episode with the bootcamp's current verifier, without running the model again.

The store keeps transcripts, not worlds, so the world is rebuilt: the episode's assistant turns are
replayed, as recorded, through the rollout engine on a fresh state of the instance (tools are
deterministic functions of the instance and the calls), and the current :meth:`score` judges the
result. Every recorded turn is replayed (no turn budget or error streak ends the replay early), so the
replay ends where the transcript ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.bootcamps.base import Bootcamp, Instance
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episode
from campflow.rollout.episode import Episode


class _Replay(Policy):
    """Says the recorded assistant turns again, in order."""

    model_id = "replay"
    suspends = False

    def __init__(self, turns: Sequence[Mapping[str, Any]]) -> None:
        self.turns = list(turns)

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        if context.turn >= len(self.turns):  # a transcript without assistant turns: nothing to say
            return PolicyReply(content="")
        m = self.turns[context.turn]
        return PolicyReply(
            content=m.get("content") or None,
            tool_calls=list(m["tool_calls"]) if m.get("tool_calls") else None,
            reasoning=m.get("reasoning_content") or None,
        )


def replay(bootcamp: Bootcamp, instance: Instance, transcript: Sequence[Mapping[str, Any]]) -> Episode:
    """The stored episode's turns played again on a fresh world and scored by the current verifier."""
    turns = [m for m in transcript if m.get("role") == "assistant"]
    settings = RolloutSettings(max_turns=max(len(turns), 1), max_consecutive_errors=len(turns) + 1)
    coro = run_episode(EpisodeSpec(bootcamp, instance), _Replay(turns), settings, run_id="rescore")
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the rollout engine awaited something, but a replay never waits")
