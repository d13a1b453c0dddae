"""One episode played a reply at a time by a caller outside the engine: an OpenEnv client, a trainer.

The engine (:func:`campflow.rollout.engine.run_episode`) pulls each reply from a policy. Here the
caller *is* the policy: :class:`SteppedEpisode` runs the engine's own episode coroutine and stops it
wherever it waits for a reply, so every rule of an episode -- parsing and validating calls, a tool's
``Error: ...``, the note on a reply without a call, feedback, the turn budget, consecutive errors,
scoring and the termination category -- is the engine's, not a copy of it.

The coroutine is driven by hand (``send``) rather than on an event loop: the caller's replies arrive
one method call at a time, from a thread or a loop we do not own, and an episode whose policy does
not suspend awaits nothing else. Nothing runs between two replies, so there is nothing to cancel.
A served bootcamp's episode (an MCP server as its tools) does await its server: it runs on a loop of
its own thread instead (:mod:`campflow.rollout.threaded`), driven the same way.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.bootcamps.base import Bootcamp, Instance
from campflow.bootcamps.served import ServedTools
from campflow.errors import EpisodeStopped
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episode
from campflow.rollout.episode import Episode, Termination


class _Wait:
    """What the caller's policy awaits: the driver receives it from ``send`` and answers with a reply."""

    __slots__ = ("messages", "tools")

    def __init__(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> None:
        self.messages, self.tools = messages, tools

    def __await__(self) -> Generator[_Wait, PolicyReply, PolicyReply]:
        reply = yield self
        return reply


class _Caller(Policy):
    """The policy of a stepped episode: each turn waits for the caller's next reply."""

    model_id = "remote"
    suspends = False  # no asyncio timer: the coroutine is never run on a loop (module docstring)

    async def respond(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], context: TurnContext
    ) -> PolicyReply:
        return await _Wait(messages, tools)


@dataclass
class Turn:
    """What the environment said after a reply (or, for the first, the prompt).

    Attributes:
        messages: the messages added to the conversation since the caller's last reply, in OpenAI
            format: tool results (``Error: ...`` for a refused or malformed call), the note on a reply
            without a call, feedback, images of observations. The caller's own assistant turn, as the
            engine recorded it, is left out.
        episode: the finished episode (reward, success, termination, transcript) once it has ended,
            else None.
    """

    messages: list[dict[str, Any]]
    episode: Episode | None = None

    @property
    def done(self) -> bool:
        """Whether the episode has ended."""
        return self.episode is not None


class SteppedEpisode:
    """An episode of ``instance`` that waits for each reply from the caller.

    Args:
        bootcamp: the bootcamp of ``instance``.
        instance: the instance to play.
        settings: the episode's limits, as in evaluation (``RolloutSettings.from_config(cfg.rollout)``).

    After construction :attr:`prompt` holds the opening messages and :attr:`tools` the function schemas,
    unless setting the episode up failed: then :attr:`first` is already done (``infra_error``).
    """

    def __init__(self, bootcamp: Bootcamp, instance: Instance, settings: RolloutSettings = RolloutSettings()) -> None:
        self.bootcamp, self.instance = bootcamp, instance
        spec = EpisodeSpec(bootcamp, instance)
        if isinstance(bootcamp, ServedTools):  # its server's calls need a running loop between two replies
            from campflow.rollout.threaded import EpisodeOnLoop

            self._coro: Any = EpisodeOnLoop(lambda policy: run_episode(spec, policy, settings), _Wait)
        else:
            self._coro = run_episode(spec, _Caller(), settings)
        self._seen = 0
        self.turns = 0
        self.tools: list[dict[str, Any]] = []
        self.episode: Episode | None = None
        self.first = self._advance(None)
        self.prompt = self.first.messages

    @property
    def done(self) -> bool:
        """Whether the episode has ended."""
        return self.episode is not None

    def reply(self, reply: PolicyReply) -> Turn:
        """Play ``reply`` as the agent's next turn; returns what the environment said.

        Raises:
            RuntimeError: the episode has already ended.
        """
        if self.episode is not None:
            raise RuntimeError(f"the episode of {self.instance.id} has already ended")
        self.turns += 1
        return self._advance(reply)

    def stop(self, reason: str, termination: Termination | None = None) -> Episode:
        """End the episode now, where it stands: the caller (an agent program) is gone. Returns the episode.

        Args:
            reason: what happened, one line (the episode's error).
            termination: how it ends; None: as an episode without a final tool, scored on its final state
                (a retryable termination, ``timeout``, is not scored, as in evaluation).

        Raises:
            RuntimeError: the episode has already ended.
        """
        if self.episode is not None:
            raise RuntimeError(f"the episode of {self.instance.id} has already ended")
        try:
            waiting = self._coro.throw(EpisodeStopped(reason, termination))
        except StopIteration as stop:
            self.episode = stop.value
            return self.episode
        self._coro.close()
        raise RuntimeError(f"the rollout engine went on after the agent stopped (awaiting {waiting!r})")

    def close(self) -> None:
        """Abandon the episode where it stands (nothing is scored)."""
        self._coro.close()

    def _advance(self, reply: PolicyReply | None) -> Turn:
        try:
            waiting = self._coro.send(reply)
        except StopIteration as stop:
            self.episode = stop.value
            return Turn(self._new(self.episode.transcript), self.episode)
        if not isinstance(waiting, _Wait):  # the engine awaited something else: it needs a loop now
            self._coro.close()
            raise RuntimeError(f"the rollout engine awaited {waiting!r}; a stepped episode can only wait for replies")
        self.tools = list(waiting.tools)
        return Turn(self._new(waiting.messages))

    def _new(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Messages since the last call, without the caller's own assistant turns."""
        new = [m for m in messages[self._seen :] if m.get("role") != "assistant"]
        self._seen = len(messages)
        return new
