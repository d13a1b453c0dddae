"""Where a failure began: the first call of a failed episode after which no correct path was left.

A failed episode's last turn rarely names its mistake. Its calls are replayed, as recorded, on a fresh
world of the instance; before each call the oracle says what it would play. A call equal to the
oracle's (after :meth:`~campflow.bootcamps.base.Bootcamp.normalize_arguments`) keeps the episode on
the oracle's own path. A call that differs is tested: on a copy of the world after it, the oracle plays
on within the turns the episode had left, and the episode is still on *a* correct path if that copy
succeeds (a harmless extra look, a sum in another order). The first call after which it cannot is the
**divergence**: its turn, the model's call, the oracle's call, the demonstrator's (grounded on the
model's own transcript so far: the label of that state) and a kind.

The kind is the bootcamp's own where it names one (:meth:`~campflow.bootcamps.base.Bootcamp.divergence_kind`:
``operator_flipped``, ``wall``, ...), else generic, from the two calls and the world after:

- ``no_call``: a turn without any tool call; ``invalid_call``: a call that could not run (an unknown
  tool, arguments that are not JSON or do not fit the schema);
- ``early_submit``: the model ended where the oracle would go on; ``no_submit``: the other way round;
- ``argument:<field>``: the oracle's tool with another value of ``field``;
- ``extra_step``: another tool whose only harm was the turn it spent (given that turn back, the
  oracle would still succeed); ``wrong_tool``: another tool that broke the world.

Where no call left the path, there is no divergence and :attr:`FirstDivergence.reason` says why
(:data:`PATH_RIGHT_BUDGET_SPENT` when the turn budget simply ran out); so does it where the episode
cannot be analysed (no oracle, a tool that failed on the model's arguments). A served world (an MCP task
bootcamp) is not replayed: its reference calls are the plan (:func:`plan_divergence`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from campflow.bootcamps.base import Action, Bootcamp, Instance
from campflow.bootcamps.served import ServedTools
from campflow.errors import ToolError
from campflow.rollout.episode import Termination

PATH_RIGHT_BUDGET_SPENT = "no divergence: path right, budget spent"

GENERIC_KINDS = (
    "no_call",
    "invalid_call",
    "early_submit",
    "no_submit",
    "argument:<field>",
    "extra_step",
    "wrong_tool",
)


@dataclass(frozen=True)
class FirstDivergence:
    """Where one failed episode left every correct path, or why it has no such place.

    Attributes:
        turn: the turn of the diverging call, from 0 (the engine's turn index); None when there is none.
        call_index: the call's place among its turn's calls, from 0 (None for a turn without calls).
        kind: the bootcamp's kind or a generic one (module docstring); None when there is no divergence.
        model_action: the model's call as it sent it (None for a turn without calls).
        oracle_action: what the oracle would have played from the same world.
        demonstrator_action: what :meth:`~campflow.bootcamps.base.Bootcamp.demonstrate` would have played
            there, reading the model's own transcript up to that call (None where it could not say).
        reason: why there is no divergence (None when there is one).
    """

    turn: int | None = None
    call_index: int | None = None
    kind: str | None = None
    model_action: Action | None = None
    oracle_action: Action | None = None
    demonstrator_action: Action | None = None
    reason: str | None = None

    @property
    def found(self) -> bool:
        """Whether a diverging call was found."""
        return self.kind is not None


@dataclass
class _Call:
    """One recorded call: its action, and whether it was runnable (a known tool, arguments that fit)."""

    action: Action
    runnable: bool


def _recorded_turns(transcript: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[_Call]]]:
    """Each assistant turn of ``transcript``: its message's index and its calls, in order."""
    turns: list[tuple[int, list[_Call]]] = []
    for at, message in enumerate(transcript):
        if message.get("role") != "assistant":
            continue
        calls = []
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            raw = fn.get("arguments") or "{}"
            try:
                args = json.loads(raw) if isinstance(raw, str) else dict(raw)
                ok = isinstance(args, dict)
            except (json.JSONDecodeError, TypeError, ValueError):
                args, ok = {"unparsed": raw}, False
            calls.append(_Call(Action(str(fn.get("name") or ""), args if isinstance(args, dict) else {}), ok))
        turns.append((at, calls))
    return turns


def _seen_before(transcript: Sequence[Mapping[str, Any]], at: int, index: int) -> list[Mapping[str, Any]]:
    """The transcript as it stood before call ``index`` of the assistant message at ``at``: the turn's
    earlier calls and their results included."""
    if index == 0:
        return list(transcript[:at])
    message = transcript[at]
    calls = list(message.get("tool_calls") or ())[:index]
    ids = {c.get("id") for c in calls}
    results = [m for m in transcript[at + 1 :] if m.get("role") == "tool" and m.get("tool_call_id") in ids]
    return [*transcript[:at], {**message, "tool_calls": calls}, *results]


def _demonstrated(replay: _Replay, seen: Sequence[Mapping[str, Any]]) -> Action | None:
    try:
        return replay.bootcamp.demonstrate(replay.instance, replay.state, seen)
    except Exception:  # a demonstrator lost in a world the model made says nothing here
        return None


def find_divergence(
    bootcamp: Bootcamp,
    instance: Instance,
    transcript: Sequence[Mapping[str, Any]],
    termination: Termination | str,
    max_turns: int | None = None,
) -> FirstDivergence:
    """The first call of a failed episode after which the oracle can no longer succeed (module docstring).

    Args:
        bootcamp: the instance's bootcamp, with an oracle.
        instance: the episode's instance.
        transcript: the episode's messages as recorded (prompt first).
        termination: how the episode ended.
        max_turns: the episode's turn budget; None for the bootcamp's own. A run's smaller budget leaves
            the bootcamp's: a path the oracle finishes within it is right, however the run cut it short.

    Returns:
        The divergence, or a :class:`FirstDivergence` whose ``reason`` says why there is none.
    """
    termination = Termination(termination)
    if isinstance(bootcamp, ServedTools):
        return plan_divergence(bootcamp, instance, transcript, termination)
    budget = max(bootcamp.max_turns(instance), max_turns or 0)
    replay = _Replay(bootcamp, instance)
    try:
        if _oracle_steps(replay, budget) is None:
            return FirstDivergence(reason=f"not analysed: the oracle does not solve this instance in {budget} turns")
    except NotImplementedError:
        return FirstDivergence(reason=f"not analysed: {bootcamp.name} has no oracle")
    for turn, (at, calls) in enumerate(_recorded_turns(transcript)):
        left = budget - turn - 1
        if not calls:
            if _oracle_steps(replay, left) is None:
                expected = _oracle_or_none(replay)
                shown = _demonstrated(replay, transcript[:at])
                return FirstDivergence(turn, None, "no_call", None, expected, shown)
            continue
        for index, call in enumerate(calls):
            try:
                expected = bootcamp.oracle(instance, replay.state)
            except Exception as exc:  # the oracle cannot act from a world the model made: say so, do not guess
                return FirstDivergence(reason=f"not analysed: the oracle raised at turn {turn}: {exc}")
            same = call.runnable and _same(bootcamp, instance, call.action, expected)
            before = replay.fork()
            try:
                replay.play(call)
            except _UnknownWorld as exc:
                return FirstDivergence(reason=f"not analysed: {exc} at turn {turn}")
            if replay.state.finished:
                if bootcamp.score(instance, replay.state, ()).success:
                    return FirstDivergence(
                        reason="no divergence: the replay succeeds (the episode was judged otherwise)"
                    )
            elif same or _oracle_steps(replay, left) is not None:
                continue
            kind = _kind(bootcamp, instance, before, replay, call, expected, left)
            shown = _demonstrated(before, _seen_before(transcript, at, index))
            return FirstDivergence(turn, index, kind, call.action, expected, shown)
        if replay.state.finished:
            break
    if termination == Termination.MAX_TURNS:
        return FirstDivergence(reason=PATH_RIGHT_BUDGET_SPENT)
    return FirstDivergence(reason=f"no divergence: path right, the episode ended by {termination.value}")


def plan_divergence(
    bootcamp: Bootcamp, instance: Instance, transcript: Sequence[Mapping[str, Any]], termination: Termination
) -> FirstDivergence:
    """For a bootcamp whose tools are a served world (an MCP task bootcamp), which is not replayed here:
    the oracle's reference calls are the plan, followed by the calls made so far (``state.calls``, as the
    MCP bootcamp's oracle reads its progress). The divergence is the first call that is not the plan's next
    and after which the model never made that next call: a call the plan has not (made again later) is an
    extra look, not a divergence. Kinds are generic; the world's own verdict is the reward's reason."""
    try:  # an empty record of the calls: new_state would start the server
        state = bootcamp.state_model()
    except TypeError:
        state = None
    if not isinstance(getattr(state, "calls", None), list):
        return FirstDivergence(reason="not analysed: a served bootcamp without a reference plan")
    workdir = _served_workdir(bootcamp, instance, transcript)
    if workdir is not None and hasattr(state, "folder"):
        state.folder = workdir
    turns = _recorded_turns(transcript)
    flat = [(turn, index, call) for turn, (_, calls) in enumerate(turns) for index, call in enumerate(calls)]
    for k, (turn, index, call) in enumerate(flat):
        try:
            expected = bootcamp.oracle(instance, state)
        except NotImplementedError:
            return FirstDivergence(reason=f"not analysed: {bootcamp.name} has no oracle")
        except Exception as exc:
            return FirstDivergence(reason=f"not analysed: the plan's next call is unknown at turn {turn}: {exc}")
        if not call.runnable:
            return FirstDivergence(turn, index, "invalid_call", call.action, expected)
        if _same(bootcamp, instance, call.action, expected):
            state.calls.append({"name": call.action.name, "arguments": _as_sent(bootcamp, instance, call.action)})
            if bootcamp.is_final(call.action.name):
                break
            continue
        model_final, oracle_final = bootcamp.is_final(call.action.name), bootcamp.is_final(expected.name)
        later = any(_same(bootcamp, instance, c.action, expected) for _, _, c in flat[k + 1 :])
        if not model_final and not oracle_final and later:  # an extra call: the plan's next one still came
            state.calls.append({"name": call.action.name, "arguments": _as_sent(bootcamp, instance, call.action)})
            continue
        if model_final != oracle_final:
            kind = "early_submit" if model_final else "no_submit"
        elif call.action.name == expected.name:
            mine = _normalized(bootcamp, instance, call.action) or {}
            theirs = _normalized(bootcamp, instance, expected) or {}
            fields = sorted(f for f in set(mine) | set(theirs) if mine.get(f) != theirs.get(f))
            kind = f"argument:{fields[0]}" if fields else "wrong_tool"
        else:
            kind = "wrong_tool"
        return FirstDivergence(turn, index, kind, call.action, expected)
    else:
        if termination == Termination.MAX_TURNS:
            return FirstDivergence(reason=PATH_RIGHT_BUDGET_SPENT)
    return FirstDivergence(
        reason=f"no divergence from the reference plan: the served world judged it {termination.value}"
    )


def _served_workdir(bootcamp: Bootcamp, instance: Instance, transcript: Sequence[Mapping[str, Any]]) -> Any:
    """The episode's folder, read off its first user message against the prompt's ``{workdir}`` template."""
    from pathlib import Path

    template = next((m.get("content") for m in bootcamp.prompt(instance) if m.get("role") == "user"), None)
    shown = next((m.get("content") for m in transcript if m.get("role") == "user"), None)
    if not isinstance(template, str) or not isinstance(shown, str) or "{workdir}" not in template:
        return None
    pattern = re.escape(template.replace("{seed}", str(instance.seed))).replace(re.escape("{workdir}"), "(.+?)")
    found = re.fullmatch(pattern, shown, re.S)
    return Path(found.group(1)) if found else None


def _as_sent(bootcamp: Bootcamp, instance: Instance, action: Action) -> dict[str, Any]:
    """A call's arguments as a served bootcamp records them: validated by the tool's schema, dumped as set."""
    tool = next((t for t in bootcamp.tools(instance) if t.name == action.name), None)
    try:
        return tool.args_model.model_validate(dict(action.arguments)).model_dump(  # type: ignore[union-attr]
            mode="json", by_alias=True, exclude_unset=True
        )
    except (AttributeError, ValueError):
        return dict(action.arguments)


class _UnknownWorld(Exception):
    """A tool raised something other than ToolError on the model's arguments: the world is unknown."""


class _Replay:
    """A world of the instance and the runnable calls played on it, forkable for the oracle's tries."""

    def __init__(self, bootcamp: Bootcamp, instance: Instance) -> None:
        self.bootcamp, self.instance = bootcamp, instance
        self.state = bootcamp.new_state(instance)
        self.tools = frozenset(t.name for t in bootcamp.tools(instance))
        self.played: list[Action] = []  # the calls that ran (refused ones included; they change nothing)

    def play(self, call: _Call) -> None:
        """Run one recorded call as the engine would: refused and unrunnable calls change nothing."""
        if not call.runnable or call.action.name not in self.tools:
            call.runnable = False
            return
        try:
            self.bootcamp.apply(self.instance, self.state, call.action)
        except ValidationError:
            call.runnable = False  # the engine refuses it before any tool runs
            return
        except ToolError:
            pass  # refused by the world, which it leaves as it was
        except Exception as exc:
            raise _UnknownWorld(f"tool {call.action.name} raised {type(exc).__name__}: {exc}") from exc
        self.played.append(call.action)

    def fork(self) -> _Replay:
        """An independent copy: the world deep-copied, or rebuilt from the calls where it cannot be
        copied (a database connection)."""
        twin = _Replay.__new__(_Replay)
        twin.bootcamp, twin.instance, twin.tools = self.bootcamp, self.instance, self.tools
        twin.played = list(self.played)
        try:
            twin.state = copy.deepcopy(self.state)
        except (TypeError, copy.Error):
            twin.state = self.bootcamp.new_state(self.instance)
            for action in self.played:
                try:
                    self.bootcamp.apply(self.instance, twin.state, action)
                except (ToolError, ValidationError):
                    pass
        return twin


def _oracle_steps(replay: _Replay, turns: int) -> int | None:
    """How many oracle calls finish the instance with success from ``replay``'s world, within ``turns``; None if
    they cannot. The world itself is left as it is."""
    b, inst = replay.bootcamp, replay.instance
    if replay.state.finished:
        return 0 if b.score(inst, replay.state, ()).success else None
    trial = replay.fork()
    for step in range(1, max(turns, 0) + 1):
        try:
            b.apply(inst, trial.state, b.oracle(inst, trial.state))
        except NotImplementedError:
            raise
        except Exception:  # an oracle refused by its own world cannot be counted on from here
            return None
        if trial.state.finished:
            return step if b.score(inst, trial.state, ()).success else None
    return None


def _oracle_or_none(replay: _Replay) -> Action | None:
    try:
        return replay.bootcamp.oracle(replay.instance, replay.state)
    except Exception:
        return None


def _normalized(bootcamp: Bootcamp, instance: Instance, action: Action) -> dict[str, Any] | None:
    try:
        return bootcamp.normalize_arguments(instance, action.name, action.arguments)
    except Exception:  # not a tool, or arguments that do not fit: nothing to compare field by field
        return None


def _same(bootcamp: Bootcamp, instance: Instance, a: Action, b: Action) -> bool:
    if a.name != b.name:
        return False
    na = _normalized(bootcamp, instance, a)
    return na is not None and na == _normalized(bootcamp, instance, b)


def _kind(
    bootcamp: Bootcamp, instance: Instance, before: _Replay, after: _Replay, call: _Call, expected: Action, left: int
) -> str:
    """The bootcamp's kind of the diverging call, else the generic one (module docstring). ``left``: the turns
    the episode had after it; a call that only spent one is an extra step, one that broke the world is not."""
    model = call.action
    if not call.runnable:
        return "invalid_call"
    try:
        own = bootcamp.divergence_kind(instance, before.state, model, expected, tuple(before.played))
    except Exception:  # a refinement that cannot read this call leaves the generic kind
        own = None
    if own:
        return own
    generic = _generic_kind(bootcamp, instance, after, model, expected, left)
    if generic in ("invalid_call", "extra_step") or type(bootcamp).divergence_kind is not Bootcamp.divergence_kind:
        return generic
    said = _reward_reason(after, left)  # a bootcamp without its own kinds: its reward says what the call cost
    return f"{generic}:{said}" if said else generic


def _generic_kind(
    bootcamp: Bootcamp, instance: Instance, after: _Replay, model: Action, expected: Action, left: int
) -> str:
    model_final, oracle_final = bootcamp.is_final(model.name), bootcamp.is_final(expected.name)
    if model_final and not oracle_final:
        return "early_submit"
    if oracle_final and not model_final:
        return "no_submit"
    if model.name == expected.name:
        mine, theirs = _normalized(bootcamp, instance, model), _normalized(bootcamp, instance, expected) or {}
        if mine is None:
            return "invalid_call"
        fields = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        return f"argument:{fields[0]}" if fields else "extra_step"
    return "extra_step" if _oracle_steps(after, left + 1) is not None else "wrong_tool"


UNINFORMATIVE_REASONS = frozenset({"", "unfinished", "no_answer", "no_submit", "not_submitted"})


def _reward_reason(after: _Replay, left: int) -> str | None:
    """The reward's own ``reason`` for the best the oracle could still make of the world after the diverging
    call (the world as it is when the call ended the episode): ``collateral``, ``wrong_category``,
    ``out_of_guesses``. None where the reward names nothing beyond an unfinished episode."""
    b, inst = after.bootcamp, after.instance
    trial = after.fork()
    for _ in range(max(left, 0)):
        if trial.state.finished:
            break
        try:
            b.apply(inst, trial.state, b.oracle(inst, trial.state))
        except Exception:  # the oracle refused by the world the model made: score what there is
            break
    try:
        reason = b.score(inst, trial.state, ()).details.get("reason")
    except Exception:
        return None
    text = re.sub(r"[^a-z0-9]+", "_", str(reason or "").lower()).strip("_")[:40]
    return None if text in UNINFORMATIVE_REASONS else text
