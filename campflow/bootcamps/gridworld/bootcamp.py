"""gridworld: grid navigation seen as an image each turn, with keys and locked doors at higher levels."""

from __future__ import annotations

import functools
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from campflow.bootcamps.base import Action, Bootcamp, Exemptions, Instance, NoArgs, Observation, Score, ToolArgs, tool
from campflow.bootcamps.gridworld.view import (
    COLORS,
    FLOOR,
    STEPS,
    WALL,
    GridworldParams,
    GridworldState,
    Node,
    describe,
    door_at,
    image_size,
    key_here,
    render,
)
from campflow.bootcamps.rendering import observe, user_content
from campflow.errors import ToolError


class DirectionArgs(ToolArgs):
    """Arguments of `move` and `unlock`."""

    # A plain string, checked by the tool, so an unknown direction is a ToolError naming the choices.
    direction: str = Field(description="north, south, east or west")


class Gridworld(Bootcamp[GridworldParams, GridworldState]):
    """Walk to the green goal square in a grid seen from above, unlocking doors with their keys.

    Each observation shows the whole grid: dark walls, white floor, you as a black disc, the goal as a
    green square, keys as small coloured keys, locked doors as coloured blocks and open doors as grey
    frames; a bar below lists the keys you carry and what lies under you. In text mode the map is
    characters: '#' wall, '.' floor, '@' you, '*' goal, lowercase r/b/y/p/o a red/blue/yellow/purple/
    orange key, uppercase a locked door of that colour, '/' an open door. Column x grows to the east and
    row y to the south from (0, 0) at the top left. `move` steps one cell, `pick_up` takes the key you
    stand on, `unlock` opens the adjacent door in a direction if you carry its key, `look` shows the grid
    again, and `submit`, called on the goal, ends the episode.

    Developers: doors split the grid into rooms, left to right, and the key of door i lies in a room
    before it, so the goal (in the last room) is always reachable; spare keys open nothing. Higher levels
    are larger and denser, add doors and spare keys, and drop the coordinate labels. Reward is 1 for
    submitting on the goal, else 0 (reasons `near_miss`: two actions away or fewer, `lost`, `no_submit`).
    Refused calls (walls, locked doors, no key here, bad directions) raise ToolError and change nothing.
    """

    name = "gridworld"
    version = "1"
    # the directions are listed in the tools' own descriptions
    grounding = Exemptions(syntax={"move": frozenset(STEPS), "unlock": frozenset(STEPS)})
    modality = "vision"
    params_model = GridworldParams
    state_model = GridworldState
    levels = {
        1: GridworldParams(level=1, width=6, height=6, wall_density=0.1, cell_px=40),
        2: GridworldParams(level=2, width=8, height=8, wall_density=0.2, doors=1, cell_px=32),
        3: GridworldParams(level=3, width=10, height=9, wall_density=0.2, doors=2, spare_keys=1, cell_px=28),
        4: GridworldParams(
            level=4, width=13, height=11, wall_density=0.25, doors=3, spare_keys=2, cell_px=24, show_coordinates=False
        ),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: GridworldParams, rng: random.Random) -> dict[str, Any]:
        grid, rooms, doors = _carve(params, rng)
        start = rng.choice(rooms[0])
        # the goal lies in the last room, among its cells furthest (as the crow flies) from the start
        spread = {c: abs(c[0] - start[0]) + abs(c[1] - start[1]) for c in rooms[-1] if c != start}
        goal = rng.choice([c for c, d in spread.items() if d >= max(spread.values()) * 2 // 3])
        colors = rng.sample(sorted(COLORS), params.doors + params.spare_keys)
        taken, keys = {start, goal}, []
        for i, color in enumerate(colors):  # door i's key lies before door i; spare keys anywhere
            pos = rng.choice([c for r in rooms[: i + 1 if i < params.doors else None] for c in r if c not in taken])
            taken.add(pos)
            keys.append({"color": color, "pos": list(pos)})
        data = {
            "grid": ["".join(row) for row in grid],
            "start": list(start),
            "goal": list(goal),
            "keys": keys,
            "doors": [{"color": colors[i], "pos": list(pos)} for i, pos in enumerate(doors)],
            "image_size": list(image_size(params)),
        }
        data["shortest"] = len(_plan(_layout_of(data), (*start, 0, 0)))
        return data

    def prompt(self, instance: Instance[GridworldParams]) -> list[dict[str, Any]]:
        p, state = instance.params, self.new_state(instance)
        w, h = instance.data["image_size"]
        shown = f"an image of {w}x{h} pixels" if p.observation == "image" else "a text map"
        caption = f"The grid is {p.width} cells wide and {p.height} tall, shown as {shown}. Reach the goal and submit."
        return self.chat(
            user_content(p.observation, caption, lambda: render(instance, state), lambda: describe(instance, state))
        )

    def caption(self, instance: Instance[GridworldParams], state: GridworldState) -> str:
        """Where the agent, the goal, the inner walls, the keys and the doors stand, and what is carried."""
        grid, (gx, gy) = instance.data["grid"], instance.data["goal"]
        walls = [
            f"({x}, {y})"
            for y in range(1, len(grid) - 1)
            for x in range(1, len(grid[0]) - 1)
            if grid[y][x] == WALL and door_at(instance, x, y) is None
        ]
        keys = [
            f"{k['color']} ({k['pos'][0]}, {k['pos'][1]})"
            for k in instance.data["keys"]
            if k["color"] not in state.held
        ]
        doors = [
            f"{d['color']} ({d['pos'][0]}, {d['pos'][1]}) {'open' if d['color'] in state.opened else 'locked'}"
            for d in instance.data["doors"]
        ]
        parts = [f"You ({state.x}, {state.y}).", f"Goal ({gx}, {gy}).", f"Walls {' '.join(walls) or 'none'}."]
        parts += [f"Keys {', '.join(keys)}."] if keys else []
        parts += [f"Doors {', '.join(doors)}."] if doors else []
        parts += [f"Carrying {', '.join(state.held)}."] if state.held else []
        return " ".join(parts)

    def new_state(self, instance: Instance[GridworldParams]) -> GridworldState:
        x, y = instance.data["start"]
        return GridworldState(x=x, y=y)

    def max_turns(self, instance: Instance[GridworldParams]) -> int:
        return 2 * instance.data["shortest"] + 10

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def look(self, instance: Instance, state: GridworldState, args: NoArgs) -> Observation:
        """Show the grid again."""
        return self._show(instance, state, "The grid:")

    @tool
    def move(self, instance: Instance, state: GridworldState, args: DirectionArgs) -> Observation:
        """Step one cell north, south, east or west."""
        nx, ny = _neighbor(state, args.direction)
        door = door_at(instance, nx, ny)
        if instance.data["grid"][ny][nx] == WALL:
            raise ToolError(f"cannot move {args.direction} from ({state.x}, {state.y}): ({nx}, {ny}) is a wall")
        if door is not None and door not in state.opened:
            raise ToolError(
                f"cannot move {args.direction} from ({state.x}, {state.y}): the {door} door at "
                f"({nx}, {ny}) is locked; `unlock` it while carrying the {door} key"
            )
        state.x, state.y, state.moves = nx, ny, state.moves + 1
        return self._show(instance, state, f"Moved {args.direction}.")

    @tool
    def pick_up(self, instance: Instance, state: GridworldState, args: NoArgs) -> Observation:
        """Pick up the key on your cell."""
        key = key_here(instance, state)
        if key is None:
            raise ToolError(f"there is no key at ({state.x}, {state.y}) to pick up; stand on a key first")
        state.held.append(key)
        return self._show(instance, state, f"Picked up the {key} key.")

    @tool
    def unlock(self, instance: Instance, state: GridworldState, args: DirectionArgs) -> Observation:
        """Unlock and open the door next to you in a direction (north, south, east or west) with its key."""
        nx, ny = _neighbor(state, args.direction)
        door = door_at(instance, nx, ny)
        if door is None:
            raise ToolError(
                f"there is no door {args.direction} of ({state.x}, {state.y}); "
                "expected a direction towards a door next to you"
            )
        if door in state.opened:
            raise ToolError(f"the {door} door at ({nx}, {ny}) is already open; expected a locked door")
        if door not in state.held:
            raise ToolError(f"the {door} door needs the {door} key; you carry {', '.join(state.held) or 'no keys'}")
        state.opened.append(door)
        return self._show(instance, state, f"Unlocked the {door} door.")

    @tool(final=True)
    def submit(self, instance: Instance, state: GridworldState, args: NoArgs) -> Observation:
        """Declare that you stand on the goal. This ends the episode."""
        state.answer = [state.x, state.y]
        return Observation(f"Submitted at ({state.x}, {state.y}).", final=True)

    def _show(self, instance: Instance, state: GridworldState, caption: str) -> Observation:
        return observe(
            instance.params.observation, caption, lambda: render(instance, state), lambda: describe(instance, state)
        )

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: GridworldState, transcript: Any) -> Score:
        if [state.x, state.y] == instance.data["goal"] and state.answer is not None:
            return Score(1.0, True, {"moves": state.moves, "shortest": instance.data["shortest"]})
        remaining = len(_plan(_layout_of(instance.data), _node(instance, state))) - 1  # minus the submit
        reason = "no_submit" if state.answer is None else ("near_miss" if remaining <= 2 else "lost")
        return Score(0.0, False, {"reason": reason, "remaining": remaining, "moves": state.moves})

    # -- oracle ----------------------------------------------------------------------------------

    # demonstrate() is the oracle: the prompt and every view show the whole grid (walls, keys, doors,
    # goal), so its plan reads nothing the agent has not seen; its arguments are directions.
    def oracle(self, instance: Instance, state: GridworldState) -> Action:
        layout, node = _layout_of(instance.data), _node(instance, state)
        route = dict(_plan(layout, (*instance.data["start"], 0, 0)))
        # Off the planned route (after a deliberate wrong step) plan afresh from here; both branches are
        # functions of the state alone, so re-runs of a noisy policy replay exactly.
        name, arg = route[node] if node in route else _plan(layout, node)[0][1]
        return Action(name, {"direction": arg} if arg else {})

    def perturb(self, instance: Instance, state: GridworldState, action: Action, rng: random.Random) -> Action:
        if action.name != "move":
            return action
        return Action("move", {"direction": rng.choice([d for d in STEPS if d != action.arguments["direction"]])})

    def wrong_answer(self, instance: Instance, state: GridworldState, rng: random.Random) -> Action | None:
        if [state.x, state.y] == instance.data["goal"]:
            return None  # submitting here would be right
        return Action("submit", {})


# -- world queries ---------------------------------------------------------------------------------


def _neighbor(state: GridworldState, direction: str) -> tuple[int, int]:
    if direction not in STEPS:
        raise ToolError(f"unknown direction {direction[:40]!r}; expected one of {', '.join(STEPS)}")
    dx, dy = STEPS[direction]
    return state.x + dx, state.y + dy  # the border is all wall, so a neighbour is always on the grid


# -- generation --------------------------------------------------------------------------------------


def _carve(params: GridworldParams, rng: random.Random) -> tuple[list[list[str]], list[list[Any]], list[Any]]:
    """Walls, rooms (floor cells per room, left to right) and door cells of a new grid."""
    w, h = params.width, params.height
    grid = [[WALL if x in (0, w - 1) or y in (0, h - 1) else FLOOR for x in range(w)] for y in range(h)]
    widths = [2] * (params.doors + 1)  # each room at least two columns wide
    for _ in range(w - 2 - params.doors - 2 * (params.doors + 1)):
        widths[rng.randrange(len(widths))] += 1
    doors, keep, x = [], set(), 1
    for room_width in widths[:-1]:
        x += room_width
        y = rng.randint(1, h - 2)
        for yy in range(1, h - 1):
            grid[yy][x] = WALL if yy != y else FLOOR
        doors.append((x, y))
        keep |= {(x - 1, y), (x + 1, y)}  # the cells either side of a door stay open
        x += 1
    inner = [
        (x, y)
        for y in range(1, h - 1)
        for x in range(1, w - 1)
        if grid[y][x] == FLOOR and (x, y) not in keep and (x, y) not in doors
    ]
    rng.shuffle(inner)
    budget = int(len(inner) * params.wall_density)
    for x, y in inner:
        if budget and _locally_safe(grid, x, y):
            grid[y][x] = WALL
            budget -= 1
    bounds = zip([1] + [d[0] + 1 for d in doors], [d[0] for d in doors] + [w - 1])
    rooms = [[(x, y) for y in range(1, h - 1) for x in range(a, b) if grid[y][x] == FLOOR] for a, b in bounds]
    return grid, rooms, doors


def _locally_safe(grid: list[list[str]], x: int, y: int) -> bool:
    """Whether walling (x, y) keeps its open neighbours connected through its 3x3 ring: a sufficient
    test for keeping the whole grid connected, at a fraction of the cost of a search per wall."""
    ring = [(-1, -1), (0, -1), (1, -1), (1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0)]
    open_ = [grid[y + dy][x + dx] != WALL for dx, dy in ring]
    sides = [i for i in (1, 3, 5, 7) if open_[i]]
    reached = set(sides[:1])
    for step in (1, -1):  # walk the ring both ways from one open side, through open cells only
        j = sides[0] if sides else 0
        while open_[(j + step) % 8] and (j + step) % 8 not in reached:
            j = (j + step) % 8
            reached.add(j)
    return all(s in reached for s in sides)


# -- the oracle's planner ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    grid: tuple[str, ...]
    goal: tuple[int, int]
    keys: tuple[tuple[int, int], ...]  # the key of door i at keys[i]; spare keys are left out
    doors: tuple[tuple[int, int], ...]


def _layout_of(data: Any) -> _Layout:
    n = len(data["doors"])
    return _Layout(
        tuple(data["grid"]),
        tuple(data["goal"]),
        tuple(tuple(k["pos"]) for k in data["keys"][:n]),
        tuple(tuple(d["pos"]) for d in data["doors"]),
    )


def _node(instance: Instance, state: GridworldState) -> Node:
    colors = [d["color"] for d in instance.data["doors"]]
    held = sum(1 << i for i, c in enumerate(colors) if c in state.held)
    opened = sum(1 << i for i, c in enumerate(colors) if c in state.opened)
    return state.x, state.y, held, opened


@functools.lru_cache(maxsize=8192)
def _plan(layout: _Layout, start: Node) -> tuple[tuple[Node, tuple[str, str]], ...]:
    """A shortest plan from ``start``: (state, action) pairs ending in submit, by BFS over :data:`Node`."""
    parents: dict[Node, Any] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        x, y, held, opened = node
        if (x, y) == layout.goal:
            steps = [(node, ("submit", ""))]
            while parents[node] is not None:
                node, action = parents[node]
                steps.append((node, action))
            return tuple(reversed(steps))
        successors = []
        if (x, y) in layout.keys and not held >> layout.keys.index((x, y)) & 1:
            successors.append(((x, y, held | 1 << layout.keys.index((x, y)), opened), ("pick_up", "")))
        for name, (dx, dy) in STEPS.items():
            nx, ny = x + dx, y + dy
            if layout.grid[ny][nx] == WALL:
                continue
            if (nx, ny) in layout.doors and not opened >> layout.doors.index((nx, ny)) & 1:
                i = layout.doors.index((nx, ny))
                if held >> i & 1:
                    successors.append(((x, y, held, opened | 1 << i), ("unlock", name)))
                continue
            successors.append(((nx, ny, held, opened), ("move", name)))
        for nxt, action in successors:
            if nxt not in parents:
                parents[nxt] = (node, action)
                queue.append(nxt)
    raise AssertionError(f"no path to the goal from {start}")  # generation guarantees one
