"""The rollout engine: drives any bootcamp with any policy, many episodes in flight.

Each episode is a loop of policy turn -> parse tool calls -> execute -> observe, until the bootcamp's
interaction layer ends it. The engine never raises on model output or endpoint failures: every
episode comes back as an :class:`~campflow.rollout.episode.Episode` with a termination category.

Whose failure an exception is depends on where it is raised. Everything done with a reply once the
policy has returned it (parsing, validating, running a tool with the model's arguments, the
bootcamp's note on a reply without a call) handles the model's output, so an exception there is the
model's: ``invalid_tool_call`` when a tool raised on the model's arguments (the world is then in an
unknown state, so the episode ends unscored), ``format_error`` anywhere else. ``infra_error`` is kept
for what no model output reaches: the policy and its endpoint, setting an episode up (``new_state``,
``prompt``, ``tools``), the bootcamp's feedback between turns and scoring, and the machine itself
(``MemoryError`` stays ``infra_error`` wherever it is raised).

A served bootcamp (:class:`~campflow.bootcamps.served.ServedTools`: the tools are an MCP server)
gets a fresh server per episode, opened before the first turn and stopped when the episode ends however
it ends; its tool calls are awaited, so its episodes are always under ``episode_timeout``. What the
server does wrong is ``infra_error``: failing to start, a :class:`~campflow.errors.ToolServerError`
(crash, malformed JSON-RPC), a call still unanswered when the episode's time runs out, or the final
state unreadable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.bootcamps.base import Bootcamp, Instance
from campflow.bootcamps.messages import content_text, image_parts
from campflow.bootcamps.served import ServedTools
from campflow.config import RolloutConfig
from campflow.errors import ContextOverflowError, EpisodeStopped, PolicyError, ToolError, ToolServerError
from campflow.rollout.episode import RETRYABLE, Episode, Termination
from campflow.rollout.parsing import ParsedCall, ParsedTurn, clean_text, one_native_call, parse_turn


def image_note(call_id: str) -> str:
    """The text of the user message that carries a tool's image after its tool result (chat APIs take
    images in user messages only); RL rollouts render tool images the same way (training/rl.py)."""
    return f"Image returned by call {call_id}:"


@dataclass(frozen=True)
class RolloutSettings:
    """Limits of one episode (mirrors ``RolloutConfig`` in campflow.config)."""

    max_turns: int | None = None  # None: the bootcamp's own budget per instance
    episode_timeout: float = 300.0  # wall-clock seconds per episode
    max_consecutive_errors: int = 3  # turns in a row without a usable call before giving up
    max_calls_per_turn: int = 8
    max_reply_chars: int = 32_000  # content, reasoning and native calls together; longer is a format error (stored cut)
    max_observation_chars: int = 8_000
    max_context_tokens: int | None = None  # token budget of one conversation

    @classmethod
    def from_config(cls, cfg: RolloutConfig) -> RolloutSettings:
        """The limits of the ``rollout`` config section."""
        return cls(
            max_turns=cfg.max_turns,
            episode_timeout=cfg.episode_timeout,
            max_consecutive_errors=cfg.max_consecutive_errors,
            max_calls_per_turn=cfg.max_calls_per_turn,
            max_reply_chars=cfg.max_reply_chars,
            max_observation_chars=cfg.max_observation_chars,
            max_context_tokens=cfg.max_context_tokens,
        )


@dataclass(frozen=True)
class EpisodeSpec:
    """What to run: an instance of a bootcamp and the sample index (0..k-1)."""

    bootcamp: Bootcamp
    instance: Instance
    sample: int = 0


async def run_episode(
    spec: EpisodeSpec,
    policy: Policy,
    settings: RolloutSettings = RolloutSettings(),
    run_id: str = "",
) -> Episode:
    """Play one episode to its end and score it. Never raises (except on cancellation)."""
    if isinstance(spec.bootcamp, ServedTools):
        return await _run_served(spec, policy, settings, run_id)
    started = time.perf_counter()
    try:
        run = _EpisodeRun(spec, policy, settings)
    except Exception as exc:  # the bootcamp cannot set this instance up: this episode fails, not the batch
        return _unplayed(spec, policy, run_id, started, f"episode setup failed: {type(exc).__name__}: {exc}")
    timer = asyncio.timeout(settings.episode_timeout) if policy.suspends else contextlib.nullcontext()
    await _play(run, timer)
    return _scored(run, run_id, started)


async def _run_served(spec: EpisodeSpec, policy: Policy, settings: RolloutSettings, run_id: str) -> Episode:
    """:func:`run_episode` of a served bootcamp: its server lives exactly as long as the episode."""
    bootcamp, instance = spec.bootcamp, spec.instance
    started = time.perf_counter()
    deadline = asyncio.get_running_loop().time() + settings.episode_timeout
    async with contextlib.AsyncExitStack() as stack:
        try:
            async with asyncio.timeout_at(deadline):
                state = await stack.enter_async_context(bootcamp.episode(instance))
            run = _EpisodeRun(spec, policy, settings, state)
        except Exception as exc:  # the server would not start, or not in time: this episode fails, not the batch
            what = (
                f"the tool server did not start within {settings.episode_timeout:g}s"
                if isinstance(exc, TimeoutError)
                else f"{type(exc).__name__}: {exc}"
            )
            return _unplayed(spec, policy, run_id, started, f"episode setup failed: {what}")
        await _play(run, asyncio.timeout_at(deadline))
        if run.termination not in RETRYABLE and not run.tool_failed:
            try:
                await bootcamp.conclude(instance, run.state)
            except Exception as exc:
                run.end(
                    Termination.INFRA_ERROR,
                    f"reading the final server state failed: {type(exc).__name__}: {exc}",
                    force=True,
                )
        return _scored(run, run_id, started)


async def _play(run: _EpisodeRun, timer: contextlib.AbstractAsyncContextManager[Any]) -> None:
    """Play ``run`` under ``timer``; whatever goes wrong becomes its termination."""
    try:
        async with timer:
            await run.play()
    except TimeoutError:
        limit = run.settings.episode_timeout
        if run.awaiting_server is not None:  # the server hung, not the model
            run.end(
                Termination.INFRA_ERROR,
                f"tool server did not answer {run.awaiting_server} within the episode's {limit:g}s",
            )
        else:
            run.end(Termination.TIMEOUT, f"episode exceeded {limit:g}s")
    except Exception as exc:  # a bug in a bootcamp or policy must not take the batch down
        run.end(Termination.INFRA_ERROR, f"{type(exc).__name__}: {exc}")


def _scored(run: _EpisodeRun, run_id: str, started: float) -> Episode:
    """Score ``run`` (unless it ended on an infrastructure failure) and make its :class:`Episode`."""
    bootcamp, instance, policy = run.spec.bootcamp, run.spec.instance, run.policy
    reward, success, details = 0.0, False, {}
    if run.tool_failed:
        details = {"reason": "tool_failed"}
    elif run.termination not in RETRYABLE:  # an infra failure or timeout says nothing to score
        try:
            score = bootcamp.score(instance, run.state, run.transcript)
            reward, details = score.reward, score.details
            success = score.success and run.state.finished
        except Exception as exc:
            run.end(Termination.INFRA_ERROR, f"scoring failed: {type(exc).__name__}: {exc}", force=True)
    termination = run.termination
    if termination is None:  # a final tool ended the episode
        termination = Termination.SOLVED if success else Termination.WRONG_ANSWER
    return Episode(
        run_id=run_id,
        instance_id=instance.id,
        bootcamp=bootcamp.name,
        model_id=policy.model_id,
        sample=run.spec.sample,
        reward=float(reward),
        success=bool(success and termination == Termination.SOLVED),
        termination=termination,
        turns=run.turns,
        tool_calls=run.tool_calls,
        invalid_calls=run.invalid_calls,
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        latency_s=run.latency,
        wall_s=time.perf_counter() - started,
        transcript=run.transcript,
        details=details,
        error=run.error,
        level=instance.level,
    )


def _unplayed(spec: EpisodeSpec, policy: Policy, run_id: str, started: float, error: str) -> Episode:
    return Episode(
        run_id=run_id,
        instance_id=spec.instance.id,
        bootcamp=spec.bootcamp.name,
        model_id=policy.model_id,
        sample=spec.sample,
        reward=0.0,
        success=False,
        termination=Termination.INFRA_ERROR,
        turns=0,
        tool_calls=0,
        invalid_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        latency_s=0.0,
        wall_s=time.perf_counter() - started,
        transcript=[],
        error=error,
        level=spec.instance.level,
    )


class _ToolFailed(Exception):
    """A tool raised something other than ToolError on the model's arguments (the message says what)."""


