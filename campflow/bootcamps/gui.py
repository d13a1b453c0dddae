"""gui: fill in a rendered app form by clicking pixels, typing and scrolling, then submit it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageDraw
from pydantic import Field, model_validator

from campflow.bootcamps.base import Action, Bootcamp, Instance, NoArgs, Observation, Score, State, ToolArgs, tool
from campflow.bootcamps.rendering import VisionParams, draw_text, encode_png, observe, text_width, user_content
from campflow.errors import ToolError

HEADER, FOOTER, ROW_FIELD, ROW_CHECK, OPTION_PX, PAD = 36, 48, 44, 36, 24, 12
LABEL_X, CONTROL_X, FONT = 16, 150, 13
# Widget labels and the values they take; "|" separates values, since some hold spaces.
_TEXT = {label: values.split("|") for label, values in {
    "Full name": "Ada Lovelace|Alan Turing|Grace Hopper|Barbara Liskov|Ken Thompson",
    "Street": "12 Elm Street|7 Harbour Road|221 Baker Street|3 Mill Lane", "City": "Lisbon|Toronto|Nairobi|Osaka|Quito",
    "ZIP code": "10115|94107|75008|60614|2000", "Email": "ada@example.com|alan@example.org|grace@mail.test",
    "Phone": "555-0134|555-0199|555-0102|555-0178", "Company": "Acme Ltd|Globex|Initech|Umbrella Co",
    "Coupon code": "SAVE10|WELCOME5|SPRING24|FREESHIP"}.items()}
_CHECK = ["Gift wrap", "Express delivery", "Subscribe to newsletter", "Save this address", "Require signature",
          "Leave at the door", "Send SMS updates", "Print receipt"]
_DROP = {label: values.split("|") for label, values in {
    "Country": "France|Spain|Japan|Brazil|Canada|Kenya|India|Norway",
    "Shipping": "Standard|Express|Overnight|Pickup|Economy|Same day|Freight|Locker",
    "Payment": "Card|PayPal|Invoice|Cash|Bank transfer|Voucher|Cheque|Gift card", "Size": "XS|S|M|L|XL|XXL|3XL|4XL",
    "Color": "Black|White|Navy|Olive|Red|Sand|Teal|Grey", "Quantity": "1|2|3|4|5|6|7|8",
    "Language": "English|French|German|Hindi|Japanese|Swahili|Spanish|Korean",
    "Time slot": "08-10|10-12|12-14|14-16|16-18|18-20|20-22|Any time"}.items()}
_TITLES = ["Checkout", "Shipping details", "Account settings", "Delivery options", "Order form"]
_DECOYS = ["Reset", "Save draft", "Help"]
_KINDS = {"t": "text", "c": "checkbox", "d": "dropdown"}
_BLUE, _INK, _MUTED, _EDGE, _WHITE = (40, 110, 220), (30, 30, 35), (130, 130, 140), (150, 150, 160), (255, 255, 255)
_BACK, _BAR, _FOOT, _RULE, _THUMB, _CHOSEN = ((244, 245, 248), (40, 52, 70), (232, 234, 238), (205, 207, 212),
                                           (170, 172, 180), (225, 235, 250))
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


class ClickArgs(ToolArgs):
    """Arguments of `click`: a pixel of the screenshot. Any integer is accepted here; the tool refuses
    pixels off the screen, naming the screen's size."""

    x: int = Field(description="pixels from the left edge of the screenshot")
    y: int = Field(description="pixels from the top edge of the screenshot")


class TypeArgs(ToolArgs):
    """Arguments of `type`."""

    text: str = Field(description="the text the focused field should hold")


class ScrollArgs(ToolArgs):
    """Arguments of `scroll`."""

    # A plain string, checked by the tool, so an unknown direction is a ToolError naming the choices.
    direction: str = Field(description="up or down")


@dataclass
class GuiState(State):
    """The widgets' values, the scroll position, focus, the open list and how the form was left."""

    values: dict[str, Any] = field(default_factory=dict)  # widget id -> text, checked flag or chosen option
    scroll: int = 0  # pixels of the form scrolled out above the view
    focus: str | None = None  # the text field that receives `type`
    open: str | None = None  # the dropdown whose list is showing
    seen: bool = True  # whether the agent has looked since the view last moved (the prompt shows it)
    outcome: str | None = None  # "submitted" or "cancelled"


