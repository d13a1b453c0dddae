"""The gui bootcamp's screen: the form's vocabulary, params, state and layout, and how a screen is drawn
(a PNG) and described (text mode). The tools and the reward live in campflow.bootcamps.gui.bootcamp."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageDraw
from pydantic import Field, model_validator

from campflow.bootcamps.base import Instance, State
from campflow.bootcamps.rendering import VisionParams, draw_text, encode_png, text_width

HEADER, FOOTER, ROW_FIELD, ROW_CHECK, OPTION_PX, PAD = 36, 48, 44, 36, 24, 12
LABEL_X, CONTROL_X, FONT = 16, 150, 13
# Widget labels and the values they take; "|" separates values, since some hold spaces.
_TEXT = {
    label: values.split("|")
    for label, values in {
        "Full name": "Ada Lovelace|Alan Turing|Grace Hopper|Barbara Liskov|Ken Thompson",
        "Street": "12 Elm Street|7 Harbour Road|221 Baker Street|3 Mill Lane",
        "City": "Lisbon|Toronto|Nairobi|Osaka|Quito",
        "ZIP code": "10115|94107|75008|60614|2000",
        "Email": "ada@example.com|alan@example.org|grace@mail.test",
        "Phone": "555-0134|555-0199|555-0102|555-0178",
        "Company": "Acme Ltd|Globex|Initech|Umbrella Co",
        "Coupon code": "SAVE10|WELCOME5|SPRING24|FREESHIP",
    }.items()
}
_CHECK = [
    "Gift wrap",
    "Express delivery",
    "Subscribe to newsletter",
    "Save this address",
    "Require signature",
    "Leave at the door",
    "Send SMS updates",
    "Print receipt",
]
_DROP = {
    label: values.split("|")
    for label, values in {
        "Country": "France|Spain|Japan|Brazil|Canada|Kenya|India|Norway",
        "Shipping": "Standard|Express|Overnight|Pickup|Economy|Same day|Freight|Locker",
        "Payment": "Card|PayPal|Invoice|Cash|Bank transfer|Voucher|Cheque|Gift card",
        "Size": "XS|S|M|L|XL|XXL|3XL|4XL",
        "Color": "Black|White|Navy|Olive|Red|Sand|Teal|Grey",
        "Quantity": "1|2|3|4|5|6|7|8",
        "Language": "English|French|German|Hindi|Japanese|Swahili|Spanish|Korean",
        "Time slot": "08-10|10-12|12-14|14-16|16-18|18-20|20-22|Any time",
    }.items()
}
_TITLES = ["Checkout", "Shipping details", "Account settings", "Delivery options", "Order form"]
_DECOYS = ["Reset", "Save draft", "Help"]
_KINDS = {"t": "text", "c": "checkbox", "d": "dropdown"}
_BLUE, _INK, _MUTED, _EDGE, _WHITE = (40, 110, 220), (30, 30, 35), (130, 130, 140), (150, 150, 160), (255, 255, 255)
_BACK, _BAR, _FOOT, _RULE, _THUMB, _CHOSEN = (
    (244, 245, 248),
    (40, 52, 70),
    (232, 234, 238),
    (205, 207, 212),
    (170, 172, 180),
    (225, 235, 250),
)
_COLORS = (_BLUE, _INK, _MUTED, _EDGE, _WHITE, _BACK, _BAR, _FOOT, _RULE, _THUMB, _CHOSEN)


def _footer(width: int, height: int, decoys: list[str]) -> list[dict[str, Any]]:
    """Footer buttons: decoys from the left edge, Cancel and Submit at the right, in screen pixels."""
    top, buttons, x = height - FOOTER + 9, [], LABEL_X
    for label in decoys:
        right = x + text_width(label, FONT) + 24
        buttons.append({"id": label.lower().replace(" ", "_"), "label": label, "box": [x, top, right, top + 30]})
        x = right + 8
    x = width - LABEL_X
    for label in ("Submit", "Cancel"):
        left = x - text_width(label, FONT) - 24
        buttons.append({"id": label.lower(), "label": label, "box": [left, top, x, top + 30]})
        x = left - 8
    return buttons


class GuiParams(VisionParams):
    """Knobs of a form-filling task."""

    fields: int = Field(4, ge=2, le=14, description="input widgets on the form")
    targets: int = Field(2, ge=1, le=8, description="widgets the goal asks to change")
    kinds: str = Field("tc", pattern=r"^[tcd]{1,3}$", description="widget kinds: t text field, c checkbox, d dropdown")
    options: int = Field(4, ge=3, le=8, description="options per dropdown")
    prefilled: bool = Field(False, description="text fields start with other text, which must be replaced")
    decoy_buttons: int = Field(0, ge=0, le=3, description="extra footer buttons: Reset, Save draft, Help")
    # 400 px is the narrowest footer that holds every button (a test checks it)
    screen_width: int = Field(480, ge=400, le=1024, description="screenshot width in pixels")
    screen_height: int = Field(400, ge=240, le=800, description="screenshot height in pixels; taller forms scroll")

    @model_validator(mode="after")
    def _consistent(self) -> GuiParams:
        if self.targets > self.fields:
            raise ValueError(f"targets = {self.targets} exceeds fields = {self.fields}; expected targets <= fields")
        if len(set(self.kinds)) != len(self.kinds):
            raise ValueError(f"kinds = {self.kinds!r} repeats a letter; expected each of t, c, d at most once")
        if self.fields > 8 * len(self.kinds):
            raise ValueError(f"fields = {self.fields}: kinds {self.kinds!r} offer at most {8 * len(self.kinds)}")
        return self


@dataclass
class GuiState(State):
    """The widgets' values, the scroll position, focus, the open list and how the form was left."""

    values: dict[str, Any] = field(default_factory=dict)  # widget id -> text, checked flag or chosen option
    scroll: int = 0  # pixels of the form scrolled out above the view
    focus: str | None = None  # the text field that receives `type`
    open: str | None = None  # the dropdown whose list is showing
    seen: bool = True  # whether the agent has looked since the view last moved (the prompt shows it)
    outcome: str | None = None  # "submitted" or "cancelled"


