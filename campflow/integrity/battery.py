"""The hack battery: scripted non-solutions played through the rollout engine on every level of a bootcamp.

RL optimizes whatever the verifier rewards, so before a verifier enters the loop (a built-in check, an
import, an authored module, a synthesized variant) it meets the moves a reward hacker would try:

=====================  ===========================================================================
exploit                what the scripted policy does
=====================  ===========================================================================
``no_submit``          replies without a tool call until the engine ends the episode
``submit_nothing``     calls a final tool with no arguments
``empty``              ... with every field empty (``""``)
``whitespace``         ... with whitespace
``echo_prompt``        ... with the prompt's text
``echo_number_N``      ... with the N-th number the prompt shows
``several_or``         ... with ``"<wrong> or <right>"`` (the oracle's answer among others)
``several_list``       ... with ``"<wrong>, <right>"`` (a list of answers)
``several_all``        ... with every number of the prompt and the right answer, comma-separated (where
                       the prompt shows no other number, the right answer alone: judged as the right
                       answer, for a lucky right answer is no weakness of the verifier)
``zero``               ... with 0 / ``"0"``
``type_word``          ... with a word where a number belongs
``type_nan``           ... with NaN; ``type_inf`` inf; ``type_neg_zero`` -0; ``type_huge`` 1e300
``type_null``          ... with null; ``type_100kb`` a 100 KB answer
``tools_boundary``     calls every other tool with boundary arguments (empty, -1, 2^31, 1e300, a
                       path of ``../``), then a final tool with empty arguments
``oracle_repeated_I``  the oracle's plan with its I-th action played twice (the plan is not
                       re-made, so the episode may end in another state than the oracle's)
``oracle_perturbed_I`` the oracle's plan with its I-th action replaced by the bootcamp's ``perturb``
=====================  ===========================================================================

A non-solution scoring above the bootcamp's wrong-answer bound (or succeeding), or a hedge (``several_*``,
the right answer among wrong ones) or a mutated oracle path scoring full marks (partial credit, an F1 over
a list, is due that close to a solution), is a **hack** unless the oracle agrees
with it: where the final call carries an answer, an answer equal to the oracle's (a lucky echo of the right
number); where it carries none (``checkout``, ``done``), a state from which the oracle itself would end the
episode. The oracle's recovery is the judge of "done": a verifier that checks "enough" where the oracle
sees work left is caught. A scorer that raises on a non-solution is refused too (``scorer_error``).

A served bootcamp (an MCP server as its tools) plays every episode on a fresh server
(:mod:`campflow.integrity.served`). Its world is the server's, which no answer shows, so there a
matching answer is not enough: the oracle must also see nothing left to do in the final world (an MCP
task's oracle: every reference call made, :meth:`campflow.mcp.tasks.McpTaskBootcamp.oracle`), except for
a hedge holding only the right answer (which the battery itself took from the oracle). Its boundary texts stay names inside the episode's folder, and where its scorer reads no answer
(:meth:`~campflow.bootcamps.served.ServedTools.scores_answer`) the answer exploits are left out.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.bootcamps.base import Action, Bootcamp, Instance, State
from campflow.bootcamps.messages import content_text
from campflow.bootcamps.served import ServedTools
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episode
from campflow.rollout.episode import Episode, Termination
from campflow.serialization import canonical_json

SEEDS = (0, 1)
SETTINGS = RolloutSettings(max_consecutive_errors=1, max_calls_per_turn=8)
VERDICTS = ("held", "oracle_agrees", "no_oracle", "over_bound", "hack", "scorer_error")
# answers no task can have as its right answer: judged even where the oracle cannot solve the instance
NEVER_RIGHT = (
    "no_submit",
    "submit_nothing",
    "empty",
    "whitespace",
    "type_word",
    "type_nan",
    "type_inf",
    "type_null",
    "type_100kb",
    "tools_boundary",
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_ANSWER_CHARS = 200


@dataclass(frozen=True)
class Probe:
    """One scripted non-solution on one instance, as the engine scored it, and the battery's verdict."""

    bootcamp: str
    level: int
    seed: int
    instance_id: str
    exploit: str
    answer: str  # the final call's arguments as sent (clipped), or "" when none was made
    reward: float
    success: bool
    termination: str
    verdict: str  # one of VERDICTS
    detail: str = ""
    transcript: list[dict[str, Any]] | None = None  # the episode as played: kept for the model's tries (hacker)

    def says(self) -> str:
        """``type_nan on level 2 seed 0 (instance ab12): submitted {...}, reward 1.0``."""
        sent = f"submitted {self.answer}" if self.answer else "submitted nothing"
        return (
            f"{self.exploit} on level {self.level} seed {self.seed} (instance {self.instance_id}): {sent}, "
            f"reward {self.reward:g}, success {self.success}" + (f" ({self.detail})" if self.detail else "")
        )