class _EpisodeRun:
    """The mutable bookkeeping of one episode in flight."""

    tool_failed = False  # a tool raised on the model's arguments; the world is in an unknown state
    awaiting_server: str | None = None  # the served tool call in flight, if any (a timeout then is the server's)

    def __init__(self, spec: EpisodeSpec, policy: Policy, settings: RolloutSettings, state: Any = None) -> None:
        self.spec, self.policy, self.settings = spec, policy, settings
        b, inst = spec.bootcamp, spec.instance
        self.served = state is not None
        self.state = state if self.served else b.new_state(inst)
        self.tools = {t.name: t for t in b.tools(inst)}
        self.schemas = [t.schema() for t in self.tools.values()]
        # Message dicts are shared by the two lists and never changed once appended.
        self.transcript: list[dict[str, Any]] = list(b.prompt(inst))
        self.messages: list[dict[str, Any]] = list(self.transcript)  # what the policy sees
        self._chars = sum(len(_message_text(m)) for m in self.messages)
        self.termination: Termination | None = None
        self.error: str | None = None
        self.turns = self.tool_calls = self.invalid_calls = 0
        self.prompt_tokens = self.completion_tokens = 0
        self.latency = 0.0
        self.max_turns = settings.max_turns or b.max_turns(inst)

    def end(self, termination: Termination, error: str | None = None, force: bool = False) -> None:
        if self.termination is None or force:
            self.termination, self.error = termination, error

    async def play(self) -> None:
        b, inst, s = self.spec.bootcamp, self.spec.instance, self.settings
        respond, clock, tools = self.policy.respond, time.perf_counter, self.tools
        ctx = TurnContext(b, inst, self.state, 0, self.spec.sample)  # one per episode; ``turn`` advances
        errors_in_a_row = 0
        for turn in range(self.max_turns):
            ctx.turn = turn
            t0 = clock()
            try:
                reply = await respond(self.messages, self.schemas, ctx)
            except ContextOverflowError as exc:
                return self.end(Termination.CONTEXT_OVERFLOW, str(exc))
            except EpisodeStopped as exc:  # the agent is gone: scored on the state it left, unless retryable
                if exc.termination is None:
                    self.error = exc.reason
                    return None
                return self.end(Termination(exc.termination), exc.reason)
            except PolicyError as exc:
                return self.end(Termination.INFRA_ERROR, str(exc))
            self.latency += clock() - t0
            self.turns += 1
            try:  # from here on the reply is handled: whatever fails is the model's output (module docstring)
                # Most turns are one well-formed native call: run it without the general parse.
                call = one_native_call(
                    reply.content, reply.tool_calls, reply.reasoning, tools, s.max_calls_per_turn, s.max_reply_chars
                )
                if call is not None:
                    if await self._run_single(call, reply):
                        return None
                    failure = None
                else:
                    ended, failure = await self._general_turn(reply, turn)
                    if ended:
                        return None
            except ToolServerError as exc:
                return self.end(Termination.INFRA_ERROR, str(exc))
            except _ToolFailed as exc:
                self.tool_failed = True
                return self.end(Termination.INVALID_TOOL_CALL, str(exc))
            except MemoryError:
                raise
            except Exception as exc:
                return self.end(
                    Termination.FORMAT_ERROR, f"the reply could not be handled: {type(exc).__name__}: {exc}"
                )
            if failure is None:
                errors_in_a_row = 0
            else:
                errors_in_a_row += 1
                if errors_in_a_row >= s.max_consecutive_errors:
                    return self.end(*failure)
            if s.max_context_tokens is not None and self._context_tokens > s.max_context_tokens:
                return self.end(
                    Termination.CONTEXT_OVERFLOW,
                    f"conversation reached {self._context_tokens} tokens; the budget is {s.max_context_tokens}",
                )
            fb = b.feedback(inst, self.state, turn)
            if fb:
                self._add({"role": "user", "content": fb})
        return self.end(Termination.MAX_TURNS, f"no final tool call within {self.max_turns} turns")

    async def _general_turn(self, reply: PolicyReply, turn: int) -> tuple[bool, tuple[Termination, str | None] | None]:
        """Parse and run any reply: text calls, several calls, reasoning, malformed output. Returns
        whether the episode ended, and the termination this turn counts towards if it had no usable call."""
        b, inst, s = self.spec.bootcamp, self.spec.instance, self.settings
        content = clean_text(reply.content)
        parsed = parse_turn(
            content,
            reply.tool_calls,
            self.tools,
            turn=turn,
            reasoning=reply.reasoning,
            max_calls=s.max_calls_per_turn,
            max_chars=s.max_reply_chars,
        )
        chars_before = self._chars
        argument_chars = self._record_assistant(parsed)
        self._count_tokens(reply, chars_before, len(content) + (argument_chars if parsed.source == "native" else 0))
        if parsed.format_error or not parsed.calls:
            self.invalid_calls += len(parsed.calls)
            note = b.no_tool_call_reply(inst, self.state, parsed.content)
            if parsed.format_error:
                note = f"Error: {parsed.format_error}. {note}"
            self._add({"role": "user", "content": note})
            return False, (Termination.FORMAT_ERROR, note)
        if await self._execute(parsed):
            return True, None
        if parsed.has_valid_call:
            return False, None
        return False, (Termination.INVALID_TOOL_CALL, parsed.calls[-1].error)

    async def _run_single(self, call: ParsedCall, reply: PolicyReply) -> bool:
        """:meth:`_record_assistant` + :meth:`_execute` for a turn of one valid call and no text (the
        same transcript and counts without the general path's lists, for the turn most replies are;
        tests/test_malformed_output.py checks both paths agree); True when the episode ended."""
        cid, name, arguments = call.id, call.name, call.raw_arguments
        msg = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}],
        }
        transcript, messages = self.transcript, self.messages
        transcript.append(msg)
        messages.append(msg)
        self._count_tokens(reply, self._chars, len(arguments))
        self._chars += len(arguments)
        self.tool_calls += 1
        try:
            if self.served:
                obs = await self._call_served(name, call.arguments)
            else:
                obs = self.spec.bootcamp.call(self.spec.instance, self.state, name, call.arguments)
        except ToolError as exc:
            self._add_tool(cid, name, f"Error: {exc}")
            return False
        except (MemoryError, ToolServerError):
            raise
        except Exception as exc:
            raise self._tool_failed(cid, name, exc, ()) from exc
        text = obs.text
        if len(text) > self.settings.max_observation_chars:
            self._add_tool(cid, name, text)
        else:
            msg = {"role": "tool", "tool_call_id": cid, "name": name, "content": text}
            transcript.append(msg)
            messages.append(msg)
            self._chars += len(text)
        if obs.final:
            self.state.finished = True
            return True
        if obs.image is not None:
            self._add({"role": "user", "content": image_parts(image_note(cid), obs.image)})
        return False

    async def _call_served(self, name: str, arguments: Any) -> Any:
        self.awaiting_server = name
        obs = await self.spec.bootcamp.call_served(self.spec.instance, self.state, name, arguments)
        self.awaiting_server = None
        return obs

    async def _execute(self, parsed: ParsedTurn) -> bool:
        """Run the turn's calls in order; True when a final tool ended the episode."""
        b, inst = self.spec.bootcamp, self.spec.instance
        images: list[tuple[str, bytes]] = []
        for i, call in enumerate(parsed.calls):
            if call.error is not None:
                self.invalid_calls += 1
                self._add_tool(call.id, call.name, f"Error: {call.error}")
                continue
            self.tool_calls += 1
            try:
                if self.served:
                    obs = await self._call_served(call.name, call.arguments)
                else:
                    obs = b.call(inst, self.state, call.name, call.arguments)
            except ToolError as exc:
                self._add_tool(call.id, call.name, f"Error: {exc}")
                continue
            except (MemoryError, ToolServerError):
                raise
            except Exception as exc:
                raise self._tool_failed(call.id, call.name, exc, parsed.calls[i + 1 :]) from exc
            self._add_tool(call.id, call.name, obs.text)
            if obs.image is not None:
                images.append((call.id, obs.image))
            if obs.final:
                self.state.finished = True
                self._not_run(parsed.calls[i + 1 :])
                return True
        for call_id, png in images:
            self._add({"role": "user", "content": image_parts(image_note(call_id), png)})
        return False

    def _tool_failed(self, cid: str, name: str, exc: Exception, rest: Sequence[ParsedCall]) -> _ToolFailed:
        """Answer the call (and any after it) in the transcript; the episode ends on the returned error."""
        what = f"{type(exc).__name__}: {exc}"
        self._add_tool(cid, name, f"Error: the tool failed on these arguments ({what}).")
        self._not_run(rest)
        return _ToolFailed(f"tool {name} raised on the model's arguments: {what}")

    def _not_run(self, calls: Sequence[ParsedCall]) -> None:
        for skipped in calls:
            self._add_tool(skipped.id, skipped.name, "Not run: the episode had already ended.")

    # -- transcript -----------------------------------------------------------------------------

    def _record_assistant(self, parsed: ParsedTurn) -> int:
        """Append the assistant turn; returns the characters of its call arguments."""
        msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        argument_chars = 0
        if parsed.calls:
            calls = []
            for c in parsed.calls:
                if c.name:
                    calls.append(
                        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
                    )
                    argument_chars += len(c.raw_arguments)
            if calls:
                msg["tool_calls"] = calls
        if parsed.reasoning:  # the transcript keeps reasoning; the policy sees it only if it asks to
            recorded = {**msg, "reasoning_content": parsed.reasoning}
            if self.policy.send_reasoning:
                msg = recorded
        else:
            recorded = msg
        self.transcript.append(recorded)
        self.messages.append(msg)
        self._chars += len(parsed.content) + argument_chars
        return argument_chars

    def _add_tool(self, call_id: str, name: str, text: str) -> None:
        limit = self.settings.max_observation_chars
        if len(text) > limit:
            text = text[:limit] + f"\n[... truncated, {len(text) - limit} more characters]"
        message = {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}
        self.transcript.append(message)
        self.messages.append(message)
        self._chars += len(text)

    def _add(self, message: dict[str, Any]) -> None:
        self.transcript.append(message)
        self.messages.append(message)
        self._chars += len(_message_text(message))

    # -- accounting -----------------------------------------------------------------------------

    _context_tokens = 0
    _chars = 0  # characters of text in self.messages, kept up to date as messages are added

    def _count_tokens(self, reply: Any, prompt_chars: int, completion_chars: int) -> None:
        # Policies without usage (the oracle) are estimated at about four characters a token.
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else prompt_chars // 4
        completion = reply.completion_tokens if reply.completion_tokens is not None else completion_chars // 4
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self._context_tokens = prompt + completion


