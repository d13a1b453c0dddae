"""Running a user's agent program on episodes: ``campflow eval --agent``.

For each episode the runner opens the episode on the recording proxy (its base URL and key), makes the
episode's MCP URL on a server of the bootcamp's tools (one per bootcamp for the whole run, on loopback,
in this event loop: :mod:`campflow.mcp.serve`, one episode per URL), and starts the program in a process
group of its own with the episode in its environment and the prompt on its standard input
(:mod:`campflow.proxy.program`). The episode ends when:

- the episode itself ends (the agent called the final tool, or the bootcamp's rules ended it): the final
  tool result says the episode is over, never the reward; the program has ``grace`` seconds to exit;
- the program exits first: the episode is scored on the state it left (``wrong_answer`` at best, since
  no final tool was called), or ends ``agent_error`` when it exited non-zero, its stderr's tail kept;
- the episode timeout passes: ``timeout``.

Whatever ends it, the program's process group is stopped (SIGTERM, then SIGKILL). A program that stopped
after the proxy or the model failed (a 5xx or 429 on its last call) ends ``infra_error``: retried, never mined.
The episode is stored like any other: its id from (run id, instance id, sample), the reward from the
bootcamp's verifier, and its transcript the conversation the model saw (the last answered call's messages
and its reply, from ``proxy_calls``), followed by the results of that reply's tool calls.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from campflow.bootcamps.base import Bootcamp, Instance
from campflow.bootcamps.messages import content_text
from campflow.proxy.app import RecordingProxy
from campflow.proxy.backends import Backend
from campflow.proxy.program import AgentProgram, AgentTask
from campflow.proxy.records import read_calls
from campflow.rollout.engine import RolloutSettings
from campflow.rollout.episode import Episode, Termination
from campflow.serialization import from_json

LOOPBACK = "127.0.0.1"
STDERR_TAIL = 4000  # characters of a failed program's stderr kept in the episode's error


@dataclasses.dataclass(frozen=True)
class AgentItem:
    """One episode to run: an instance of a bootcamp and its sample index."""

    bootcamp: Bootcamp
    instance: Instance
    sample: int


class _Site:
    """The MCP server of one bootcamp's episodes for the whole run (uvicorn on a loopback port, this loop)."""

    def __init__(self, bootcamp: Bootcamp, settings: RolloutSettings, run_id: str) -> None:
        from campflow.mcp.serve import TASK_URI, EpisodeServer, build_server

        self.finished: dict[str, asyncio.Event] = {}
        loop = asyncio.get_running_loop()

        def on_finish(episode_id: str, episode: Episode) -> None:
            event = self.finished.get(episode_id)
            if event is not None:
                loop.call_soon_threadsafe(event.set)

        self.episodes = EpisodeServer(
            None, settings, None, run_id, bootcamp=bootcamp, reveal_outcome=False, on_finish=on_finish
        )
        self.server = build_server(self.episodes, bootcamp.describe_task() + f"\n\nRead the task resource {TASK_URI}.")
        self.url = ""
        self._uvicorn: Any = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        import uvicorn

        from campflow.envserve.server import listen
        from campflow.mcp.serve import MCP_PATH, http_app

        class _Quiet(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # type: ignore[no-untyped-def]  # the CLI's stop handling stays in charge
                yield

        sock = listen(LOOPBACK, 0)
        self.url = f"http://{LOOPBACK}:{sock.getsockname()[1]}{MCP_PATH}"
        app = http_app(self.server, self.episodes, LOOPBACK)
        self._uvicorn = _Quiet(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._task = asyncio.ensure_future(self._uvicorn.serve(sockets=[sock]))
        while not self._uvicorn.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the MCP server stopped before it started")
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        if self._uvicorn is not None and self._task is not None:
            self._uvicorn.should_exit = True
            with contextlib.suppress(Exception):
                await self._task


class AgentRunner:
    """Plays episodes with a user's agent program behind the recording proxy and an MCP server per bootcamp.

    Args:
        program: the agent (:meth:`AgentProgram.parse`).
        backend: the policy behind the proxy (the model under evaluation).
        store: the workspace's store: the proxy's calls, and (through ``on_episode``) the episodes.
        settings: the episode limits; ``episode_timeout`` bounds each program's run.
        run_id: the run the episodes belong to.
        concurrency: episodes (programs) in flight.
        grace: seconds a program has to exit once its episode has ended.
    """

    def __init__(
        self,
        program: AgentProgram,
        backend: Backend,
        store: Any,
        settings: RolloutSettings,
        run_id: str,
        *,
        concurrency: int = 8,
        grace: float = 5.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency = {concurrency}: expected at least 1")
        self.program, self.backend, self.store, self.settings = program, backend, store, settings
        self.run_id, self.concurrency, self.grace = run_id, concurrency, grace
        self._sites: dict[str, _Site] = {}

    async def run(
        self, items: Sequence[AgentItem], on_episode: Callable[[Episode], None] | None = None
    ) -> list[Episode]:
        """Play every item; returns the episodes in the order of ``items`` (``on_episode`` gets each as it ends)."""
        gate = asyncio.Semaphore(self.concurrency)
        async with RecordingProxy(self.backend, self.store) as proxy:
            try:
                for item in items:
                    if item.bootcamp.name not in self._sites:
                        site = self._sites[item.bootcamp.name] = _Site(item.bootcamp, self.settings, self.run_id)
                        await site.start()

                async def one(item: AgentItem) -> Episode:
                    async with gate:
                        episode = await self._play(proxy, item)
                    if on_episode is not None:
                        await asyncio.to_thread(on_episode, episode)
                    return episode

                return list(await asyncio.gather(*(one(item) for item in items)))
            finally:
                for site in self._sites.values():
                    await site.aclose()
                self._sites.clear()

    async def _play(self, proxy: RecordingProxy, item: AgentItem) -> Episode:
        from campflow.storage.store import now

        site = self._sites[item.bootcamp.name]
        session = await asyncio.to_thread(site.episodes.add, item.instance, item.sample)
        episode_id = session.id
        finished = site.finished[episode_id] = asyncio.Event()
        if session.finished is not None:  # the episode could not be set up: nothing for the agent to play
            return self._recorded(session.finished, [], {})
        key = proxy.open_episode(episode_id)
        watch = getattr(self.backend, "watch", None)  # a backend that answers per task (the demonstrator)
        if watch is not None:
            watch(episode_id, item.bootcamp, item.instance)
        task = site.episodes.task(session)
        prompt = _prompt_text(task["messages"])
        agent_task = AgentTask(
            base_url=proxy.base_url(episode_id),
            api_key=key,
            model=self.backend.model_id,
            mcp_url=f"{site.url}/e/{episode_id}",
            task=task,
            prompt=prompt,
            episode_id=episode_id,
            timeout=self.settings.episode_timeout,
        )
        since = now()
        started = time.perf_counter()
        run = await _run_program(self.program, agent_task, finished, self.grace)
        proxy.close_episode(episode_id)
        forget = getattr(self.backend, "forget", None)
        if forget is not None:
            forget(episode_id)
        await proxy.log.flush()  # the episode's calls, from the proxy's spool into the store
        calls = await asyncio.to_thread(_calls_since, self.store, episode_id, since)
        if session.finished is None:
            termination, reason = _ending(run, calls, self.settings.episode_timeout)
            await asyncio.to_thread(site.episodes.stop, session, reason, termination)
        assert session.finished is not None
        details = {"exit_code": run.exit_code, "stopped": run.stopped, "model_calls": len(calls)}
        episode = self._recorded(session.finished, calls, details)
        episode.wall_s = time.perf_counter() - started
        if run.stderr and episode.termination == Termination.AGENT_ERROR:
            episode.error = f"{episode.error}\n--- stderr (last {STDERR_TAIL} characters) ---\n{run.stderr}"
        site.finished.pop(episode_id, None)
        return episode

    def _recorded(self, episode: Episode, calls: list[dict[str, Any]], agent: dict[str, Any]) -> Episode:
        answered = [c for c in calls if c["status"] == 200]
        recorded = dataclasses.replace(
            episode,
            run_id=self.run_id,
            model_id=self.backend.model_id,
            transcript=_transcript(answered, episode.transcript) if answered else episode.transcript,
            details={**episode.details, "agent": {**agent, "program": self.program.spec}} if agent else episode.details,
        )
        if answered:
            recorded.turns = len(answered)
            recorded.prompt_tokens = sum(c["prompt_tokens"] or 0 for c in answered)
            recorded.completion_tokens = sum(c["completion_tokens"] or 0 for c in answered)
            recorded.latency_s = sum(c["latency_s"] or 0.0 for c in calls)
        return recorded.freeze()


@dataclasses.dataclass
class _Run:
    exit_code: int | None  # None: it was still running when stopped
    timed_out: bool
    stopped: bool  # its process group had to be signalled
    stderr: str


async def _run_program(program: AgentProgram, task: AgentTask, finished: asyncio.Event, grace: float) -> _Run:
    """Run ``program`` for one episode: until it exits, its episode ends (plus ``grace``) or time runs out."""
    env = {**os.environ, **task.environment(), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    try:
        process = await asyncio.create_subprocess_exec(
            *program.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group, stopped as a whole
        )
    except OSError as exc:
        return _Run(None, False, False, f"{program.argv[0]} could not be started: {exc}")
    stdout: collections.deque[bytes] = collections.deque(maxlen=64)
    stderr: collections.deque[bytes] = collections.deque(maxlen=256)
    readers = [
        asyncio.ensure_future(_drain(process.stdout, stdout)),
        asyncio.ensure_future(_drain(process.stderr, stderr)),
    ]
    readers.append(asyncio.ensure_future(_feed(process.stdin, task.prompt.encode())))
    try:
        deadline = time.monotonic() + task.timeout
        exited = asyncio.ensure_future(process.wait())
        ended = asyncio.ensure_future(finished.wait())
        await asyncio.wait({exited, ended}, timeout=task.timeout, return_when=asyncio.FIRST_COMPLETED)
        if ended.done() and not exited.done():  # the episode is over: the program has a moment to exit
            await asyncio.wait({exited}, timeout=max(0.0, min(grace, deadline - time.monotonic())))
        ended.cancel()
        timed_out = not exited.done() and not finished.is_set()
        stopped = not exited.done()
        await _stop_group(process)
    finally:
        if process.returncode is None:
            await _stop_group(process)
        await asyncio.wait(readers, timeout=2.0)
        for reader in readers:
            reader.cancel()
    text = b"".join(stderr).decode("utf-8", errors="replace")[-STDERR_TAIL:]
    return _Run(None if stopped else process.returncode, timed_out, stopped, text)


async def _feed(stream: asyncio.StreamWriter | None, data: bytes) -> None:
    if stream is None:
        return
    with contextlib.suppress(OSError):  # a program that does not read its stdin may have exited
        stream.write(data)
        await stream.drain()
        stream.close()


async def _drain(stream: asyncio.StreamReader | None, tail: collections.deque[bytes]) -> None:
    if stream is None:
        return
    while chunk := await stream.read(65536):
        tail.append(chunk)


async def _stop_group(process: asyncio.subprocess.Process) -> None:
    """Stop the program's whole process group: SIGTERM, then SIGKILL after two seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        try:
            await asyncio.wait_for(process.wait(), timeout=2.0)
        except TimeoutError:
            continue
        if sig == signal.SIGTERM:  # the leader is gone; make sure nothing it started lingers
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        return


def _ending(run: _Run, calls: list[dict[str, Any]], timeout: float) -> tuple[Termination | None, str]:
    """How an episode the agent left unfinished ends, and why (see the module docstring)."""
    last = calls[-1] if calls else None
    if last is not None and (last["status"] >= 500 or last["status"] == 429):  # the proxy's, the model's, or a limit
        return Termination.INFRA_ERROR, f"the model call failed (HTTP {last['status']}): {last['error']}"
    if last is not None and last["error_code"] == "context_length_exceeded":
        return Termination.CONTEXT_OVERFLOW, last["error"] or "context length exceeded"
    if run.timed_out:
        return Termination.TIMEOUT, f"the agent ran past the episode's {timeout:g}s; its process group was stopped"
    if run.exit_code:
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        last_line = f": {lines[-1].strip()}" if lines else ""
        return Termination.AGENT_ERROR, f"the agent program exited with code {run.exit_code}{last_line}"
    return None, "the agent program exited without ending the episode (no final tool call)"


def _calls_since(store: Any, episode_id: str, since: Any) -> list[dict[str, Any]]:
    return [c for c in read_calls(store, [episode_id]) if c["started_at"] >= since]


def _transcript(answered: list[dict[str, Any]], played: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation the model saw: the last answered call's messages and its reply, then the results of
    that reply's tool calls as the episode recorded them (the agent made no later call to show them in)."""
    last = answered[-1]
    reply = _json(last["response"])["choices"][0]["message"]
    messages = [*_json(last["request"])["messages"], reply]
    seen = sum(1 for m in messages if m.get("role") == "tool")
    results = [m for m in played if m.get("role") == "tool"][seen:]
    calls = reply.get("tool_calls") or []
    if calls and results:
        for call, result in zip(calls[-len(results) :], results, strict=False):
            messages.append({**result, "tool_call_id": call.get("id", result.get("tool_call_id"))})
    return messages


def _json(value: Any) -> Any:
    return from_json(value) if isinstance(value, str | bytes) else value


def _prompt_text(messages: Sequence[dict[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    return content_text(users[-1].get("content")) if users else ""


def agent_items(items: Sequence[Any]) -> list[AgentItem]:
    """The planned episodes of a flow (:class:`campflow.tasks.rollout.ShardItem`) as :class:`AgentItem`."""
    from campflow.tasks.rollout import specs_for

    return [AgentItem(spec.bootcamp, spec.instance, spec.sample) for spec in specs_for(list(items))]


def proxy_backend(policy: Any) -> Backend:
    """The backend that serves ``policy`` (a :class:`~campflow.config.PolicyConfig`) behind the proxy.

    A ``demonstrator`` policy with a ``model`` (a cycle's teacher for a user's agent) is the grounded
    demonstrator answering in that model's tokens (:mod:`campflow.proxy.teacher`).

    Raises:
        AgentProgramError: the policy is not a model (``oracle``, ``noisy``, a ``demonstrator`` without a model),
            or an endpoint without a base URL.
    """
    from campflow.proxy.program import AgentProgramError

    if policy.kind == "local":
        from campflow.proxy.local import LocalBackend

        return LocalBackend(
            str(policy.model),
            max_new_tokens=policy.max_tokens,
            temperature=policy.temperature,
            batch_size=policy.batch_size,
            device=policy.device,
            precision=policy.precision,
        )
    if policy.kind == "openai":
        if not policy.base_url or not policy.model:
            raise AgentProgramError(
                f"--agent with --policy openai needs --base-url and --model (got {policy.base_url!r}, {policy.model!r})"
            )
        from campflow.proxy.backends import EndpointBackend

        return EndpointBackend(
            policy.base_url,
            policy.model,
            api_key=os.environ.get(policy.api_key_env) or None,
            sampling={"temperature": policy.temperature, "max_tokens": policy.max_tokens},
            timeout=policy.timeout,
        )
    if policy.kind == "demonstrator" and policy.model:  # the teacher, in the tokens of the model at policy.model
        from campflow.proxy.teacher import DemonstratorBackend

        return DemonstratorBackend(str(policy.model), device=policy.device, precision=policy.precision)
    raise AgentProgramError(
        f"--agent runs an agent program against a model; policy {policy.kind!r} is not one: "
        "expected --policy openai (with --base-url and --model) or --policy local"
    )