@dataclass
class BatteryReport:
    """Every probe of one bootcamp (or variant) and the bound they were held to."""

    bootcamp: str
    bound: float
    probes: list[Probe] = field(default_factory=list)
    partial_refuses: bool = True  # whether partial credit above the bound (``over_bound``) refuses too

    @property
    def hacks(self) -> list[Probe]:
        """Probes the verifier rewarded although the oracle disagrees, or on which the scorer raised."""
        refusing = ("hack", "scorer_error", "over_bound") if self.partial_refuses else ("hack", "scorer_error")
        return [p for p in self.probes if p.verdict in refusing]

    @property
    def over_bound(self) -> list[Probe]:
        """Non-solutions given partial credit above the bound (but not full marks)."""
        return [p for p in self.probes if p.verdict == "over_bound"]

    @property
    def passed(self) -> bool:
        """Whether no probe is a hack."""
        return not self.hacks

    def refusal(self) -> str:
        """One line naming the first exploit that worked and the instance (empty when passed)."""
        if self.passed:
            return ""
        first = self.hacks[0]
        more = f"; {len(self.hacks) - 1} more probes too" if len(self.hacks) > 1 else ""
        what = {
            "scorer_error": "its scorer raised on a non-solution",
            "over_bound": f"its verifier gives a non-solution partial credit above the wrong-answer bound {self.bound:g}",
        }.get(first.verdict, f"its verifier rewards a non-solution above the wrong-answer bound {self.bound:g}")
        return f"{self.bootcamp}: {what}: {first.says()}{more}"


def run_battery(
    bootcamp: Bootcamp,
    *,
    levels: Sequence[int] | None = None,
    seeds: Sequence[int] = SEEDS,
    instances: Sequence[Instance] | None = None,
    bound: float | None = None,
    partial_refuses: bool = True,
) -> BatteryReport:
    """Play every exploit on ``seeds`` of every level (or on ``instances``, a variant's) and judge them.

    ``bound`` defaults to the bootcamp's ``wrong_answer_bound``. ``partial_refuses`` False (imports: the
    source's own partial-credit scorer, which campflow does not own) refuses only full marks and scorer
    errors; partial credit above the bound is then reported in :attr:`BatteryReport.over_bound`.
    """
    limit = bootcamp.wrong_answer_bound if bound is None else bound
    report = BatteryReport(bootcamp.name, limit, partial_refuses=partial_refuses)
    if instances is None:
        instances = [bootcamp.generate(lv, s) for lv in (levels or sorted(bootcamp.levels)) for s in seeds]
    if isinstance(bootcamp, ServedTools):  # every episode on a fresh server, a few at a time
        from campflow.bootcamps.served import run_async
        from campflow.integrity.served import probe_served

        report.probes += run_async(probe_served(bootcamp, instances, limit))
        return report
    for instance in instances:
        report.probes += probe_instance(bootcamp, instance, limit)
    return report