def _message_text(message: dict[str, Any]) -> str:
    return content_text(message.get("content"), image="")  # images are not counted as characters


async def run_episodes(
    specs: Iterable[EpisodeSpec],
    policy: Policy,
    settings: RolloutSettings = RolloutSettings(),
    *,
    run_id: str = "",
    concurrency: int = 32,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """Run many episodes with at most ``concurrency`` in flight; results in the order of ``specs``."""
    specs = list(specs)
    if concurrency < 1:
        raise ValueError(f"concurrency = {concurrency}: expected at least 1")
    results: list[Episode | None] = [None] * len(specs)
    # one iterator shared by the workers: they run on one loop, so each index is taken once
    indices = iter(range(len(specs)))

    async def worker() -> None:
        for i in indices:
            episode = await run_episode(specs[i], policy, settings, run_id)
            results[i] = episode
            if on_episode is not None:
                on_episode(episode)

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(specs)))))
    finally:
        await policy.aclose()
    return [e for e in results if e is not None]


def rollout(
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    settings: RolloutSettings = RolloutSettings(),
    **kwargs: Any,
) -> list[Episode]:
    """Synchronous :func:`run_episodes`, for scripts and worker threads with no running event loop."""
    return asyncio.run(run_episodes(specs, policy, settings, **kwargs))
