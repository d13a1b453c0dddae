"""gridworld: grid navigation seen as an image each turn, with keys and locked doors at higher levels."""

from __future__ import annotations

import functools
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageDraw
from pydantic import Field, model_validator

from campflow.bootcamps.base import Action, Bootcamp, Instance, NoArgs, Observation, Score, State, ToolArgs, tool
from campflow.bootcamps.rendering import (
    VisionParams, center_text, encode_png, font, observe, palette_canvas, user_content,
)
from campflow.errors import ToolError

STEPS: dict[str, tuple[int, int]] = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}
WALL, FLOOR, GOAL, OPEN_DOOR, AGENT = "#", ".", "*", "/", "@"
# Key and door colours (green is the goal's) and their letters on the map: keys lowercase, locked doors
# uppercase. The image is drawn from that same map, so both modes show the same facts.
COLORS: dict[str, tuple[int, int, int]] = {"red": (214, 39, 40), "blue": (31, 100, 200), "yellow": (235, 185, 0),
                                           "purple": (140, 70, 190), "orange": (245, 125, 10)}
LETTERS = {"red": "r", "blue": "b", "yellow": "y", "purple": "p", "orange": "o"}
_COLOR_OF = {letter: color for color, letter in LETTERS.items()}
# Frame palette: 0 floor, 1 wall, 2 grid line, 3 ink, 4 goal, 5 status bar, 6+ key and door colours.
_PALETTE = [(255, 255, 255), (70, 70, 80), (215, 215, 220), (20, 20, 20), (46, 160, 67), (238, 238, 242),
            *COLORS.values()]
_INK = {letter: 6 + i for i, letter in enumerate(LETTERS.values())}
_BAR_PX = 22
Node = tuple[int, int, int, int]  # the planner's state: x, y, bitmask of door keys held, bitmask of doors open


class GridworldParams(VisionParams):
    """Knobs of a gridworld."""

    width: int = Field(6, ge=5, le=16, description="columns, border walls included")
    height: int = Field(6, ge=5, le=16, description="rows, border walls included")
    wall_density: float = Field(0.1, ge=0.0, le=0.35, description="share of free inner cells turned into walls")
    doors: int = Field(0, ge=0, le=3, description="locked doors, each opened by the key of its colour")
    spare_keys: int = Field(0, ge=0, le=2, description="distractor keys whose colour matches no door")
    cell_px: int = Field(32, ge=16, le=64, description="pixels per grid cell in the image")
    show_coordinates: bool = Field(True, description="label columns (x) and rows (y) along the map's edges")

    @model_validator(mode="after")
    def _rooms_fit(self) -> GridworldParams:
        if self.width < 3 * self.doors + 4:
            raise ValueError(f"width {self.width} is too narrow for {self.doors} door(s); "
                             f"expected width >= {3 * self.doors + 4}")
        return self


def image_size(params: GridworldParams) -> tuple[int, int]:
    """The (width, height) in pixels of every gridworld frame for ``params``."""
    margin = _margin(params)
    return params.width * params.cell_px + margin, params.height * params.cell_px + margin + _BAR_PX


def _margin(params: GridworldParams) -> int:
    return 18 if params.show_coordinates else 0  # room for the coordinate labels


class DirectionArgs(ToolArgs):
    """Arguments of `move` and `unlock`."""

    # A plain string, checked by the tool, so an unknown direction is a ToolError naming the choices.
    direction: str = Field(description="north, south, east or west")


