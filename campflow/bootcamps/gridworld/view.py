"""The gridworld bootcamp's world and views: its params and state, the map, and how a frame is drawn
(a PNG) and described (text mode). The tools, generation and the oracle's planner live in
campflow.bootcamps.gridworld.bootcamp."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from PIL import Image, ImageDraw
from pydantic import Field, model_validator

from campflow.bootcamps.base import Instance, State
from campflow.bootcamps.rendering import VisionParams, center_text, encode_png, font, palette_canvas

STEPS: dict[str, tuple[int, int]] = {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}
WALL, FLOOR, GOAL, OPEN_DOOR, AGENT = "#", ".", "*", "/", "@"
# Key and door colours (green is the goal's) and their letters on the map: keys lowercase, locked doors
# uppercase. The image is drawn from that same map, so both modes show the same facts.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (214, 39, 40),
    "blue": (31, 100, 200),
    "yellow": (235, 185, 0),
    "purple": (140, 70, 190),
    "orange": (245, 125, 10),
}
LETTERS = {"red": "r", "blue": "b", "yellow": "y", "purple": "p", "orange": "o"}
# Frame palette: 0 floor, 1 wall, 2 grid line, 3 ink, 4 goal, 5 status bar, 6+ key and door colours.
_PALETTE = [
    (255, 255, 255),
    (70, 70, 80),
    (215, 215, 220),
    (20, 20, 20),
    (46, 160, 67),
    (238, 238, 242),
    *COLORS.values(),
]
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
            raise ValueError(
                f"width {self.width} is too narrow for {self.doors} door(s); expected width >= {3 * self.doors + 4}"
            )
        return self


def image_size(params: GridworldParams) -> tuple[int, int]:
    """The (width, height) in pixels of every gridworld frame for ``params``."""
    margin = _margin(params)
    return params.width * params.cell_px + margin, params.height * params.cell_px + margin + _BAR_PX


def _margin(params: GridworldParams) -> int:
    return 18 if params.show_coordinates else 0  # room for the coordinate labels


@dataclass
class GridworldState(State):
    """Where the agent stands, the keys it holds and the doors it has opened."""

    x: int = 0
    y: int = 0
    held: list[str] = field(default_factory=list)  # key colours in pick-up order
    opened: list[str] = field(default_factory=list)  # door colours
    moves: int = 0


# -- world queries ---------------------------------------------------------------------------------


def door_at(instance: Instance, x: int, y: int) -> str | None:
    """The colour of the door at (x, y), or None."""
    return next((d["color"] for d in instance.data["doors"] if d["pos"] == [x, y]), None)


def key_here(instance: Instance, state: GridworldState) -> str | None:
    """The colour of a key lying where the agent stands (not yet picked up), or None."""
    return next(
        (k["color"] for k in instance.data["keys"] if k["pos"] == [state.x, state.y] and k["color"] not in state.held),
        None,
    )


# -- observations -------------------------------------------------------------------------------------


def _map(instance: Instance, state: GridworldState) -> list[list[str]]:
    """The grid as map characters, without the agent: what both the text view and the image show."""
    rows = [list(r) for r in instance.data["grid"]]
    rows[instance.data["goal"][1]][instance.data["goal"][0]] = GOAL
    for door in instance.data["doors"]:
        rows[door["pos"][1]][door["pos"][0]] = (
            OPEN_DOOR if door["color"] in state.opened else LETTERS[door["color"]].upper()
        )
    for key in instance.data["keys"]:
        if key["color"] not in state.held:
            rows[key["pos"][1]][key["pos"][0]] = LETTERS[key["color"]]
    return rows


def _status(instance: Instance, state: GridworldState) -> str:
    text = "Carrying: " + (", ".join(f"{c} key" for c in state.held) or "nothing")
    here, door = key_here(instance, state), door_at(instance, state.x, state.y)
    return text + (f"   Here: {here} key" if here else f"   Here: open {door} door" if door else "")


def describe(instance: Instance, state: GridworldState) -> str:
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
    draw.rectangle(
        (m + gx * cell + 2 * u, m + gy * cell + 2 * u, m + gx * cell + 14 * u - 1, m + gy * cell + 14 * u - 1), fill=4
    )
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


def render(instance: Instance, state: GridworldState) -> bytes:
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
