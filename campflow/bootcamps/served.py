"""Bootcamps whose tools run in a server of their own, a fresh one for every episode (MCP servers).

A :class:`~campflow.bootcamps.base.Bootcamp`'s tools are methods acting on an in-memory world. A
*served* bootcamp's world is another program: a process started for the episode (or a remote server
reset for it), reached asynchronously. The engine (:func:`campflow.rollout.engine.run_episode`)
plays it through three async hooks instead of ``new_state`` and ``call``::

    async with bootcamp.episode(instance) as state:   # start the server: a fresh world
        obs = await bootcamp.call_served(instance, state, name, args)   # each tool call, in order
        ...
        await bootcamp.conclude(instance, state)   # read the final world where score() needs it
        score = bootcamp.score(instance, state, transcript)
    # the server is stopped here, however the episode ended (final tool, budget, timeout, crash)

:meth:`~ServedTools.tools` must be known once :meth:`~ServedTools.episode` has
opened (the server's declared tools). Failures split as in the engine: a
:class:`~campflow.errors.ToolError` is the model's (it reads ``Error: <message>`` and goes on), a
:class:`~campflow.errors.ToolServerError` the server's (the episode ends ``infra_error``).

:meth:`~ServedTools.solve` plays the oracle on a fresh server from synchronous code (oracle
validation, the contract); the synchronous ``new_state``/``call`` of an in-memory world do not exist
here and say so.
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic

from campflow.bootcamps.base import Instance, Observation, P, S, Score, ToolArgs


class ServedTools(Generic[P, S]):
    """The mixin of a bootcamp whose tool layer is a server started (or reset) for each episode, listed
    before :class:`~campflow.bootcamps.base.Bootcamp`: ``class MyBootcamp(ServedTools, Bootcamp)``.
    See the module docstring."""

    def episode(self, instance: Instance[P]) -> AbstractAsyncContextManager[S]:
        """Start a fresh server for one episode of ``instance`` and yield its state; stop it on exit.

        Raises:
            ToolServerError: the server would not start (the episode is recorded ``infra_error``).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement episode()")

    async def call_served(self, instance: Instance[P], state: S, name: str, args: ToolArgs) -> Observation:
        """Run tool ``name`` on the episode's server.

        Raises:
            ToolError: the server refused the call (the model reads the message and goes on).
            ToolServerError: the server failed (crashed, hung, answered malformed JSON-RPC).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement call_served()")

    async def conclude(self, instance: Instance[P], state: S) -> None:
        """Read what :meth:`score` needs from the final server state into ``state`` (default: nothing).

        Runs once after every episode that is scored, before :meth:`score`, with the server still up.

        Raises:
            ToolServerError: the final state could not be read (the episode is recorded ``infra_error``).
        """

    def new_state(self, instance: Instance[P]) -> S:
        raise TypeError(f"{self.name}: a served bootcamp's state comes from episode(), which starts its server")

    def call(self, instance: Instance[P], state: S, name: str, args: ToolArgs) -> Observation:
        raise TypeError(f"{self.name}: a served bootcamp's tools are called with call_served() on a live episode")

    async def solve_served(self, instance: Instance[P]) -> tuple[S, Score]:
        """Play the oracle on a fresh server and score the result (the async twin of :meth:`solve`)."""
        tools = None
        async with self.episode(instance) as state:
            for _ in range(self.max_turns(instance)):
                action = self.oracle(instance, state)
                tools = tools or {t.name: t for t in self.tools(instance)}
                args = tools[action.name].args_model.model_validate(dict(action.arguments))
                if (await self.call_served(instance, state, action.name, args)).final:
                    state.finished = True
                    await self.conclude(instance, state)
                    return state, self.score(instance, state, ())
        raise RuntimeError(
            f"{self.name} oracle did not finish instance {instance.id} within {self.max_turns(instance)} turns"
        )

    def solve(self, instance: Instance[P]) -> tuple[S, Score]:
        """:meth:`solve_served` from synchronous code (on a thread of its own, so any caller's loop is left alone)."""
        return run_async(self.solve_served(instance))


def run_async(coroutine: Any) -> Any:
    """Run ``coroutine`` to its end on a new event loop in a thread of its own; return its result."""
    out: dict[str, Any] = {}

    def main() -> None:
        try:
            out["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # handed to the caller's thread below
            out["error"] = exc

    thread = threading.Thread(target=main, name="campflow-served", daemon=True)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]