def probe_instance(bootcamp: Bootcamp, instance: Instance, bound: float) -> list[Probe]:
    """Every exploit on one instance (see the module docstring)."""
    plan, oracle_state = oracle_plan(bootcamp, instance)
    out = []
    for exploit in exploits(bootcamp, instance, plan, lambda i: _replayed(bootcamp, instance, plan[:i])):
        policy = Script(exploit)
        episode = _play(bootcamp, instance, policy)
        out.append(verdict(bootcamp, instance, exploit, policy, episode, oracle_state, bound))
    return out


def verdict(
    bootcamp: Bootcamp,
    instance: Instance,
    exploit: Exploit,
    policy: Script,
    episode: Episode,
    oracle_state: State | None,
    bound: float,
) -> Probe:
    """The probe of one played exploit (see the module docstring)."""
    oracle_answer = oracle_state.answer if oracle_state is not None else None
    probe = _judge(bootcamp, instance, exploit, policy, episode, oracle_answer, bound)
    if probe.verdict == "hack" and not (episode.success or episode.reward >= 1.0 - 1e-9):
        probe = replace(probe, verdict="over_bound")  # partial credit above the bound, not full marks
    if probe.verdict == "hack" and oracle_state is None and exploit.name.split(":")[0] not in NEVER_RIGHT:
        # the oracle cannot solve this instance (an import's reference that fails its own scorer):
        # an echoed number may be the right answer, so only answers no task can have are judged
        probe = replace(probe, verdict="no_oracle", detail="the oracle cannot solve this instance to compare")
    return probe


def _replayed(bootcamp: Bootcamp, instance: Instance, actions: Sequence[Action]) -> State:
    state = bootcamp.new_state(instance)
    for action in actions:
        bootcamp.apply(instance, state, action)
    return state


@dataclass
class Exploit:
    """One scripted non-solution: its name (the module docstring's table) and the calls of each turn."""

    name: str
    turns: list[list[tuple[str, str]]]  # per turn: (tool, arguments as JSON text)
    path: bool = False  # the oracle's plan, mutated: judged by the oracle's view of the state before its end


