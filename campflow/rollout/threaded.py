"""A stepped episode of a served bootcamp: the engine's coroutine on an event loop of its own thread.

:class:`campflow.rollout.stepped.SteppedEpisode` drives the engine's episode coroutine by hand,
``send(reply)`` after ``send(reply)``, which works while the episode awaits nothing but the caller's
replies. A served bootcamp (an MCP server as its tools) also awaits its server: the episode needs a
running loop between two replies. :class:`EpisodeOnLoop` gives it one (a thread per episode) and
offers the coroutine's own ``send``/``close``, so the stepped episode drives it unchanged: ``send``
returns what the policy waits on, or raises ``StopIteration`` with the finished episode.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from campflow.agents.base import Policy, PolicyReply, TurnContext


class EpisodeOnLoop:
    """An episode coroutine on its own thread's loop, driven like a coroutine (see the module docstring).

    Args:
        make: builds the episode coroutine from the policy it must use (which waits for ``send``).
        wait: builds what ``send`` returns from the messages and tools the policy was given.
    """

    def __init__(self, make: Callable[[Policy], Coroutine[Any, Any, Any]], wait: Callable[[Any, Any], Any]) -> None:
        self._wait = wait
        self._handoff: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._loop = asyncio.new_event_loop()
        self._pending: asyncio.Future[PolicyReply] | None = None
        self._thread = threading.Thread(target=self._run, args=(make(_LoopCaller(self)),), daemon=True)

    def _run(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        try:
            self._handoff.put(("done", self._loop.run_until_complete(coroutine)))
        except BaseException as exc:  # noqa: BLE001  (handed to the driving thread)
            self._handoff.put(("error", exc))
        finally:
            self._loop.close()

    async def respond(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> PolicyReply:
        """On the loop: hand the turn to the driving thread and wait for its reply."""
        self._pending = self._loop.create_future()
        self._handoff.put(("wait", self._wait(messages, tools)))
        return await self._pending

    def send(self, reply: PolicyReply | None) -> Any:
        """Start the episode (first call) or answer the waiting turn; returns the next wait.

        Raises:
            StopIteration: the episode ended; its value is the episode.
        """
        if not self._thread.is_alive() and self._pending is None:
            self._thread.start()
        else:
            self._loop.call_soon_threadsafe(self._pending.set_result, reply)  # type: ignore[union-attr]
        return self._next()

    def throw(self, exc: BaseException) -> Any:
        """Raise ``exc`` in the waiting turn (as a coroutine's ``throw``); returns the next wait.

        Raises:
            StopIteration: the episode ended; its value is the episode.
        """
        self._loop.call_soon_threadsafe(self._pending.set_exception, exc)  # type: ignore[union-attr]
        return self._next()

    def _next(self) -> Any:
        """What the episode's thread hands back next: a wait, the episode's end, or its error."""
        kind, value = self._handoff.get()
        if kind == "wait":
            return value
        if kind == "done":
            raise StopIteration(value)
        raise value

    def close(self) -> None:
        """Abandon the episode: its turn is cancelled, so its server is stopped; returns once it is."""
        if self._thread.is_alive() and self._pending is not None and not self._pending.done():
            self._loop.call_soon_threadsafe(self._pending.cancel)
            self._thread.join()


class _LoopCaller(Policy):
    """The policy of an episode on its loop: each turn waits for the driving thread's reply."""

    model_id = "remote"

    def __init__(self, driver: EpisodeOnLoop) -> None:
        self.driver = driver

    async def respond(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], context: TurnContext
    ) -> PolicyReply:
        return await self.driver.respond(messages, tools)