class Gui(Bootcamp[GuiParams, GuiState]):
    """Fill in a form on an app screen by clicking, typing and scrolling, then submit it.

    The screen comes as a screenshot (or, in text mode, as a list of widgets with their pixel boxes
    (left, top, right, bottom)). `click(x, y)` clicks a pixel: a text field takes the focus, a checkbox
    (or its label) toggles, a dropdown opens its list and a click on an option chooses it (any other click
    just closes the list). `type(text)` replaces the text of the focused field. The form may be taller
    than the screen: `scroll` moves it up or down, and `screenshot` shows the current screen. Change only
    what the goal asks, then click the Submit button in the footer, or call `submit`, which does the same
    (Cancel abandons the form).

    Developers: the title bar and footer stay fixed while the form scrolls by half a view per call. The
    episode ends on the Submit or Cancel button or the `submit` tool (the final tool the interface needs;
    the oracle clicks the button). Levels add widgets, dropdowns, prefilled text, decoy buttons (Reset
    restores the initial form) and forms taller than the screen. Every target starts different from its
    goal value, so submitting at once scores 0. Reward is 1 when every target is right, nothing else
    changed and the form was submitted; otherwise half the share of right fields among the targets and
    the changed non-targets, so below 0.5 (reasons `wrong_text`, `wrong_checkbox`, `wrong_dropdown`,
    `collateral_change`, `not_submitted`, `cancelled`).
    """

    name = "gui"
    version = "1"
    modality = "vision"
    params_model = GuiParams
    state_model = GuiState
    wrong_answer_bound = 0.5
    levels = {
        1: GuiParams(level=1, fields=3, targets=2, kinds="tc"),
        2: GuiParams(level=2, fields=5, targets=3, kinds="tcd", options=4, decoy_buttons=1),
        3: GuiParams(level=3, fields=8, targets=4, kinds="tcd", options=6, prefilled=True, decoy_buttons=2,
                     screen_height=360),
        4: GuiParams(level=4, fields=12, targets=6, kinds="tcd", options=8, prefilled=True, decoy_buttons=3,
                     screen_width=440, screen_height=300),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: GuiParams, rng: random.Random) -> dict[str, Any]:
        w, h = params.screen_width, params.screen_height
        pools = [(k, label) for k in params.kinds for label in (_TEXT if k == "t" else _CHECK if k == "c" else _DROP)]
        widgets, y = [], PAD
        for i, (k, label) in enumerate(rng.sample(pools, params.fields)):
            kind = _KINDS[k]
            widget: dict[str, Any] = {"id": f"w{i}", "kind": kind, "label": label}
            if kind == "checkbox":
                widget |= {"box": [LABEL_X, y + 9, LABEL_X + 18, y + 27], "initial": rng.random() < 0.5,
                           "hit": [LABEL_X, y + 6, LABEL_X + 26 + text_width(label, FONT), y + 30]}
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
        return {"title": rng.choice(_TITLES), "image_size": [w, h], "content_height": y + PAD,
                "max_scroll": max(0, y + PAD - view), "scroll_step": view // 2, "widgets": widgets,
                "buttons": _footer(w, h, decoys), "targets": targets, "goal": _goal(widgets, targets)}

    def prompt(self, instance: Instance[GuiParams]) -> list[dict[str, Any]]:
        state = self.new_state(instance)
        return self.chat(user_content(instance.params.observation, instance.data["goal"],
                                      lambda: render(instance, state), lambda: describe(instance, state)))

    def new_state(self, instance: Instance[GuiParams]) -> GuiState:
        return GuiState(values={w["id"]: w["initial"] for w in instance.data["widgets"]})

    def max_turns(self, instance: Instance[GuiParams]) -> int:
        d = instance.data  # twice the oracle's worst case: 3 calls a target, a scroll and a look per half view
        return 2 * (3 * len(d["targets"]) + 2 * (d["max_scroll"] // d["scroll_step"] + 1) + 1) + 10

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def click(self, instance: Instance, state: GuiState, args: ClickArgs) -> Observation:
        """Click the pixel (x, y) of the screenshot: focus a field, toggle a checkbox, open a list, press a button."""
        w, h = instance.data["image_size"]
        for axis, value, size in (("x", args.x, w), ("y", args.y, h)):
            if not 0 <= value < size:
                raise ToolError(f"{axis} = {value} is off the screen; expected 0 <= {axis} < {size} "
                                f"(the screen is {w}x{h})")
        if state.open is not None:
            dropdown = _widgets(instance)[state.open]
            state.open = None
            for option, box in _option_boxes(instance, dropdown, state.scroll):
                if _inside(box, args.x, args.y):
                    state.values[dropdown["id"]] = option
                    return Observation(f'Chose "{option}" in "{dropdown["label"]}".')
            return Observation(f'Closed the "{dropdown["label"]}" list without choosing.')
        if args.y < HEADER:
            return Observation("That is the title bar; nothing happened.")
        if args.y >= h - FOOTER:
            button = next((b for b in instance.data["buttons"] if _inside(b["box"], args.x, args.y)), None)
            return self._press(instance, state, button, args)
        for widget in instance.data["widgets"]:
            if _inside(_on_screen(widget["hit"], state.scroll), args.x, args.y):
                return self._activate(state, widget)
        state.focus = None
        return Observation(f"Nothing to click at ({args.x}, {args.y}).")

    @tool
    def type(self, instance: Instance, state: GuiState, args: TypeArgs) -> Observation:
        """Replace the text of the focused text field with `text`."""
        if state.focus is None:
            raise ToolError("no text field has focus; click a text field first")
        widget = _widgets(instance)[state.focus]
        if not args.text.isprintable():
            raise ToolError(f"text {_clip(args.text)!r} holds a line break or control character; "
                            "expected one line of printable text")
        room = widget["box"][2] - widget["box"][0] - 16
        # the length test first, so a huge text is refused before anything measures it
        if len(args.text) * 4 > room or text_width(args.text, FONT) > room:
            raise ToolError(f"text {_clip(args.text)!r} ({len(args.text)} characters) is wider than the "
                            f"\"{widget['label']}\" field; expected at most about {room // 8} characters")
        state.values[widget["id"]] = args.text
        return Observation(f'The "{widget["label"]}" field now reads "{args.text}".')

    @tool
    def scroll(self, instance: Instance, state: GuiState, args: ScrollArgs) -> Observation:
        """Scroll the form up or down by half a screen."""
        if args.direction not in ("up", "down"):
            raise ToolError(f"unknown direction {args.direction[:40]!r}; expected up or down")
        d = instance.data
        step = d["scroll_step"] if args.direction == "down" else -d["scroll_step"]
        new = min(max(state.scroll + step, 0), d["max_scroll"])
        if new == state.scroll:
            return Observation(f"Already at the {'bottom' if step > 0 else 'top'}; nothing moved.")
        state.scroll, state.open, state.seen = new, None, False
        return Observation(f"Scrolled {args.direction}. Take a screenshot to see the screen.")

    @tool
    def screenshot(self, instance: Instance, state: GuiState, args: NoArgs) -> Observation:
        """Show the current screen."""
        state.seen = True
        return observe(instance.params.observation, "The current screen:", lambda: render(instance, state),
                       lambda: describe(instance, state))

    @tool(final=True)
    def submit(self, instance: Instance, state: GuiState, args: NoArgs) -> Observation:
        """Submit the form as it is, as its Submit button does. This ends the episode."""
        state.outcome, state.open = "submitted", None
        return Observation("The form was submitted.", final=True)

    def _activate(self, state: GuiState, widget: dict[str, Any]) -> Observation:
        label = widget["label"]
        if widget["kind"] == "text":
            state.focus = widget["id"]
            return Observation(f'The "{label}" field has focus; `type` replaces its text.')
        state.focus = None
        if widget["kind"] == "checkbox":
            state.values[widget["id"]] = not state.values[widget["id"]]
            return Observation(f'{"Checked" if state.values[widget["id"]] else "Unchecked"} "{label}".')
        state.open, state.seen = widget["id"], False
        return Observation(f'Opened the "{label}" list. Take a screenshot to see its options.')

    def _press(self, instance: Instance, state: GuiState, button: dict[str, Any] | None,
               args: ClickArgs) -> Observation:
        if button is None:
            state.focus = None
            return Observation(f"Nothing to click at ({args.x}, {args.y}).")
        if button["id"] in ("submit", "cancel"):
            state.outcome = "submitted" if button["id"] == "submit" else "cancelled"
            return Observation(f"The form was {state.outcome}.", final=True)
        if button["id"] == "reset":
            state.values, state.focus = {w["id"]: w["initial"] for w in instance.data["widgets"]}, None
            return Observation("The form was reset to its initial values.")
        if button["id"] == "save_draft":
            return Observation("Draft saved.")
        return Observation("Help: fill in the fields the goal names, then click Submit.")

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: GuiState, transcript: Any) -> Score:
        targets, widgets = instance.data["targets"], _widgets(instance)
        wrong = [i for i, v in targets.items() if state.values[i] != v]
        changed = [w["id"] for w in instance.data["widgets"]
                   if w["id"] not in targets and state.values[w["id"]] != w["initial"]]
        details = {"wrong": [widgets[i]["label"] for i in wrong], "changed": [widgets[i]["label"] for i in changed]}
        if state.outcome == "submitted" and not wrong and not changed:
            return Score(1.0, True, details)
        if state.outcome == "cancelled":
            return Score(0.0, False, {**details, "reason": "cancelled"})
        right = len(targets) - len(wrong)
        reason = (f"wrong_{widgets[wrong[0]]['kind']}" if wrong else "collateral_change" if changed
                  else "not_submitted")
        return Score(0.5 * right / (len(targets) + len(changed)), False, {**details, "reason": reason})

    # -- oracle ----------------------------------------------------------------------------------

    def oracle(self, instance: Instance, state: GuiState) -> Action:
        d, widgets = instance.data, _widgets(instance)
        if state.open is not None:
            want = d["targets"].get(state.open)
            if want is None or state.values[state.open] == want:
                return _click_box((0, 0, d["image_size"][0], HEADER))  # close the list on the title bar
            if not state.seen:
                return Action("screenshot", {})
            boxes = dict(_option_boxes(instance, widgets[state.open], state.scroll))
            return _click_box(boxes[want])
        if not state.seen:
            return Action("screenshot", {})
        pending = next((widgets[i] for i, v in d["targets"].items() if state.values[i] != v), None)
        if pending is None:
            return _click_box(next(b for b in d["buttons"] if b["id"] == "submit")["box"])
        top, bottom = pending["box"][1], pending["box"][3]
        view = d["image_size"][1] - HEADER - FOOTER
        if top < state.scroll or bottom > state.scroll + view:
            return Action("scroll", {"direction": "up" if top < state.scroll else "down"})
        if pending["kind"] == "text" and state.focus == pending["id"]:
            return Action("type", {"text": d["targets"][pending["id"]]})
        return _click_box(_on_screen(pending["box"], state.scroll))

    def perturb(self, instance: Instance, state: GuiState, action: Action, rng: random.Random) -> Action:
        w, h = instance.data["image_size"]
        if action.name == "click":  # a near miss by 15-40 px
            dx, dy = (rng.choice([-1, 1]) * rng.randint(15, 40) for _ in range(2))
            return Action("click", {"x": min(max(action.arguments["x"] + dx, 0), w - 1),
                                    "y": min(max(action.arguments["y"] + dy, 0), h - 1)})
        if action.name == "type" and len(action.arguments["text"]) > 1:  # a typo: the last letter dropped
            return Action("type", {"text": action.arguments["text"][:-1]})
        return action

    def wrong_answer(self, instance: Instance, state: GuiState, rng: random.Random) -> Action | None:
        if not all(state.values[i] == v for i, v in instance.data["targets"].items()):
            return Action("submit", {})  # an unfinished form: partial credit below 0.5
        if state.open is not None:
            return None  # a finished form can only be abandoned, and a click now would just close the list
        return _click_box(next(b for b in instance.data["buttons"] if b["id"] == "cancel")["box"])


# -- geometry ----------------------------------------------------------------------------------------


def _widgets(instance: Instance) -> dict[str, dict[str, Any]]:
    return {w["id"]: w for w in instance.data["widgets"]}


def _on_screen(box: list[int], scroll: int) -> tuple[int, int, int, int]:
    """A box in form coordinates moved to screen coordinates."""
    return box[0], box[1] + HEADER - scroll, box[2], box[3] + HEADER - scroll


def _inside(box: Any, x: int, y: int) -> bool:
    return box[0] <= x < box[2] and box[1] <= y < box[3]


def _option_boxes(instance: Instance, dropdown: dict[str, Any], scroll: int) -> list[tuple[str, tuple[int, ...]]]:
    """Where an open list's options are: below the box, else above it, else from the title bar down."""
    x0, y0, x1, y1 = _on_screen(dropdown["box"], scroll)
    height = OPTION_PX * len(dropdown["options"])
    top = y1 if y1 + height <= instance.data["image_size"][1] else max(HEADER, y0 - height)
    return [(o, (x0, top + i * OPTION_PX, x1, top + (i + 1) * OPTION_PX)) for i, o in enumerate(dropdown["options"])]


def _click_box(box: Any) -> Action:
    return Action("click", {"x": (box[0] + box[2]) // 2, "y": (box[1] + box[3]) // 2})


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _goal(widgets: list[dict[str, Any]], targets: dict[str, Any]) -> str:
    by_id = {w["id"]: w for w in widgets}
    steps = [{"text": f'set "{by_id[i]["label"]}" to "{v}"', "dropdown": f'choose "{v}" in "{by_id[i]["label"]}"',
              "checkbox": f'{"check" if v else "uncheck"} "{by_id[i]["label"]}"'}[by_id[i]["kind"]]
             for i, v in targets.items()]
    return f"Fill in the form: {'; '.join(steps)}. Leave everything else as it is, then click Submit."


# -- observations ------------------------------------------------------------------------------------


def _shown(value: str | None) -> str:
    """The text a field or dropdown shows: its value, or the placeholder of a dropdown with no choice."""
    return "Select..." if value is None else value


def _in_view(widget: dict[str, Any], scroll: int, height: int) -> bool:
    """Whether any of the widget's clickable box shows between the title bar and the footer."""
    box = _on_screen(widget["hit"], scroll)
    return box[3] > HEADER and box[1] < height - FOOTER


def render(instance: Instance[GuiParams], state: GuiState) -> bytes:
    """The screen of ``instance`` in ``state`` as PNG bytes of ``image_size``."""
    d = instance.data
    w, h = d["image_size"]
    image = Image.new("RGB", (w, h), _BACK)
    draw = ImageDraw.Draw(image)
    for widget in (wd for wd in d["widgets"] if _in_view(wd, state.scroll, h)):
        x0, y0, x1, y1 = _on_screen(widget["box"], state.scroll)
        value, cy = state.values[widget["id"]], (y0 + y1) // 2
        if widget["kind"] == "checkbox":
            draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=_BLUE if value else _WHITE, outline=_EDGE)
            if value:
                draw.line((x0 + 4, cy, x0 + 8, y1 - 5, x1 - 4, y0 + 4), fill=_WHITE, width=2)
            draw_text(image, (x1 + 8, cy), widget["label"], FONT, _INK, "lm")
            continue
        focused = state.focus == widget["id"]
        draw_text(image, (LABEL_X, cy), widget["label"], FONT, _INK, "lm")
        draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=_WHITE, outline=_BLUE if focused else _EDGE,
                       width=2 if focused else 1)
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
        dropdown = _widgets(instance)[state.open]
        for option, box in _option_boxes(instance, dropdown, state.scroll):
            chosen = option == state.values[dropdown["id"]]
            draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=_CHOSEN if chosen else _WHITE,
                           outline=_EDGE)
            draw_text(image, (box[0] + 8, (box[1] + box[3]) // 2), option, FONT, _INK, "lm")
    return encode_png(image, _COLORS)


def describe(instance: Instance[GuiParams], state: GuiState) -> str:
    """The text-mode screen: every widget in view with its clickable box and state, as drawn."""
    d = instance.data
    w, h = d["image_size"]
    view = h - HEADER - FOOTER
    more = [s for s, c in (("scroll up for more", state.scroll > 0),
                           ("scroll down for more", state.scroll < d["max_scroll"])) if c]
    lines = [f"Screen {w}x{h} pixels; boxes are (left, top, right, bottom), right and bottom exclusive.",
             f'Title bar (0, 0, {w}, {HEADER}): "{d["title"]}".',
             f"Form area (0, {HEADER}, {w}, {h - FOOTER}) shows form pixels {state.scroll}-"
             f"{min(state.scroll + view, d['content_height'])} of {d['content_height']}"
             + (f" ({'; '.join(more)})." if more else ".")]
    for widget in (wd for wd in d["widgets"] if _in_view(wd, state.scroll, h)):
        box, value = _on_screen(widget["hit"], state.scroll), state.values[widget["id"]]
        if box[1] < HEADER or box[3] > h - FOOTER:  # the screenshot shows too little of it to read
            lines.append(f"partly hidden widget {box}; scroll to see it")
            continue
        shown = ("checked" if value else "unchecked") if widget["kind"] == "checkbox" else f'"{_shown(value)}"'
        lines.append(f'{widget["kind"].replace("text", "text field")} "{widget["label"]}" {box}: {shown}'
                     + (" [focused]" if state.focus == widget["id"] else ""))
    lines.append("Footer buttons: " + "; ".join(f'"{b["label"]}" {tuple(b["box"])}' for b in d["buttons"]) + ".")
    if state.open is not None:
        dropdown = _widgets(instance)[state.open]
        options = ", ".join(f'"{o}" {box}' for o, box in _option_boxes(instance, dropdown, state.scroll))
        lines.append(f'Open list of "{dropdown["label"]}": {options}.')
    return "\n".join(lines)
