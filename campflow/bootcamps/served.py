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
here and say so. :class:`HeldEpisode` holds one episode open for synchronous code that steps it a call
at a time (a trainer's environment): the same three hooks, run inside one task on a loop of its own thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

from campflow.bootcamps.base import Instance, Observation, P, S, Score, ToolArgs
from campflow.errors import ToolServerError


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

    def shared_server(self, instance: Instance[P]) -> str | None:
        """The server every episode of ``instance`` shares, reset between them (so episodes must not overlap),
        or None where each episode gets a server of its own (default)."""
        return None

    def scores_answer(self, instance: Instance[P]) -> bool:
        """Whether :meth:`score` reads the answer the final tool submits (default: True). False tells the hack
        battery that an answer cannot score differently from none, so it plays no answer exploits (each
        costs a server start)."""
        return True

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


T = TypeVar("T")


class HeldEpisode(Generic[S]):
    """One episode of a served bootcamp held open for synchronous code, a step at a time.

    The episode's server is started in a task on an event loop of the episode's own thread, and every step
    (:meth:`run`) runs inside that task, as the engine runs an episode: the server's client is entered and
    left in one task (its transport requires it) and the episode's context (its folder) is set. :meth:`close`
    stops the server; so does the end of the process, however it ends (a stdio server's guard dies with the
    thread that started it).

    Args:
        bootcamp: a served bootcamp.
        instance: the instance to play.

    Raises:
        ToolServerError: the server would not start.
    """

    def __init__(self, bootcamp: ServedTools[P, S], instance: Instance[P]) -> None:
        self.bootcamp, self.instance = bootcamp, instance
        self._loop = asyncio.new_event_loop()
        self._steps: asyncio.Queue[tuple[Callable[[S], Awaitable[Any]], concurrent.futures.Future] | None]
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()  # set when the thread's work ends
        opened: concurrent.futures.Future[S] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._main, args=(opened,), name="campflow-held-episode", daemon=True)
        self._thread.start()
        try:
            self.state: S = opened.result()
        except BaseException:
            self._thread.join()
            raise

    def _main(self, opened: concurrent.futures.Future[S]) -> None:
        try:
            self._loop.run_until_complete(self._hold(opened))
        finally:
            self._loop.close()
            self._ended.set_result(None)

    async def _hold(self, opened: concurrent.futures.Future[S]) -> None:
        self._steps = asyncio.Queue()
        try:
            async with self.bootcamp.episode(self.instance) as state:
                opened.set_result(state)
                while (step := await self._steps.get()) is not None:
                    run, result = step
                    try:
                        result.set_result(await run(state))
                    except Exception as exc:  # the step's own failure, handed to its caller
                        result.set_exception(exc)
        except BaseException as exc:  # noqa: BLE001  (handed to the constructor; a later step sees the end)
            if not opened.done():
                opened.set_exception(exc)

    @property
    def open(self) -> bool:
        """Whether the episode's server is still held."""
        return self._thread.is_alive()

    def run(self, step: Callable[[S], Awaitable[T]]) -> T:
        """Await ``step(state)`` inside the episode's task; returns its result or raises its exception.

        Raises:
            ToolServerError: the episode ended (closed, or its server's connection failed) before the step ran.
        """
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        try:
            self._loop.call_soon_threadsafe(self._steps.put_nowait, (step, result))
        except RuntimeError:  # the loop is closed
            pass
        concurrent.futures.wait([result, self._ended], return_when=concurrent.futures.FIRST_COMPLETED)
        if not result.done():
            raise ToolServerError(f"{self.bootcamp.name}: the episode's server is no longer running")
        return result.result()

    def close(self) -> None:
        """Stop the episode's server (the episode ends where it stands); returns once it is stopped."""
        if self.open:
            try:
                self._loop.call_soon_threadsafe(self._steps.put_nowait, None)
            except RuntimeError:  # the loop has just closed: the thread is ending on its own
                pass
            self._thread.join()


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