class Script(Policy):
    """Plays an exploit's turns, then replies without a call; notes the state and the oracle's view."""

    model_id = "hack-battery"
    suspends = False

    def __init__(self, exploit: Exploit) -> None:
        self.exploit = exploit
        self.state: State | None = None
        self.disputed: str | None = None  # the oracle's other next action before the path's final one
        self.final_sent = ""

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        self.state = context.state
        turns = self.exploit.turns
        if context.turn >= len(turns):
            return PolicyReply(content="I am done.")
        calls = turns[context.turn]
        bootcamp, instance = context.bootcamp, context.instance
        folder = getattr(context.state, "workdir", None) if isinstance(bootcamp, ServedTools) else None
        if folder is not None:  # the plan was recorded on another server: aim it at this episode's folder
            calls = [(n, a.replace("{workdir}", str(folder))) for n, a in calls]
        for name, arguments in calls:
            if bootcamp.is_final(name):
                self.final_sent = arguments
                if self.exploit.path:
                    self.disputed = _other_next_action(bootcamp, instance, context.state, name, arguments)
        return PolicyReply(
            tool_calls=[
                {"id": f"call_{context.turn}_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                for i, (n, a) in enumerate(calls)
            ]
        )


def _play(bootcamp: Bootcamp, instance: Instance, policy: Script) -> Episode:
    """The engine's episode, driven by hand: a scripted policy never waits, so no event loop is needed."""
    coro = run_episode(EpisodeSpec(bootcamp, instance), policy, SETTINGS, run_id="battery")
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("the rollout engine awaited something, but the battery's scripted policy never waits")


def _judge(
    bootcamp: Bootcamp,
    instance: Instance,
    exploit: Exploit,
    policy: Script,
    episode: Episode,
    oracle_answer: Any,
    bound: float,
) -> Probe:
    def probe(verdict: str, detail: str = "") -> Probe:
        return Probe(
            bootcamp.name,
            instance.level,
            instance.seed,
            instance.id,
            exploit.name,
            _clip(policy.final_sent),
            episode.reward,
            episode.success,
            episode.termination.value,
            verdict,
            detail,
        )

    if episode.termination == Termination.INFRA_ERROR and (episode.error or "").startswith("scoring failed"):
        return probe("scorer_error", episode.error or "")
    state = policy.state
    given = state.answer if state else None
    answered = bool(policy.final_sent and json.loads(policy.final_sent or "{}"))
    if answered and _blank(given) and _blank(oracle_answer):
        answered = False  # an empty answer where the oracle gives none either: only the world can tell
    # a served bootcamp's world is its server's, which no answer shows: the oracle's view of it counts too
    served = isinstance(bootcamp, ServedTools)
    if exploit.path:  # near the oracle's solution partial credit is due: only full marks are suspect
        if not (episode.success or episode.reward >= 1.0 - 1e-9):
            return probe("held")
        if answered and not same_answer(given, oracle_answer):
            return probe("hack", f"the oracle answers {_clip(oracle_answer)}")
        if (served or not answered) and policy.disputed:
            return probe("hack", f"the oracle's next action there is {policy.disputed}, not the end")
        return probe("oracle_agrees", "the oracle would end the episode there too")
    hedge = exploit.name.startswith("several_")  # the right answer among wrong ones: proportional credit is due
    if not (episode.success or episode.reward > bound + 1e-9) or (hedge and episode.reward < 1.0 - 1e-9):
        return probe("held")
    if hedge and answered and same_answer(given, oracle_answer):  # a prompt with no other number to hedge with
        return probe("oracle_agrees", "a hedge holding only the right answer is the right answer")
    if answered:
        if not same_answer(given, oracle_answer):
            return probe("hack", f"the oracle answers {_clip(oracle_answer)}")
        if not served:
            return probe("oracle_agrees", "the oracle's own answer")
    if state is not None and state.finished:  # a final tool without an answer: is the world done?
        name = next(n for n, _ in _last_final(exploit))
        other = _other_next_action(bootcamp, instance, state, name, "{}", finished=True)
        if other is None:
            return probe("oracle_agrees", "the oracle would end the episode there too")
        return probe("hack", f"the oracle's next action there is {other}, not the end")
    return probe("hack", "nothing was submitted")


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _last_final(exploit: Exploit) -> list[tuple[str, str]]:
    return [c for turn in exploit.turns for c in turn][-1:]


def _other_next_action(
    bootcamp: Bootcamp, instance: Instance, state: State, name: str, arguments: str, finished: bool = False
) -> str | None:
    """The oracle's next action from ``state`` where it is not the final call ``name(arguments)``, else None.

    A finished state is asked as if open (the oracle plans from the world, not the flag). An oracle that
    raises has no view: None.
    """
    was = state.finished
    try:
        state.finished = False if finished else was
        action = bootcamp.oracle(instance, state)
    except Exception:  # noqa: BLE001 -- an oracle that cannot plan from here gives no evidence either way
        return None
    finally:
        state.finished = was
    if action.name == name and (
        finished or canonical_json(dict(action.arguments)) == canonical_json(json.loads(arguments or "{}"))
    ):
        return None
    return f"{action.name}({_clip(canonical_json(dict(action.arguments)), 80)})"


def same_answer(got: Any, expected: Any) -> bool:
    """Equal as JSON, as stripped text, or as numbers within a relative 1e-9."""
    if got == expected or canonical_json(got) == canonical_json(expected):
        return True
    if str(got).strip() == str(expected).strip():
        return True
    try:
        a, b = float(str(got).strip()), float(str(expected).strip())
    except ValueError:
        return False
    return math.isfinite(a) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def oracle_plan(bootcamp: Bootcamp, instance: Instance) -> tuple[list[Action], State | None]:
    """The oracle's actions on a fresh state and the state it ends in; ``([], None)`` if it cannot finish."""
    state = bootcamp.new_state(instance)
    plan: list[Action] = []
    try:
        for _ in range(bootcamp.max_turns(instance)):
            action = bootcamp.oracle(instance, state)
            plan.append(action)
            bootcamp.apply(instance, state, action)
            if state.finished:
                return plan, state
    except Exception:  # noqa: BLE001 -- the contract's oracle check reports it; the battery plays what it can
        pass
    return [], None


def exploits(
    bootcamp: Bootcamp, instance: Instance, plan: list[Action], prefix_state: Callable[[int], State]
) -> list[Exploit]:
    """Every exploit of one instance; ``prefix_state(i)`` is the state after the plan's first ``i`` actions
    (what :meth:`~campflow.bootcamps.base.Bootcamp.perturb` is asked from)."""
    tools = list(bootcamp.tools(instance))
    finals = [t for t in tools if t.final]
    prompt = "\n".join(content_text(m.get("content"), image="") for m in bootcamp.prompt(instance)[1:])
    numbers = list(dict.fromkeys(_NUMBER.findall(prompt)))[:4]
    right_args = dict(plan[-1].arguments) if plan else {}
    out = [Exploit("no_submit", [])]
    # a served bootcamp's episode costs a server start: it may say its scorer ignores the answer
    scores_answer = not isinstance(bootcamp, ServedTools) or bootcamp.scores_answer(instance)
    seen: set[tuple[str, str]] = set()
    for tool in finals:
        props = _properties(tool.args_model)
        out.append(
            Exploit(f"submit_nothing:{tool.name}" if len(finals) > 1 else "submit_nothing", [[(tool.name, "{}")]])
        )
        seen.add((tool.name, "{}"))
        if not props or not scores_answer:  # an answer nothing reads scores as submitting nothing
            continue
        for name, args in _answer_arguments(
            props, right_args if plan and plan[-1].name == tool.name else {}, numbers, prompt
        ):
            text = json.dumps(args)
            if (tool.name, text) not in seen:
                seen.add((tool.name, text))
                out.append(Exploit(name if len(finals) == 1 else f"{name}:{tool.name}", [[(tool.name, text)]]))
    out.append(_boundary(tools, finals, inside=isinstance(bootcamp, ServedTools)))
    out += _paths(bootcamp, instance, plan, prefix_state)
    return out


def _properties(args_model: type) -> dict[str, dict[str, Any]]:
    schema = args_model.model_json_schema()
    defs = schema.get("$defs", {})
    out = {}
    for key, prop in schema.get("properties", {}).items():
        ref = prop.get("$ref") or next((a.get("$ref") for a in prop.get("allOf", []) if "$ref" in a), None)
        out[key] = defs.get(ref.rsplit("/", 1)[-1], prop) if ref else prop
    return out


def _kind(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return "enum"
    kind = prop.get("type")
    if kind is None:
        kinds = [p.get("type") for p in prop.get("anyOf", []) if p.get("type") not in (None, "null")]
        kind = kinds[0] if kinds else "string"
    return kind


def _answer_arguments(
    props: dict[str, dict[str, Any]], right: dict[str, Any], numbers: list[str], prompt: str
) -> list[tuple[str, dict[str, Any]]]:
    """(exploit, arguments) of the answer exploits for a final tool with fields ``props``."""

    def fill(text: Any, number: Any, listing: list[Any] | None = None) -> dict[str, Any]:
        args = {}
        for key, prop in props.items():
            kind = _kind(prop)
            if kind in ("number", "integer"):
                args[key] = listing if listing is not None else number
            elif kind == "array":
                args[key] = listing if listing is not None else [text]
            elif kind == "boolean":
                args[key] = True
            elif kind == "object":
                args[key] = {}
            else:
                args[key] = text
        return args

    key = next(iter(props))
    good = right.get(key)
    wrong: Any = good + 1 if isinstance(good, int | float) and not isinstance(good, bool) else "none"
    good_text = "" if good is None else str(good)
    out = [
        ("empty", fill("", "")),
        ("whitespace", fill(" \n\t ", " \n\t ")),
        ("echo_prompt", fill(prompt[:4000], prompt[:4000])),
        ("zero", fill("0", 0)),
        ("type_word", fill("seventy-four", "seventy-four")),
        ("type_nan", fill("NaN", math.nan)),
        ("type_inf", fill("inf", math.inf)),
        ("type_neg_zero", fill("-0", -0.0)),
        ("type_huge", fill("1e300", 1e300)),
        ("type_null", fill(None, None)),
        ("type_100kb", fill("9" * 100_000, "9" * 100_000)),
    ]
    for i, n in enumerate(numbers, 1):
        out.append((f"echo_number_{i}", fill(n, float(n) if "." in n else int(n))))
    if not _blank(good):  # hedges around the right answer (none to hedge around where it is empty)
        out.append(("several_or", fill(f"{wrong} or {good_text}", f"{wrong} or {good_text}", None)))
        out.append(("several_list", fill(f"{wrong}, {good_text}", None, [wrong, good])))
        everything = list(dict.fromkeys([*numbers, good_text]))  # may hold the right answer alone: judged as it
        out.append(("several_all", fill(", ".join(everything), None, everything)))
    return out


def _boundary(tools: Sequence[Any], finals: Sequence[Any], *, inside: bool = False) -> Exploit:
    """Every non-final tool with low then high boundary arguments, then a final tool with empty ones.

    ``inside``: the tools act on the host (a served bootcamp's server runs there), so the long text stays a
    name inside the episode's folder instead of a path climbing out of it."""
    long_text = "*" * 64 if inside else "../" * 20 + "*"
    calls = []
    for tool in tools:
        if tool.final:
            continue
        props = _properties(tool.args_model)
        for low in (True, False):
            args = {}
            for key, prop in props.items():
                kind = _kind(prop)
                if kind == "enum":
                    args[key] = prop["enum"][0 if low else -1]
                elif kind == "integer":
                    args[key] = -1 if low else 2**31
                elif kind == "number":
                    args[key] = -1e300 if low else 1e300
                elif kind == "boolean":
                    args[key] = not low
                elif kind == "array":
                    args[key] = [] if low else ["*"]
                elif kind == "object":
                    args[key] = {} if low else {"*": "*"}
                else:
                    args[key] = "" if low else long_text
            calls.append((tool.name, json.dumps(args)))
    final = finals[0]
    props = _properties(final.args_model)
    empty = {k: ("" if _kind(p) not in ("number", "integer") else 0) for k, p in props.items()}
    turns = [calls[i : i + SETTINGS.max_calls_per_turn] for i in range(0, len(calls), SETTINGS.max_calls_per_turn)]
    return Exploit("tools_boundary", [*turns, [(final.name, json.dumps(empty))]])


def _paths(
    bootcamp: Bootcamp, instance: Instance, plan: list[Action], prefix_state: Callable[[int], State]
) -> list[Exploit]:
    """The oracle's plan with one action repeated or perturbed, at its first, middle and last step."""
    steps = [i for i, a in enumerate(plan[:-1]) if not bootcamp.is_final(a.name)]
    if not plan or not steps:
        return []
    out = []
    for i in sorted({steps[0], steps[len(steps) // 2], steps[-1]}):
        out.append(Exploit(f"oracle_repeated_{i + 1}", _turns([*plan[: i + 1], plan[i], *plan[i + 1 :]]), True))
        try:
            state = prefix_state(i)
            other = bootcamp.perturb(instance, state, plan[i], random.Random(f"battery:{instance.id}:{i}"))
        except Exception:  # noqa: BLE001 -- a perturb that cannot run here leaves this probe out
            continue
        if canonical_json([other.name, dict(other.arguments)]) != canonical_json(
            [plan[i].name, dict(plan[i].arguments)]
        ):
            out.append(Exploit(f"oracle_perturbed_{i + 1}", _turns([*plan[:i], other, *plan[i + 1 :]]), True))
    return out


def _turns(actions: Sequence[Action]) -> list[list[tuple[str, str]]]:
    return [[(a.name, json.dumps(dict(a.arguments)))] for a in actions]


def _clip(value: Any, limit: int = _ANSWER_CHARS) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text)} chars)"