# -- layout ------------------------------------------------------------------------------------------


def layout(params: GuiParams, rng: random.Random) -> dict[str, Any]:
    """A form for ``params``: its widgets with their boxes, footer buttons, goal values and scroll range."""
    w, h = params.screen_width, params.screen_height
    pools = [(k, label) for k in params.kinds for label in (_TEXT if k == "t" else _CHECK if k == "c" else _DROP)]
    widgets, y = [], PAD
    for i, (k, label) in enumerate(rng.sample(pools, params.fields)):
        kind = _KINDS[k]
        widget: dict[str, Any] = {"id": f"w{i}", "kind": kind, "label": label}
        if kind == "checkbox":
            widget |= {
                "box": [LABEL_X, y + 9, LABEL_X + 18, y + 27],
                "initial": rng.random() < 0.5,
                "hit": [LABEL_X, y + 6, LABEL_X + 26 + text_width(label, FONT), y + 30],
            }
            y += ROW_CHECK
        else:
            widget["box"] = widget["hit"] = [CONTROL_X, y + 8, w - 16, y + 36]
            if kind == "text":
                widget["initial"] = rng.choice(_TEXT[label]) if params.prefilled else ""
            else:
                widget["options"] = rng.sample(_DROP[label], params.options)
                widget["initial"] = rng.choice([None, *widget["options"]])
            y += ROW_FIELD
        widgets.append(widget)
    targets = {}
    for widget in sorted(rng.sample(widgets, params.targets), key=lambda wd: int(wd["id"][1:])):
        if widget["kind"] == "checkbox":
            targets[widget["id"]] = not widget["initial"]
        else:
            choices = _TEXT[widget["label"]] if widget["kind"] == "text" else widget["options"]
            targets[widget["id"]] = rng.choice([c for c in choices if c != widget["initial"]])
    view = h - HEADER - FOOTER
    decoys = rng.sample(_DECOYS, params.decoy_buttons)
    return {
        "title": rng.choice(_TITLES),
        "image_size": [w, h],
        "content_height": y + PAD,
        "max_scroll": max(0, y + PAD - view),
        "scroll_step": view // 2,
        "widgets": widgets,
        "buttons": _footer(w, h, decoys),
        "targets": targets,
        "goal": _goal(widgets, targets),
    }


