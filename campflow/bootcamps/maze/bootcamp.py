"""maze: grid navigation under partial observation."""

from __future__ import annotations

import functools
import heapq
import random
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator

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
from campflow.bootcamps.demonstration import shown_text, tool_calls

Direction = Literal["north", "south", "east", "west"]
STEPS: dict[str, tuple[int, int]] = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}
WALL, OPEN = "#", "."


class MazeParams(Params):
    """Knobs of a maze."""

    width: int = Field(5, ge=5, le=21, description="columns, odd, walls included")
    height: int = Field(5, ge=5, le=21, description="rows, odd, walls included")
    view_radius: int = Field(4, ge=1, le=10, description="how far the agent sees around itself")
    loops: float = Field(0.0, ge=0.0, le=0.5, description="share of inner walls knocked out to make loops")

    @field_validator("width", "height")
    @classmethod
    def _odd(cls, v: int) -> int:
        if v % 2 == 0:
            raise ValueError(f"must be odd, got {v}")
        return v


class MoveArgs(ToolArgs):
    direction: Direction = Field(description="north, south, east or west")


@dataclass
class MazeState(State):
    x: int = 0
    y: int = 0
    moves: int = 0
    bumps: int = 0


class Maze(Bootcamp[MazeParams, MazeState]):
    """Walk through a maze to the goal, seeing only the cells near you.

    The grid uses '#' for walls, '.' for open cells, '@' for you and 'G' for the goal; x grows to the
    east and y to the south. You know your position and the goal's, but see only cells within the
    view radius. `move` steps one cell and shows the new view, `look` shows the view again, and
    `submit`, called on the goal, ends the episode.

    Reward is 1 if the agent submits on the goal, else 0 (reasons: `near_miss` within two steps of the
    goal, `lost` further away). Higher levels are larger, see less and have loops.
    """

    name = "maze"
    version = "1"
    params_model = MazeParams
    state_model = MazeState
    levels = {
        1: MazeParams(level=1, width=5, height=5, view_radius=4),
        2: MazeParams(level=2, width=7, height=7, view_radius=2),
        3: MazeParams(level=3, width=9, height=9, view_radius=2, loops=0.1),
        4: MazeParams(level=4, width=13, height=13, view_radius=1, loops=0.15),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: MazeParams, rng: random.Random) -> dict[str, Any]:
        grid = _carve(params.width, params.height, params.loops, rng)
        cells = [(x, y) for y in range(params.height) for x in range(params.width) if grid[y][x] == OPEN]
        start = rng.choice(cells)
        dist = _distances(grid, start)
        far = max(dist.values())
        goal = rng.choice([c for c, d in dist.items() if d >= max(1, far * 2 // 3)])
        return {
            "grid": ["".join(row) for row in grid],
            "start": list(start),
            "goal": list(goal),
            "shortest": dist[goal],
        }

    def prompt(self, instance: Instance[MazeParams]) -> list[dict[str, Any]]:
        d, p = instance.data, instance.params
        sx, sy = d["start"]
        return self.chat(
            f"The maze is {p.width} wide and {p.height} tall. You are at ({sx}, {sy}); the goal is at "
            f"({d['goal'][0]}, {d['goal'][1]}). You see {p.view_radius} cell(s) around you.\n" + _view(instance, sx, sy)
        )

    def new_state(self, instance: Instance[MazeParams]) -> MazeState:
        x, y = instance.data["start"]
        return MazeState(x=x, y=y)

    def max_turns(self, instance: Instance[MazeParams]) -> int:
        return 2 * instance.data["shortest"] + 10

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def look(self, instance: Instance, state: MazeState, args: NoArgs) -> Observation:
        """Show the cells around you."""
        return Observation(f"You are at ({state.x}, {state.y}).\n" + _view(instance, state.x, state.y))

    @tool
    def move(self, instance: Instance, state: MazeState, args: MoveArgs) -> Observation:
        """Step one cell north, south, east or west."""
        dx, dy = STEPS[args.direction]
        nx, ny = state.x + dx, state.y + dy
        if instance.data["grid"][ny][nx] == WALL:  # the border is all wall, so no bounds check is needed
            state.bumps += 1
            return Observation(f"A wall blocks the way {args.direction}. You are still at ({state.x}, {state.y}).")
        state.x, state.y, state.moves = nx, ny, state.moves + 1
        return Observation(f"You moved {args.direction} to ({nx}, {ny}).\n" + _view(instance, nx, ny))

    @tool(final=True)
    def submit(self, instance: Instance, state: MazeState, args: NoArgs) -> Observation:
        """Declare that you stand on the goal. This ends the episode."""
        state.answer = [state.x, state.y]
        return Observation(f"Submitted at ({state.x}, {state.y}).", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: MazeState, transcript: Any) -> Score:
        goal = tuple(instance.data["goal"])
        if (state.x, state.y) == goal and state.answer is not None:
            return Score(1.0, True, {"moves": state.moves, "shortest": instance.data["shortest"]})
        remaining = _goal_distances(tuple(_grid(instance)), goal)[(state.x, state.y)]
        reason = "no_submit" if state.answer is None else ("near_miss" if remaining <= 2 else "lost")
        return Score(0.0, False, {"reason": reason, "remaining": remaining, "moves": state.moves})

    # -- oracle ----------------------------------------------------------------------------------

    def oracle(self, instance: Instance, state: MazeState) -> Action:
        goal = tuple(instance.data["goal"])
        if (state.x, state.y) == goal:
            return Action("submit", {})
        return Action("move", {"direction": _next_direction(_grid(instance), (state.x, state.y), goal)})

    def demonstrate(self, instance: Instance, state: MazeState, transcript: Sequence[Mapping[str, Any]]) -> Action:
        """An explorer over the cells seen so far: every view in the prompt and in the tool results is
        merged into a map, and each step follows a shortest path to the goal that avoids the walls
        seen, assuming unseen cells open (replanned after each view). Every step enters a cell seen
        open, since the agent always sees its neighbours; the prompt and every move show the view, so
        `look` is never needed. Position and goal are the ones the prompt and results state. Exploring
        costs turns the oracle never spends: at level 4 (view radius 1) about one instance in twelve
        outruns the budget sized on the shortest path (teacher data keeps only solved episodes)."""
        here, goal = (state.x, state.y), tuple(instance.data["goal"])
        if here == goal:
            return Action("submit", {})
        seen = observed_cells(shown_text(transcript))
        p = instance.params
        # Shortest first; among routes as short, the one through the fewest unseen cells (the surest).
        cost: dict[tuple[int, int], tuple[int, int]] = {here: (0, 0)}
        prev: dict[tuple[int, int], tuple[int, int] | None] = {here: None}
        heap = [((0, 0), here)]
        while heap:
            c, (x, y) = heapq.heappop(heap)
            if c > cost[(x, y)]:
                continue
            for dx, dy in STEPS.values():
                nxt = (x + dx, y + dy)
                if not (0 <= nxt[0] < p.width and 0 <= nxt[1] < p.height) or seen.get(nxt) == WALL:
                    continue
                nc = (c[0] + 1, c[1] + (nxt not in seen))
                if nc < cost.get(nxt, (1 << 30, 0)):
                    cost[nxt], prev[nxt] = nc, (x, y)
                    heapq.heappush(heap, (nc, nxt))
        step = goal
        while prev[step] != here:
            step = prev[step]  # type: ignore[assignment]
        return Action(
            "move", {"direction": next(n for n, (dx, dy) in STEPS.items() if (here[0] + dx, here[1] + dy) == step)}
        )

    def ungrounded_arguments(self, instance: Instance, transcript: Sequence[Mapping[str, Any]]) -> list[str]:
        """The generic check, plus moves a map of the cells seen before them does not justify.

        Unseen cells look alike to an agent that has not seen them, so a move must shorten the shortest
        route the seen map allows (seen walls avoided, unseen cells assumed open) and enter a cell seen
        open; preferring a route that looks longer can only come from knowing cells not yet seen.
        """
        problems = super().ungrounded_arguments(instance, transcript)
        p, goal, here = instance.params, tuple(instance.data["goal"]), tuple(instance.data["start"])
        for i, message in enumerate(transcript):
            if message.get("role") != "assistant":
                continue
            seen = observed_cells(shown_text(transcript[:i]))
            walls = {c for c, v in seen.items() if v == WALL}
            for name, args in tool_calls([message]):
                if name != "move" or args.get("direction") not in STEPS:
                    continue
                dx, dy = STEPS[args["direction"]]
                nxt = (here[0] + dx, here[1] + dy)
                before = _optimistic_distance(p.width, p.height, walls, here, goal)
                after = _optimistic_distance(p.width, p.height, walls, nxt, goal)
                if seen.get(nxt) != OPEN or after != before - 1:
                    problems.append(
                        f"move {args['direction']} from {here} (seen: {seen.get(nxt)}, route {before} -> {after})"
                    )
                if seen.get(nxt) == OPEN:
                    here = nxt
        return problems

    def perturb(self, instance: Instance, state: MazeState, action: Action, rng: random.Random) -> Action:
        if action.name != "move":
            return action
        return Action("move", {"direction": rng.choice([d for d in STEPS if d != action.arguments["direction"]])})

    def wrong_answer(self, instance: Instance, state: MazeState, rng: random.Random) -> Action | None:
        if [state.x, state.y] == instance.data["goal"]:
            return None  # submitting here would be right; a wrong answer needs another cell
        return Action("submit", {})

    divergence_knobs = {
        "wall": ("view_radius",),
        "revisit": ("loops", "view_radius"),
        "away_from_goal": ("width", "height"),
    }

    def divergence_kind(
        self,
        instance: Instance,
        state: MazeState,
        model_action: Action,
        oracle_action: Action,
        earlier: Sequence[Action] = (),
    ) -> str | None:
        """For a move: `wall` (into a wall), `revisit` (back onto a cell already walked) or
        `away_from_goal` (to a cell further from the goal by the maze's own paths)."""
        direction = model_action.arguments.get("direction")
        if model_action.name != "move" or direction not in STEPS:
            return None
        grid, goal = _grid(instance), tuple(instance.data["goal"])
        dx, dy = STEPS[direction]
        here, there = (state.x, state.y), (state.x + dx, state.y + dy)
        if grid[there[1]][there[0]] == WALL:
            return "wall"
        walked = [tuple(instance.data["start"])]
        for action in earlier:
            step = STEPS.get(action.arguments.get("direction", "")) if action.name == "move" else None
            if step is not None:
                x, y = walked[-1][0] + step[0], walked[-1][1] + step[1]
                if grid[y][x] != WALL:
                    walked.append((x, y))
        if there in walked:
            return "revisit"
        dist = _goal_distances(tuple(grid), goal)
        if dist[there] > dist[here]:
            return "away_from_goal"
        return None


def _optimistic_distance(
    width: int, height: int, walls: set[tuple[int, int]], start: tuple[int, int], goal: tuple[int, int]
) -> int:
    """Steps from ``start`` to ``goal`` avoiding ``walls``, every other cell assumed open."""
    dist = {start: 0}
    queue = deque([start])
    while queue:
        x, y = queue.popleft()
        for dx, dy in STEPS.values():
            nxt = (x + dx, y + dy)
            if 0 <= nxt[0] < width and 0 <= nxt[1] < height and nxt not in walls and nxt not in dist:
                dist[nxt] = dist[(x, y)] + 1
                queue.append(nxt)
    return dist.get(goal, 1 << 30)


_VIEW = re.compile(r"View of x (\d+)\.\.(\d+), y (\d+)\.\.(\d+):\n((?:[#.@G]+\n?)+)")


def observed_cells(text: str) -> dict[tuple[int, int], str]:
    """Every cell the views in ``text`` show: (x, y) -> '#' or '.' (the agent and the goal are open)."""
    cells: dict[tuple[int, int], str] = {}
    for m in _VIEW.finditer(text):
        x0, _, y0, _ = (int(g) for g in m.groups()[:4])
        for dy, row in enumerate(m.group(5).split()):
            for dx, ch in enumerate(row):
                cells[(x0 + dx, y0 + dy)] = WALL if ch == WALL else OPEN
    return cells


def _grid(instance: Instance) -> list[str]:
    return instance.data["grid"]


def _carve(width: int, height: int, loops: float, rng: random.Random) -> list[list[str]]:
    """A perfect maze by randomized depth-first search on odd cells, then ``loops`` of walls removed."""
    grid = [[WALL] * width for _ in range(height)]
    start = (1, 1)
    grid[1][1] = OPEN
    stack = [start]
    while stack:
        x, y = stack[-1]
        options = [
            (x + 2 * dx, y + 2 * dy, dx, dy)
            for dx, dy in STEPS.values()
            if 0 < x + 2 * dx < width - 1 and 0 < y + 2 * dy < height - 1 and grid[y + 2 * dy][x + 2 * dx] == WALL
        ]
        if not options:
            stack.pop()
            continue
        nx, ny, dx, dy = rng.choice(options)
        grid[y + dy][x + dx] = OPEN
        grid[ny][nx] = OPEN
        stack.append((nx, ny))
    inner = [
        (x, y) for y in range(1, height - 1) for x in range(1, width - 1) if grid[y][x] == WALL and (x % 2) != (y % 2)
    ]
    for x, y in rng.sample(inner, int(len(inner) * loops)):
        grid[y][x] = OPEN
    return grid


def _neighbors(grid: list[Any], cell: tuple[int, int]) -> list[tuple[int, int]]:
    x, y = cell
    return [(x + dx, y + dy) for dx, dy in STEPS.values() if grid[y + dy][x + dx] == OPEN]


def _distances(grid: list[Any], source: tuple[int, int]) -> dict[tuple[int, int], int]:
    dist = {source: 0}
    queue = deque([source])
    while queue:
        cell = queue.popleft()
        for nxt in _neighbors(grid, cell):
            if nxt not in dist:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return dist


@functools.lru_cache(maxsize=4096)
def _goal_distances(grid: tuple[str, ...], goal: tuple[int, int]) -> dict[tuple[int, int], int]:
    """Distances to the goal from every cell (one BFS per maze, reused for every step)."""
    return _distances(grid, goal)


def _next_direction(grid: list[str], here: tuple[int, int], goal: tuple[int, int]) -> str:
    """The first step of a shortest path: downhill on the distances to the goal."""
    dist = _goal_distances(tuple(grid), goal)
    x, y = here
    for name, (dx, dy) in STEPS.items():
        if dist.get((x + dx, y + dy), 1 << 30) < dist[here]:
            return name
    raise AssertionError(f"no step towards the goal from {here}")  # unreachable in a connected maze


def _view(instance: Instance, x: int, y: int) -> str:
    """The cells within the view radius, clipped to the grid (the border is all wall, so nothing
    outside it is worth showing), with the window's corner so rows and columns can be placed."""
    grid, r = _grid(instance), instance.params.view_radius
    gx, gy = instance.data["goal"]
    x0, x1 = max(0, x - r), min(len(grid[0]) - 1, x + r)
    y0, y1 = max(0, y - r), min(len(grid) - 1, y + r)
    rows = []
    for vy in range(y0, y1 + 1):
        row = []
        for vx in range(x0, x1 + 1):
            row.append("@" if (vx, vy) == (x, y) else "G" if (vx, vy) == (gx, gy) else grid[vy][vx])
        rows.append("".join(row))
    return f"View of x {x0}..{x1}, y {y0}..{y1}:\n" + "\n".join(rows)
