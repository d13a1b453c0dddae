"""The rollout engine: drives any bootcamp with any policy, many episodes in flight.

Each episode is a loop of policy turn -> parse tool calls -> execute -> observe, until the bootcamp's
interaction layer ends it. The engine never raises on model output or endpoint failures: every
episode comes back as an :class:`~campflow.rollout.episode.Episode` with a termination category.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from campflow.agents.base import Policy, TurnContext
from campflow.bootcamps.base import Bootcamp, Instance, image_parts
from campflow.config import RolloutConfig
from campflow.errors import ContextOverflowError, PolicyError, ToolError
from campflow.rollout.episode import Episode, Termination
from campflow.rollout.parsing import ParsedTurn, clean_text, parse_turn


@dataclass(frozen=True)
class RolloutSettings:
    """Limits of one episode (mirrors ``RolloutConfig`` in campflow.config)."""

    max_turns: int | None = None  # None: the bootcamp's own budget per instance
    episode_timeout: float = 300.0  # wall-clock seconds per episode
    max_consecutive_errors: int = 3  # turns in a row without a usable call before giving up
    max_calls_per_turn: int = 8
    max_reply_chars: int = 32_000  # longer replies are a format error (and stored truncated)
    max_observation_chars: int = 8_000
    max_context_tokens: int | None = None  # token budget of one conversation

    @classmethod
    def from_config(cls, cfg: RolloutConfig) -> RolloutSettings:
        """The limits of the ``rollout`` config section."""
        return cls(max_turns=cfg.max_turns, episode_timeout=cfg.episode_timeout,
                   max_consecutive_errors=cfg.max_consecutive_errors, max_calls_per_turn=cfg.max_calls_per_turn,
                   max_reply_chars=cfg.max_reply_chars, max_observation_chars=cfg.max_observation_chars,
                   max_context_tokens=cfg.max_context_tokens)


@dataclass(frozen=True)
class EpisodeSpec:
    """What to run: an instance of a bootcamp and the sample index (0..k-1)."""

    bootcamp: Bootcamp
    instance: Instance
    sample: int = 0


async def run_episode(
    spec: EpisodeSpec, policy: Policy, settings: RolloutSettings = RolloutSettings(), run_id: str = "",
) -> Episode:
    """Play one episode to its end and score it. Never raises (except on cancellation)."""
    bootcamp, instance = spec.bootcamp, spec.instance
    started = time.perf_counter()
    run = _EpisodeRun(spec, policy, settings)
    try:
        async with asyncio.timeout(settings.episode_timeout):
            await run.play()
    except TimeoutError:
        run.end(Termination.TIMEOUT, f"episode exceeded {settings.episode_timeout:g}s")
    except Exception as exc:  # a bug in a bootcamp or policy must not take the batch down
        run.end(Termination.INFRA_ERROR, f"{type(exc).__name__}: {exc}")
    reward, success, details = 0.0, False, {}
    if run.termination not in (Termination.INFRA_ERROR, Termination.TIMEOUT):
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
        run_id=run_id, instance_id=instance.id, bootcamp=bootcamp.name, model_id=policy.model_id,
        sample=spec.sample, reward=float(reward), success=bool(success and termination == Termination.SOLVED),
        termination=termination, turns=run.turns, tool_calls=run.tool_calls, invalid_calls=run.invalid_calls,
        prompt_tokens=run.prompt_tokens, completion_tokens=run.completion_tokens, latency_s=run.latency,
        wall_s=time.perf_counter() - started, transcript=run.transcript, details=details, error=run.error,
        level=instance.level,
    )


class _EpisodeRun:
    """The mutable bookkeeping of one episode in flight."""

    def __init__(self, spec: EpisodeSpec, policy: Policy, settings: RolloutSettings) -> None:
        self.spec, self.policy, self.settings = spec, policy, settings
        b, inst = spec.bootcamp, spec.instance
        self.state = b.new_state(inst)
        self.tools = {t.name: t for t in b.tools(inst)}
        self.schemas = [t.schema() for t in self.tools.values()]
        self.transcript: list[dict[str, Any]] = [dict(m) for m in b.prompt(inst)]
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
        errors_in_a_row = 0
        for turn in range(self.max_turns):
            ctx = TurnContext(b, inst, self.state, turn, self.spec.sample)
            t0 = time.perf_counter()
            try:
                reply = await self.policy.respond(self.messages, self.schemas, ctx)
            except ContextOverflowError as exc:
                return self.end(Termination.CONTEXT_OVERFLOW, str(exc))
            except PolicyError as exc:
                return self.end(Termination.INFRA_ERROR, str(exc))
            self.latency += time.perf_counter() - t0
            self.turns += 1
            content = clean_text(reply.content)
            self._count_tokens(reply, content)
            if len(content) > s.max_reply_chars:
                parsed = ParsedTurn(content=content[: s.max_reply_chars], reasoning=None,
                                    format_error=f"the reply has {len(content)} characters; at most "
                                                 f"{s.max_reply_chars} are read")
            else:
                parsed = parse_turn(content, reply.tool_calls, self.tools, turn=turn,
                                    reasoning=reply.reasoning, max_calls=s.max_calls_per_turn)
            self._record_assistant(parsed)
            if parsed.format_error or not parsed.calls:
                self.invalid_calls += len(parsed.calls)
                note = b.no_tool_call_reply(inst, self.state, parsed.content)
                if parsed.format_error:
                    note = f"Error: {parsed.format_error}. {note}"
                self._add({"role": "user", "content": note})
                errors_in_a_row += 1
                if errors_in_a_row >= s.max_consecutive_errors:
                    return self.end(Termination.FORMAT_ERROR, note)
            else:
                if self._execute(parsed):
                    return None
                if parsed.has_valid_call:
                    errors_in_a_row = 0
                else:
                    errors_in_a_row += 1
                    if errors_in_a_row >= s.max_consecutive_errors:
                        return self.end(Termination.INVALID_TOOL_CALL, parsed.calls[-1].error)
            if self._over_budget():
                return self.end(Termination.CONTEXT_OVERFLOW,
                                f"conversation reached {self._context_tokens} tokens; the budget is "
                                f"{s.max_context_tokens}")
            fb = b.feedback(inst, self.state, turn)
            if fb:
                self._add({"role": "user", "content": fb})
        return self.end(Termination.MAX_TURNS, f"no final tool call within {self.max_turns} turns")

    def _execute(self, parsed: ParsedTurn) -> bool:
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
                obs = b.call(inst, self.state, call.name, call.arguments)
            except ToolError as exc:
                self._add_tool(call.id, call.name, f"Error: {exc}")
                continue
            self._add_tool(call.id, call.name, obs.text)
            if obs.image is not None:
                images.append((call.id, obs.image))
            if obs.final:
                self.state.finished = True
                for skipped in parsed.calls[i + 1:]:
                    self._add_tool(skipped.id, skipped.name, "Not run: the episode had already ended.")
                return True
        for call_id, png in images:
            self._add({"role": "user", "content": image_parts(f"Image returned by call {call_id}:", png)})
        return False

    # -- transcript -----------------------------------------------------------------------------

    def _record_assistant(self, parsed: ParsedTurn) -> None:
        msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
                 for c in parsed.calls if c.name]
        if calls:
            msg["tool_calls"] = calls
        recorded = dict(msg)
        if parsed.reasoning:
            recorded["reasoning_content"] = parsed.reasoning
            if self.policy.send_reasoning:
                msg["reasoning_content"] = parsed.reasoning
        self.transcript.append(recorded)
        self.messages.append(msg)
        self._chars += len(parsed.content) + sum(len(c["function"]["arguments"]) for c in calls)

    def _add_tool(self, call_id: str, name: str, text: str) -> None:
        limit = self.settings.max_observation_chars
        if len(text) > limit:
            text = text[:limit] + f"\n[... truncated, {len(text) - limit} more characters]"
        self._add({"role": "tool", "tool_call_id": call_id, "name": name, "content": text})

    def _add(self, message: dict[str, Any]) -> None:
        self.transcript.append(message)
        self.messages.append(message)
        self._chars += len(_message_text(message))

    # -- accounting -----------------------------------------------------------------------------

    _context_tokens = 0
    _chars = 0  # characters of text in self.messages, kept up to date as messages are added

    def _count_tokens(self, reply: Any, content: str) -> None:
        if reply.prompt_tokens is not None:
            prompt = reply.prompt_tokens
        else:  # policies without usage (the oracle): about four characters a token
            prompt = self._chars // 4
        if reply.completion_tokens is not None:
            completion = reply.completion_tokens
        else:
            arguments = sum(len(str((c.get("function") or {}).get("arguments") or "")) for c in reply.tool_calls or []
                            if isinstance(c, dict))
            completion = (len(content) + arguments) // 4
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self._context_tokens = prompt + completion

    def _over_budget(self) -> bool:
        limit = self.settings.max_context_tokens
        return limit is not None and self._context_tokens > limit


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


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
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(specs)):
        queue.put_nowait(i)

    async def worker() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
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
    specs: Sequence[EpisodeSpec], policy: Policy, settings: RolloutSettings = RolloutSettings(), **kwargs: Any,
) -> list[Episode]:
    """Synchronous :func:`run_episodes`, for scripts and worker threads with no running event loop."""
    return asyncio.run(run_episodes(specs, policy, settings, **kwargs))