# -- geometry ----------------------------------------------------------------------------------------


def widgets_by_id(instance: Instance) -> dict[str, dict[str, Any]]:
    """The form's widgets by id."""
    return {w["id"]: w for w in instance.data["widgets"]}


def on_screen(box: list[int], scroll: int) -> tuple[int, int, int, int]:
    """A box in form coordinates moved to screen coordinates."""
    return box[0], box[1] + HEADER - scroll, box[2], box[3] + HEADER - scroll


def inside(box: Any, x: int, y: int) -> bool:
    """Whether pixel (x, y) is in ``box`` (left, top, right, bottom; right and bottom exclusive)."""
    return box[0] <= x < box[2] and box[1] <= y < box[3]


def option_boxes(instance: Instance, dropdown: dict[str, Any], scroll: int) -> list[tuple[str, tuple[int, ...]]]:
    """Where an open list's options are: below the box, else above it, else from the title bar down."""
    x0, y0, x1, y1 = on_screen(dropdown["box"], scroll)
    height = OPTION_PX * len(dropdown["options"])
    top = y1 if y1 + height <= instance.data["image_size"][1] else max(HEADER, y0 - height)
    return [(o, (x0, top + i * OPTION_PX, x1, top + (i + 1) * OPTION_PX)) for i, o in enumerate(dropdown["options"])]


def _goal(widgets: list[dict[str, Any]], targets: dict[str, Any]) -> str:
    by_id = {w["id"]: w for w in widgets}
    steps = [
        {
            "text": f'set "{by_id[i]["label"]}" to "{v}"',
            "dropdown": f'choose "{v}" in "{by_id[i]["label"]}"',
            "checkbox": f'{"check" if v else "uncheck"} "{by_id[i]["label"]}"',
        }[by_id[i]["kind"]]
        for i, v in targets.items()
    ]
    return f"Fill in the form: {'; '.join(steps)}. Leave everything else as it is, then click Submit."


# -- observations ------------------------------------------------------------------------------------


def _shown(value: str | None) -> str:
    """The text a field or dropdown shows: its value, or the placeholder of a dropdown with no choice."""
    return "Select..." if value is None else value


def _in_view(widget: dict[str, Any], scroll: int, height: int) -> bool:
    """Whether any of the widget's clickable box shows between the title bar and the footer."""
    box = on_screen(widget["hit"], scroll)
    return box[3] > HEADER and box[1] < height - FOOTER


