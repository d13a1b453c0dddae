"""What campflow knows about Gymnasium's toy-text family: action names, text views, goals, presets.

Any environment with a ``Discrete(n)`` action space can be imported; for these families the agent also
gets named actions, a legend and a text view that keeps what the ANSI render shows only in colour
(FrozenLake's and Taxi's position highlights). Other environments get their ANSI render with colours
stripped, or the observation printed as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from campflow.sources.gym_planning import basic_strategy

_HIGHLIGHT = re.compile(r"\x1b\[4\dm(.)\x1b\[0m")  # a background-coloured cell: the agent
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
TAXI_STANDS = "RGYB"


@dataclass(frozen=True)
class Family:
    """Known facts about one environment family.

    Attributes:
        actions: the meaning of each action number.
        goal: one sentence: what the agent is asked to do.
        legend: how to read the observation text.
        view: observation text from (unwrapped env, observation); None: the generic view.
        presets: knob values per level (1, 2, 3); empty: every level uses the defaults.
        return_range: (lowest, highest) episode return for families without a transition table.
        won: success test on the episode return for families without a table; None: use the table.
        strategy: the oracle's policy (observation -> action) for families without a table.
        excluded: env keyword arguments that are not knobs (FrozenLake's map comes from our own knobs).
    """

    actions: tuple[str, ...]
    goal: str
    legend: str = ""
    view: Callable[[Any, Any], str] | None = None
    presets: tuple[Mapping[str, Any], ...] = ()
    return_range: tuple[float, float] | None = None
    won: Callable[[float], bool] | None = None
    strategy: Callable[[Any], int] | None = None
    excluded: frozenset[str] = field(default_factory=frozenset)


def _frozen_lake_view(env: Any, obs: Any) -> str:
    rows = [[c.decode() if isinstance(c, bytes) else str(c) for c in row] for row in env.desc]
    r, c = divmod(int(obs), len(rows[0]))
    rows[r][c] = "@"
    return "\n".join("".join(row) for row in rows) + f"\nYou (@) are at row {r}, column {c}."


def _taxi_view(env: Any, obs: Any) -> str:
    taxi_row, taxi_col, passenger, destination = env.decode(int(obs))
    grid = strip_ansi(_HIGHLIGHT.sub("@", env.render())).rstrip()
    rows = grid.splitlines()
    stand = (
        f"{TAXI_STANDS[passenger]} (row {env.locs[passenger][0]}, column {env.locs[passenger][1]})"
        if passenger < 4
        else ""
    )
    where = (
        "in the taxi"
        if passenger == 4
        else f"delivered at {stand}"
        if passenger == destination
        else f"waiting at {stand}"
    )
    dest = env.locs[destination]
    return (
        "\n".join(rows) + f"\nTaxi (@) at row {taxi_row}, column {taxi_col}. Passenger {where}. "
        f"Destination {TAXI_STANDS[destination]} (row {dest[0]}, column {dest[1]})."
    )


def _cliff_view(env: Any, obs: Any) -> str:
    r, c = divmod(int(obs), env.shape[1])
    return strip_ansi(env.render()).rstrip() + f"\nYou (x) are at row {r}, column {c}."


def _blackjack_view(env: Any, obs: Any) -> str:
    total, dealer, soft = int(obs[0]), int(obs[1]), bool(obs[2])
    shows = "an ace" if dealer == 1 else f"a {dealer}"
    ace = " (soft: it includes an ace counted as 11)" if soft else ""
    return f"Your hand totals {total}{ace}. The dealer shows {shows}."


def strip_ansi(text: str) -> str:
    """Text without ANSI colour codes."""
    return _ANSI.sub("", text)


_GRID_PRESETS = ({"turn_slack": 20}, {"turn_slack": 10}, {"turn_slack": 4})

FAMILIES: dict[str, Family] = {
    "FrozenLake": Family(
        actions=("left", "down", "right", "up"),
        goal="walk from the start S to the goal G across a frozen lake without falling into a hole H.",
        legend="Grid: S start, F frozen (safe), H hole (the episode ends, you lose), G goal, @ you. "
        "Row 0 is the top. On slippery ice a move may slide you sideways.",
        view=_frozen_lake_view,
        presets=(
            {"size": 4, "frozen_p": 0.8, "is_slippery": False, "turn_slack": 10},
            {"size": 6, "frozen_p": 0.8, "is_slippery": False, "turn_slack": 6},
            {"size": 8, "frozen_p": 0.75, "is_slippery": False, "turn_slack": 4},
        ),
        excluded=frozenset({"desc", "map_name", "reward_schedule"}),
    ),
    "Taxi": Family(
        actions=("south", "north", "east", "west", "pickup", "dropoff"),
        goal="drive the taxi to the passenger, pick them up, drive to the destination and drop them off.",
        legend="Map: R, G, Y, B are the four stands, '|' is a wall the taxi cannot cross, ':' is open, "
        "@ is the taxi. Row 0 is the top; north is up. Each step costs 1, a wrong pickup or "
        "dropoff costs 10, and the delivery earns 20.",
        view=_taxi_view,
        presets=_GRID_PRESETS,
    ),
    "CliffWalking": Family(
        actions=("up", "right", "down", "left"),
        goal="walk from the bottom-left corner to the target T in the bottom-right without stepping off the cliff C.",
        legend="Grid: x you, o open ground, C cliff (you fall back to the start and lose 100), T target. "
        "Each step costs 1.",
        view=_cliff_view,
        presets=_GRID_PRESETS,
    ),
    "Blackjack": Family(
        actions=("stick", "hit"),
        goal="beat the dealer at blackjack: get closer to 21 than the dealer without going over.",
        legend="Face cards count 10, an ace 1 or 11. `hit` draws a card; `stick` stops drawing and "
        "the dealer plays. A win scores 1, a draw 0.5, a loss 0.",
        view=_blackjack_view,
        return_range=(-1.0, 1.0),
        won=lambda episode_return: episode_return > 0,
        strategy=basic_strategy,
    ),
}
FAMILIES["FrozenLake8x8"] = FAMILIES["FrozenLake"]
FAMILIES["CliffWalkingSlippery"] = FAMILIES["CliffWalking"]


def family_of(spec_name: str) -> Family | None:
    """The known family of a registered environment name (``FrozenLake``, ``Taxi``), if any."""
    return FAMILIES.get(spec_name)


def generic_view(env: Any, obs: Any, ansi: bool) -> str:
    """The observation of an environment without a family: its ANSI render, or the value itself."""
    if ansi:
        text = env.render()
        if isinstance(text, str) and text.strip():
            return strip_ansi(_HIGHLIGHT.sub("@", text)).rstrip()
    values = obs.tolist() if hasattr(obs, "tolist") else obs
    return f"Observation: {values}"