@dataclass
class GridworldState(State):
    """Where the agent stands, the keys it holds and the doors it has opened."""

    x: int = 0
    y: int = 0
    held: list[str] = field(default_factory=list)  # key colours in pick-up order
    opened: list[str] = field(default_factory=list)  # door colours
    moves: int = 0


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
    modality = "vision"
    params_model = GridworldParams
    state_model = GridworldState
    levels = {
        1: GridworldParams(level=1, width=6, height=6, wall_density=0.1, cell_px=40),
        2: GridworldParams(level=2, width=8, height=8, wall_density=0.2, doors=1, cell_px=32),
        3: GridworldParams(level=3, width=10, height=9, wall_density=0.2, doors=2, spare_keys=1, cell_px=28),
        4: GridworldParams(level=4, width=13, height=11, wall_density=0.25, doors=3, spare_keys=2, cell_px=24,
                           show_coordinates=False),
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
        data = {"grid": ["".join(row) for row in grid], "start": list(start), "goal": list(goal), "keys": keys,
                "doors": [{"color": colors[i], "pos": list(pos)} for i, pos in enumerate(doors)],
                "image_size": list(image_size(params))}
        data["shortest"] = len(_plan(_layout_of(data), (*start, 0, 0)))
        return data

    def prompt(self, instance: Instance[GridworldParams]) -> list[dict[str, Any]]:
        p, state = instance.params, self.new_state(instance)
        w, h = instance.data["image_size"]
        shown = f"an image of {w}x{h} pixels" if p.observation == "image" else "a text map"
        caption = f"The grid is {p.width} cells wide and {p.height} tall, shown as {shown}. Reach the goal and submit."
        return self.chat(user_content(p.observation, caption, lambda: _render(instance, state),
                                      lambda: _describe(instance, state)))

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
        door = _door_at(instance, nx, ny)
        if instance.data["grid"][ny][nx] == WALL:
            raise ToolError(f"cannot move {args.direction} from ({state.x}, {state.y}): ({nx}, {ny}) is a wall")
        if door is not None and door not in state.opened:
            raise ToolError(f"cannot move {args.direction} from ({state.x}, {state.y}): the {door} door at "
                            f"({nx}, {ny}) is locked; `unlock` it while carrying the {door} key")
        state.x, state.y, state.moves = nx, ny, state.moves + 1
        return self._show(instance, state, f"Moved {args.direction}.")

    @tool
    def pick_up(self, instance: Instance, state: GridworldState, args: NoArgs) -> Observation:
        """Pick up the key on your cell."""
        key = _key_here(instance, state)
        if key is None:
            raise ToolError(f"there is no key at ({state.x}, {state.y}) to pick up; stand on a key first")
        state.held.append(key)
        return self._show(instance, state, f"Picked up the {key} key.")

    @tool
    def unlock(self, instance: Instance, state: GridworldState, args: DirectionArgs) -> Observation:
        """Unlock and open the door next to you in a direction (north, south, east or west) with its key."""
        nx, ny = _neighbor(state, args.direction)
        door = _door_at(instance, nx, ny)
        if door is None:
            raise ToolError(f"there is no door {args.direction} of ({state.x}, {state.y}); "
                            "expected a direction towards a door next to you")
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
        return observe(instance.params.observation, caption, lambda: _render(instance, state),
                       lambda: _describe(instance, state))

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: GridworldState, transcript: Any) -> Score:
        if [state.x, state.y] == instance.data["goal"] and state.answer is not None:
            return Score(1.0, True, {"moves": state.moves, "shortest": instance.data["shortest"]})
        remaining = len(_plan(_layout_of(instance.data), _node(instance, state))) - 1  # minus the submit
        reason = "no_submit" if state.answer is None else ("near_miss" if remaining <= 2 else "lost")
        return Score(0.0, False, {"reason": reason, "remaining": remaining, "moves": state.moves})

    # -- oracle ----------------------------------------------------------------------------------

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


def _door_at(instance: Instance, x: int, y: int) -> str | None:
    return next((d["color"] for d in instance.data["doors"] if d["pos"] == [x, y]), None)


def _key_here(instance: Instance, state: GridworldState) -> str | None:
    return next((k["color"] for k in instance.data["keys"]
                 if k["pos"] == [state.x, state.y] and k["color"] not in state.held), None)


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
    inner = [(x, y) for y in range(1, h - 1) for x in range(1, w - 1)
             if grid[y][x] == FLOOR and (x, y) not in keep and (x, y) not in doors]
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
    return _Layout(tuple(data["grid"]), tuple(data["goal"]), tuple(tuple(k["pos"]) for k in data["keys"][:n]),
                   tuple(tuple(d["pos"]) for d in data["doors"]))


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


# -- observations -------------------------------------------------------------------------------------


def _map(instance: Instance, state: GridworldState) -> list[list[str]]:
    """The grid as map characters, without the agent: what both the text view and the image show."""
    rows = [list(r) for r in instance.data["grid"]]
    rows[instance.data["goal"][1]][instance.data["goal"][0]] = GOAL
    for door in instance.data["doors"]:
        rows[door["pos"][1]][door["pos"][0]] = OPEN_DOOR if door["color"] in state.opened else \
            LETTERS[door["color"]].upper()
    for key in instance.data["keys"]:
        if key["color"] not in state.held:
            rows[key["pos"][1]][key["pos"][0]] = LETTERS[key["color"]]
    return rows


def _status(instance: Instance, state: GridworldState) -> str:
    text = "Carrying: " + (", ".join(f"{c} key" for c in state.held) or "nothing")
    here, door = _key_here(instance, state), _door_at(instance, state.x, state.y)
    return text + (f"   Here: {here} key" if here else f"   Here: open {door} door" if door else "")


def _describe(instance: Instance, state: GridworldState) -> str:
    """The text-mode view: the map, its labels and the status bar, as characters."""
    rows = _map(instance, state)
    rows[state.y][state.x] = AGENT
    lines = ["".join(r) for r in rows]
    if instance.params.show_coordinates:
        header = "   " + "".join(str(x % 10) for x in range(len(lines[0])))
        lines = [header] + [f"{y:2d} {row}" for y, row in enumerate(lines)]
    return "Map:\n" + "\n".join(lines) + "\n" + _status(instance, state)


_SCENES: dict[tuple[str, tuple[str, ...], tuple[str, ...]], Image.Image] = {}
_BOARDS: dict[str, Image.Image] = {}