def render(instance: Instance[GuiParams], state: GuiState) -> bytes:
    """The screen of ``instance`` in ``state`` as PNG bytes of ``image_size``."""
    d = instance.data
    w, h = d["image_size"]
    image = Image.new("RGB", (w, h), _BACK)
    draw = ImageDraw.Draw(image)
    for widget in (wd for wd in d["widgets"] if _in_view(wd, state.scroll, h)):
        x0, y0, x1, y1 = on_screen(widget["box"], state.scroll)
        value, cy = state.values[widget["id"]], (y0 + y1) // 2
        if widget["kind"] == "checkbox":
            draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=_BLUE if value else _WHITE, outline=_EDGE)
            if value:
                draw.line((x0 + 4, cy, x0 + 8, y1 - 5, x1 - 4, y0 + 4), fill=_WHITE, width=2)
            draw_text(image, (x1 + 8, cy), widget["label"], FONT, _INK, "lm")
            continue
        focused = state.focus == widget["id"]
        draw_text(image, (LABEL_X, cy), widget["label"], FONT, _INK, "lm")
        draw.rectangle(
            (x0, y0, x1 - 1, y1 - 1), fill=_WHITE, outline=_BLUE if focused else _EDGE, width=2 if focused else 1
        )
        text = _shown(value)
        draw_text(image, (x0 + 8, cy), text, FONT, _MUTED if value is None else _INK, "lm")
        if focused:
            caret = x0 + 9 + text_width(text, FONT)
            draw.line((caret, cy - 8, caret, cy + 8), fill=_INK)
        if widget["kind"] == "dropdown":
            draw.polygon([(x1 - 22, cy - 3), (x1 - 10, cy - 3), (x1 - 16, cy + 4)], fill=_MUTED)
    draw.rectangle((0, 0, w, HEADER - 1), fill=_BAR)
    draw_text(image, (LABEL_X, HEADER // 2), d["title"], 15, _WHITE, "lm")
    draw.rectangle((0, h - FOOTER, w, h), fill=_FOOT, outline=_RULE)
    for button in d["buttons"]:
        primary = button["id"] == "submit"
        draw.rounded_rectangle(button["box"], radius=4, fill=_BLUE if primary else _WHITE, outline=_EDGE)
        x0, y0, x1, _ = button["box"]
        draw_text(image, ((x0 + x1) / 2, y0 + 15), button["label"], FONT, _WHITE if primary else _INK, "mm")
    if d["max_scroll"]:  # a scrollbar thumb shows where the view sits in the form
        view = h - HEADER - FOOTER
        top = HEADER + view * state.scroll // d["content_height"]
        draw.rectangle((w - 6, top, w - 2, top + view * view // d["content_height"]), fill=_THUMB)
    if state.open is not None:
        dropdown = widgets_by_id(instance)[state.open]
        for option, box in option_boxes(instance, dropdown, state.scroll):
            chosen = option == state.values[dropdown["id"]]
            draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=_CHOSEN if chosen else _WHITE, outline=_EDGE)
            draw_text(image, (box[0] + 8, (box[1] + box[3]) // 2), option, FONT, _INK, "lm")
    return encode_png(image, _COLORS)


def describe(instance: Instance[GuiParams], state: GuiState) -> str:
    """The text-mode screen: every widget in view with its clickable box and state, as drawn."""
    d = instance.data
    w, h = d["image_size"]
    view = h - HEADER - FOOTER
    more = [
        s
        for s, c in (("scroll up for more", state.scroll > 0), ("scroll down for more", state.scroll < d["max_scroll"]))
        if c
    ]
    lines = [
        f"Screen {w}x{h} pixels; boxes are (left, top, right, bottom), right and bottom exclusive.",
        f'Title bar (0, 0, {w}, {HEADER}): "{d["title"]}".',
        f"Form area (0, {HEADER}, {w}, {h - FOOTER}) shows form pixels {state.scroll}-"
        f"{min(state.scroll + view, d['content_height'])} of {d['content_height']}"
        + (f" ({'; '.join(more)})." if more else "."),
    ]
    for widget in (wd for wd in d["widgets"] if _in_view(wd, state.scroll, h)):
        box, value = on_screen(widget["hit"], state.scroll), state.values[widget["id"]]
        if box[1] < HEADER or box[3] > h - FOOTER:  # the screenshot shows too little of it to read
            lines.append(f"partly hidden widget {box}; scroll to see it")
            continue
        shown = ("checked" if value else "unchecked") if widget["kind"] == "checkbox" else f'"{_shown(value)}"'
        lines.append(
            f'{widget["kind"].replace("text", "text field")} "{widget["label"]}" {box}: {shown}'
            + (" [focused]" if state.focus == widget["id"] else "")
        )
    lines.append("Footer buttons: " + "; ".join(f'"{b["label"]}" {tuple(b["box"])}' for b in d["buttons"]) + ".")
    if state.open is not None:
        dropdown = widgets_by_id(instance)[state.open]
        options = ", ".join(f'"{o}" {box}' for o, box in option_boxes(instance, dropdown, state.scroll))
        lines.append(f'Open list of "{dropdown["label"]}": {options}.')
    return "\n".join(lines)
