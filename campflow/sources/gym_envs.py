"""Gymnasium: environments with discrete actions become multi-turn ``step(action)`` bootcamps.

Mapping:
    tools   ``step(action)``, an integer in ``[0, n)`` for a ``Discrete(n)`` action space (its
            description names the actions where the family is known: FrozenLake left/down/right/up),
            and ``stop()``, which ends the episode unfinished. Other action spaces are rejected;
            continuous ones (``Box``: Pendulum, MountainCarContinuous) with a message that says so.
    view    the toy-text families get a text view that keeps what their ANSI render shows only in
            colour; other environments their colour-stripped ANSI render, or the observation itself.
    params  the environment's keyword arguments with JSON defaults (e.g. Taxi's ``is_rainy``); for
            FrozenLake the map is generated from ``size`` and ``frozen_p`` with gymnasium's
            ``generate_random_map`` under the instance's seed; environments with a transition table
            also get ``turn_slack``, the turns allowed beyond the planner's.
    seeds   the instance's rng draws the map seed and the ``env.reset(seed=...)`` seed, and the
            environment's own generator (seeded by reset) drives any randomness after that, so an
            episode is a deterministic function of (params, seed, actions).
    reward  episode return ``G`` scaled to [0, 1] as ``(G - low) / (high - low)``, clipped.
            With a transition table (FrozenLake, Taxi, CliffWalking): ``high`` is the planner's
            expected return within the turn budget (its exact return when the dynamics are
            deterministic), ``low`` is the budget times an ordinary step's reward (wandering the whole
            budget); success means reaching the goal (a terminal transition with the table's best
            reward) with a reward above 0, and failure scores 0. The budget is the planner's steps plus
            ``turn_slack`` (deterministic) or 100 plus slack (stochastic). Without a table the range
            is the family's (Blackjack: loss 0, draw 0.5, win 1; success = a win), else
            ``--set return_range=[LO,HI]`` or ``(0, reward_threshold)``; success = reward 1.
            An episode that has not ended (``stop``, turns spent) scores 0.
    oracle  value iteration over ``env.unwrapped.P`` (FrozenLake, Taxi, CliffWalking), which solves
            every deterministic level; basic strategy for Blackjack, which wins ~44% of hands (draws ~9%); none
            otherwise (the oracle raises ImportSourceError).

Levels: FrozenLake grows from 4x4 to 8x8 with fewer spare turns, all non-slippery so the planner's
100% is exact (``is_slippery=true`` is a knob and an import option); Taxi and CliffWalking tighten
``turn_slack``; Blackjack's three levels are the same game.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import json
import math
import random
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationError, create_model

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Instance,
    NoArgs,
    Observation,
    Params,
    Score,
    State,
    ToolArgs,
    tool,
)
from campflow.errors import ImportSourceError, ToolError
from campflow.sources import ImportSpec
from campflow.sources.gym_families import Family, family_of, generic_view
from campflow.sources.gym_planning import (
    expected_return,
    steps_to_finish,
    tabular_model,
    value_iteration,
)
from campflow.sources.source_params import Knob, explain, knob, params_model, source_kwargs

ADAPTER_REVISION = "1"
STOCHASTIC_BUDGET = 100
FALLBACK_BUDGET = 20
MAX_BUDGET = 500
FULL = 1.0 - 1e-9
PLANS_KEPT = 1024  # FrozenLake has one map, so one plan, per instance
_FROZEN_LAKE_KNOBS = [
    Knob("size", int, 4, "side of the generated square map", ge=3, le=12),
    Knob("frozen_p", float, 0.8, "chance that a generated tile is frozen rather than a hole", ge=0.5, le=1.0),
]
_SLACK = Knob("turn_slack", int, 10, "turns allowed beyond the planner's", ge=0, le=200)


class StepArgs(ToolArgs):
    """Arguments of ``step``; each import replaces it with a model bounded by its action space."""

    action: int = Field(ge=0, description="the action number")


@dataclass
class GymState(State):
    """The live environment of one episode and its running return."""

    env: Any = None
    obs: Any = None
    total: float = 0.0
    steps: int = 0
    last_reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    stopped: bool = False


@dataclass(frozen=True)
class EnvFacts:
    """What the adapter learned about an environment at import time."""

    env_id: str
    family: Family | None
    env_knobs: tuple[Knob, ...]
    n_actions: int
    ansi: bool
    table: bool
    return_range: tuple[float, float] | None
    budget: int


def build(spec: ImportSpec) -> Bootcamp:
    """The bootcamp for Gymnasium environment ``spec.source`` (raises ImportSourceError for a bad source)."""
    gym = _gymnasium()
    env_id = spec.source
    try:
        env_spec = gym.spec(env_id)
        probe = gym.make(env_id, disable_env_checker=True)
    except Exception as exc:  # gymnasium's own errors name the problem (unknown id, deprecated version)
        raise ImportSourceError(f"gymnasium cannot make {env_id!r}: {exc}") from None
    spaces = gym.spaces
    if not isinstance(probe.action_space, spaces.Discrete):
        kind = "continuous actions" if isinstance(probe.action_space, spaces.Box) else "a non-Discrete action space"
        raise ImportSourceError(
            f"{env_id} has {kind} ({probe.action_space}); only environments with a "
            "Discrete(n) action space can become a step(action) bootcamp"
        )
    family = family_of(env_spec.name)
    ansi = "ansi" in (probe.unwrapped.metadata.get("render_modes") or [])
    _check_renderable(env_id, probe.observation_space, spaces, family, ansi)
    table = hasattr(probe.unwrapped, "P") and isinstance(probe.observation_space, spaces.Discrete)
    options = dict(spec.options)
    return_range = _return_range(env_id, env_spec, family, table, options.pop("return_range", None))
    env_knobs = _env_knobs(probe, env_spec, family)
    knobs = [
        *(_FROZEN_LAKE_KNOBS if env_spec.name.startswith("FrozenLake") else []),
        *env_knobs,
        *([_SLACK] if table else []),
    ]
    knobs, presets = _apply_presets(env_id, knobs, family, options)
    model = params_model(f"Gym_{env_spec.name}_Params", knobs, doc=f"Knobs of {env_id}, plus the level.")
    levels = {}
    for i, preset in enumerate(presets, start=1):
        try:
            levels[i] = model.model_validate({**preset, "level": i})
        except ValidationError as exc:
            raise ImportSourceError(f"{env_id}: level {i} is invalid: {explain(exc)}") from None
    n = int(probe.action_space.n)
    probe.close()
    facts = EnvFacts(
        env_id,
        family,
        tuple(env_knobs),
        n,
        ansi,
        table,
        return_range,
        min(env_spec.max_episode_steps or FALLBACK_BUDGET, MAX_BUDGET),
    )
    meanings = ", ".join(f"{i} = {m}" for i, m in enumerate(family.actions)) if family else f"0 to {n - 1}"
    goal = family.goal if family else "reach the best return you can."
    version = f"gym{ADAPTER_REVISION}-{importlib.metadata.version('gymnasium')}"
    doc = (
        f"Play the Gymnasium environment {env_id}: {goal}\n\n"
        f"Call `step` with one action number per call ({meanings}); each call shows the new "
        f"observation and the reward. The episode ends when the environment says so; `stop` ends it "
        f"early and scores 0. {family.legend if family else ''}\n\n"
        f"Imported from gymnasium {importlib.metadata.version('gymnasium')}; reward is the episode "
        f"return scaled to [0, 1] (see campflow.sources.gym_envs)."
    )
    args_model = create_model(
        "StepArgs", __base__=ToolArgs, action=(int, Field(ge=0, le=n - 1, description=f"the action number: {meanings}"))
    )
    cls = type(
        f"Gym_{env_spec.name}",
        (GymBootcamp,),
        {
            "__doc__": doc,
            "name": spec.name,
            "version": version,
            "params_model": model,
            "levels": levels,
            "__module__": __name__,
        },
    )
    cls._tools = {**cls._tools, "step": dataclasses.replace(cls._tools["step"], args_model=args_model)}
    return cls(facts)


class GymBootcamp(Bootcamp[Params, GymState]):
    """A Gymnasium environment as a bootcamp (one dynamic subclass per import; see the module docstring)."""

    state_model = GymState
    wrong_answer_bound = 0.0

    def __init__(self, facts: EnvFacts) -> None:
        self.facts = facts
        self._policies: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: Params, rng: random.Random) -> dict[str, Any]:
        kwargs = source_kwargs(params, self.facts.env_knobs)
        values = params.model_dump()
        if "frozen_p" in values:
            from gymnasium.envs.toy_text.frozen_lake import generate_random_map

            kwargs["desc"] = generate_random_map(values["size"], values["frozen_p"], seed=rng.randrange(2**31))
        reset_seed = rng.randrange(2**31)
        env = self._make(kwargs)
        obs, _ = env.reset(seed=reset_seed)
        data: dict[str, Any] = {
            "env_id": self.facts.env_id,
            "kwargs": kwargs,
            "reset_seed": reset_seed,
            "start": self._view(env, obs),
            "optimal_steps": None,
            "goal_reward": None,
        }
        if self.facts.table:
            model, policy = self._plan(env, kwargs)
            slack = values.get("turn_slack", 0)
            if model.deterministic:
                steps = steps_to_finish(model, policy, int(obs), MAX_BUDGET)
                if steps is None:
                    raise RuntimeError(f"{self.facts.env_id}: the planner cannot finish from state {obs} with {kwargs}")
                data["optimal_steps"], budget = steps, steps + slack
            else:
                budget = STOCHASTIC_BUDGET + slack
            high = expected_return(model, policy, int(obs), budget)
            data.update(
                turn_budget=budget, return_range=[budget * model.typical_reward, high], goal_reward=model.best_reward
            )
        else:
            data.update(turn_budget=self.facts.budget, return_range=list(self.facts.return_range or (0.0, 1.0)))
        return data

    def prompt(self, instance: Instance) -> list[dict[str, Any]]:
        return self.chat(
            f"The episode starts here:\n{instance.data['start']}\n\nYou have {instance.data['turn_budget']} turns."
        )

    def max_turns(self, instance: Instance) -> int:
        return instance.data["turn_budget"]

    def new_state(self, instance: Instance) -> GymState:
        env = self._make(instance.data["kwargs"])
        obs, _ = env.reset(seed=instance.data["reset_seed"])
        return GymState(env=env, obs=obs)

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def step(self, instance: Instance, state: GymState, args: StepArgs) -> Observation:
        """Take one action in the environment and see what happens."""
        if state.terminated or state.truncated:
            raise ToolError("the episode is over; no more steps can be taken")
        if not 0 <= args.action < self.facts.n_actions:
            raise ToolError(f"action {args.action} is out of range; expected 0 to {self.facts.n_actions - 1}")
        obs, reward, terminated, truncated, _ = state.env.step(args.action)
        state.obs, state.last_reward = obs, float(reward)
        state.total += float(reward)
        state.steps += 1
        state.terminated, state.truncated = bool(terminated), bool(truncated)
        name = self.facts.family.actions[args.action] if self.facts.family else str(args.action)
        text = (
            f"{self._view(state.env, obs)}\nAction {args.action} ({name}): reward {float(reward):g}, "
            f"return so far {state.total:g}."
        )
        over = state.terminated or state.truncated
        if over:
            verdict = self.score(instance, state, ())
            text += f"\nThe episode is over ({'success' if verdict.success else verdict.details['reason']})."
        return Observation(text, final=over)

    @tool(final=True)
    def stop(self, instance: Instance, state: GymState, args: NoArgs) -> Observation:
        """End the episode now, unfinished. It scores 0."""
        state.stopped = True
        return Observation("Stopped. The episode ends unfinished.", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: GymState, transcript: Any) -> Score:
        d = instance.data
        details: dict[str, Any] = {"return": state.total, "steps": state.steps}
        if not (state.terminated or state.truncated):
            details["reason"] = "stopped" if state.stopped else "unfinished"
            return Score(0.0, False, details)
        low, high = d["return_range"]
        scaled = 1.0 if high - low <= 1e-9 else min(1.0, max(0.0, (state.total - low) / (high - low)))
        if self.facts.table:
            goal = state.terminated and state.last_reward >= d["goal_reward"] - 1e-9
            success = goal and scaled > 0
            details["optimal_return"] = high
            if not success:
                details["reason"] = "too_costly" if goal else ("truncated" if state.truncated else "lost")
            return Score(scaled if success else 0.0, success, details)
        family = self.facts.family
        success = family.won(state.total) if family and family.won else scaled >= FULL
        if not success:
            details["reason"] = "draw" if 0 < scaled < 1 and family and family.won else "lost"
        return Score(scaled, success, details)

    # -- oracle and deliberate failure -----------------------------------------------------------

    def oracle(self, instance: Instance, state: GymState) -> Action:
        if self.facts.table:
            _, policy = self._plan(state.env, instance.data["kwargs"])
            return Action("step", {"action": int(policy[int(state.obs)])})
        if self.facts.family and self.facts.family.strategy:
            return Action("step", {"action": int(self.facts.family.strategy(state.obs))})
        raise ImportSourceError(
            f"{self.facts.env_id} has no transition table and no known strategy, so the "
            f"imported bootcamp {self.name!r} has no oracle"
        )

    def wrong_answer(self, instance: Instance, state: GymState, rng: random.Random) -> Action:
        return Action("stop", {})

    def perturb(self, instance: Instance, state: GymState, action: Action, rng: random.Random) -> Action:
        if action.name != "step" or self.facts.n_actions < 2:
            return action
        other = rng.choice([a for a in range(self.facts.n_actions) if a != action.arguments["action"]])
        return Action("step", {"action": other})

    # -- the environment -------------------------------------------------------------------------

    def _make(self, kwargs: dict[str, Any]) -> Any:
        import gymnasium

        mode = {"render_mode": "ansi"} if self.facts.ansi else {}
        return gymnasium.make(self.facts.env_id, disable_env_checker=True, **mode, **kwargs)

    def _view(self, env: Any, obs: Any) -> str:
        family = self.facts.family
        if family and family.view:
            return family.view(env.unwrapped, obs)
        return generic_view(env.unwrapped, obs, self.facts.ansi)

    def _plan(self, env: Any, kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """(model, policy) for these env kwargs, planned once per process: the plan covers every state."""
        key = json.dumps(kwargs, sort_keys=True)
        with self._lock:
            hit = self._policies.get(key)
            if hit is not None:
                self._policies.move_to_end(key)
        if hit is None:
            model = tabular_model(env.unwrapped.P, self.facts.n_actions)
            hit = (model, value_iteration(model))
            with self._lock:
                self._policies[key] = hit
                while len(self._policies) > PLANS_KEPT:
                    self._policies.popitem(last=False)
        return hit


def _gymnasium() -> Any:
    try:
        import gymnasium
    except ImportError:
        raise ImportSourceError(
            "gymnasium is not installed; install the imports extra: pip install 'campflow[imports]'"
        ) from None
    return gymnasium


def _check_renderable(env_id: str, space: Any, spaces: Any, family: Family | None, ansi: bool) -> None:
    if (family and family.view) or ansi:
        return
    simple = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    if isinstance(space, simple) or (isinstance(space, spaces.Tuple) and all(isinstance(s, simple) for s in space)):
        return
    if isinstance(space, spaces.Box) and math.prod(space.shape or (1,)) <= 64:
        return
    raise ImportSourceError(
        f"{env_id} observes {space}, which has no text form (no ANSI render, not a small "
        "discrete or vector observation)"
    )


def _return_range(
    env_id: str, env_spec: Any, family: Family | None, table: bool, option: Any
) -> tuple[float, float] | None:
    if option is not None:
        if not (isinstance(option, list | tuple) and len(option) == 2 and float(option[0]) < float(option[1])):
            raise ImportSourceError(f"return_range = {option!r}: expected [LOW, HIGH] with LOW < HIGH")
        return float(option[0]), float(option[1])
    if table:
        return None  # measured per instance by the planner
    if family and family.return_range:
        return family.return_range
    if env_spec.reward_threshold is not None:
        return 0.0, float(env_spec.reward_threshold)
    raise ImportSourceError(
        f"{env_id} has no transition table and no reward threshold, so its return has no "
        "known scale; import it with --set return_range=[LOW,HIGH]"
    )


def _env_knobs(probe: Any, env_spec: Any, family: Family | None) -> list[Knob]:
    """The env's keyword arguments with JSON defaults (spec kwargs override signature defaults)."""
    excluded = {"self", "render_mode", *(family.excluded if family else ())}
    knobs = []
    for p in inspect.signature(type(probe.unwrapped).__init__).parameters.values():
        if p.name in excluded or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = env_spec.kwargs.get(p.name, p.default)
        if default is inspect.Parameter.empty:
            continue
        annotation = Any if p.annotation is inspect.Parameter.empty else p.annotation
        k = knob(p.name, annotation, default, f"{env_spec.id} keyword argument {p.name}")
        if k is not None and k.annotation is float and ("prob" in p.name or "rate" in p.name):
            k = dataclasses.replace(k, ge=0.0, le=1.0)
        if k is not None:
            knobs.append(k)
    return knobs


def _apply_presets(
    env_id: str, knobs: list[Knob], family: Family | None, options: dict[str, Any]
) -> tuple[list[Knob], list[dict[str, Any]]]:
    """Knobs whose defaults are level 1's values (options applied), and the three level presets."""
    names = {k.name for k in knobs}
    unknown = sorted(set(options) - names)
    if unknown:
        raise ImportSourceError(
            f"{env_id} has no knob {unknown[0]!r}; its knobs are: "
            f"{', '.join(sorted(names)) or 'none'} (and return_range)"
        )
    presets = [dict(p) for p in (family.presets if family and family.presets else ({}, {}, {}))]
    presets = [
        {**{k.name: k.default for k in knobs}, **{k: v for k, v in p.items() if k in names}, **options} for p in presets
    ]
    knobs = [dataclasses.replace(k, default=presets[0][k.name]) for k in knobs]
    return knobs, presets