def _scene(instance: Instance, state: GridworldState) -> Image.Image:
    """The frame without the agent and status bar. It changes only when a key or door does, so it is
    drawn once per (instance, keys held, doors open) and reused for every step in between."""
    key = (instance.id, tuple(state.held), tuple(state.opened))
    if key not in _SCENES:
        if len(_SCENES) >= 512:  # caches, not stores: dropped wholesale rather than tracking recency
            _SCENES.clear()
            _BOARDS.clear()
        if instance.id not in _BOARDS:
            _BOARDS[instance.id] = _draw_board(instance)
        _SCENES[key] = _draw_objects(_BOARDS[instance.id].copy(), instance, state)
    return _SCENES[key]


def _draw_board(instance: Instance) -> Image.Image:
    """Floor, walls, grid lines, coordinate labels and the goal: what no action changes."""
    p, cell, m = instance.params, instance.params.cell_px, _margin(instance.params)
    image, draw = palette_canvas(tuple(instance.data["image_size"]), _PALETTE)
    for y, row in enumerate(instance.data["grid"]):
        for x, ch in enumerate(row):
            if ch == WALL:
                draw.rectangle((m + x * cell, m + y * cell, m + (x + 1) * cell - 1, m + (y + 1) * cell - 1), fill=1)
    right, bottom = m + p.width * cell - 1, m + p.height * cell - 1
    for x in range(p.width):
        draw.line((m + x * cell, m, m + x * cell, bottom), fill=2)
        if m:
            center_text(draw, (m + x * cell, 0, m + (x + 1) * cell, m), str(x), 11, 3)
    for y in range(p.height):
        draw.line((m, m + y * cell, right, m + y * cell), fill=2)
        if m:
            center_text(draw, (0, m + y * cell, m, m + (y + 1) * cell), str(y), 11, 3)
    draw.rectangle((m, m, right, bottom), outline=2)
    u, (gx, gy) = cell / 16, instance.data["goal"]
    draw.rectangle((m + gx * cell + 2 * u, m + gy * cell + 2 * u, m + gx * cell + 14 * u - 1,
                    m + gy * cell + 14 * u - 1), fill=4)
    return image


def _draw_objects(image: Image.Image, instance: Instance, state: GridworldState) -> Image.Image:
    """Keys still lying about and doors, locked or open, on a copy of the board."""
    cell, m, draw = instance.params.cell_px, _margin(instance.params), ImageDraw.Draw(image)
    u = cell / 16  # drawing unit: shapes are laid out on a 16 x 16 grid per cell
    rows = _map(instance, state)
    for x, y in [k["pos"] for k in instance.data["keys"]] + [d["pos"] for d in instance.data["doors"]]:
        ch, x0, y0 = rows[y][x], m + x * cell, m + y * cell
        if ch == OPEN_DOOR:
            draw.rectangle((x0 + 1, y0 + 1, x0 + cell - 2, y0 + cell - 2), outline=1, width=max(2, cell // 10))
        elif ch.isupper():  # a locked door: a coloured block with a keyhole
            draw.rectangle((x0 + 1, y0 + 1, x0 + cell - 2, y0 + cell - 2), fill=_INK[ch.lower()], outline=3)
            draw.ellipse((x0 + 7 * u, y0 + 7 * u, x0 + 9 * u, y0 + 9 * u), fill=3)
        elif ch.islower():  # a key: a ring on the left, a shaft to the right with two teeth
            ink, cy = _INK[ch], y0 + cell / 2
            draw.ellipse((x0 + 3 * u, cy - 3 * u, x0 + 8 * u, cy + 3 * u), outline=ink, width=max(2, int(1.5 * u)))
            draw.rectangle((x0 + 8 * u, cy - u, x0 + 13 * u, cy + u), fill=ink)
            for tooth in (10, 12):
                draw.rectangle((x0 + tooth * u, cy, x0 + (tooth + 1) * u, cy + 3 * u), fill=ink)
    return image


def _render(instance: Instance, state: GridworldState) -> bytes:
    cell, m = instance.params.cell_px, _margin(instance.params)
    image = _scene(instance, state).copy()
    r, cx, cy = cell * 3 // 10, m + state.x * cell + cell // 2, m + state.y * cell + cell // 2
    ImageDraw.Draw(image).ellipse((cx - r, cy - r, cx + r, cy + r), fill=3)
    image.paste(_status_bar(_status(instance, state), image.width), (0, image.height - _BAR_PX))
    return encode_png(image)


@functools.lru_cache(maxsize=1024)
def _status_bar(text: str, width: int) -> Image.Image:
    """The status bar strip; cached because drawing text costs more than the rest of a frame."""
    image, draw = palette_canvas((width, _BAR_PX), _PALETTE, background=5)
    draw.text((6, _BAR_PX // 2), text, font=font(12), fill=3, anchor="lm")
    return image
