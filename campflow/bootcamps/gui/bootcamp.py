"""gui: fill in a rendered app form by clicking pixels, typing and scrolling, then submit it."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from campflow.bootcamps.base import Action, Bootcamp, Exemptions, Instance, NoArgs, Observation, Score, ToolArgs, tool
from campflow.bootcamps.demonstration import messages_text, tool_calls
from campflow.bootcamps.gui.screen import (
    FONT,
    FOOTER,
    HEADER,
    GuiParams,
    GuiState,
    describe,
    inside,
    layout,
    on_screen,
    option_boxes,
    render,
    widgets_by_id,
)
from campflow.bootcamps.messages import clip
from campflow.bootcamps.rendering import observe, text_width, user_content
from campflow.errors import ToolError


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


_BOX = re.compile(r"\((\d+), (\d+), (\d+), (\d+)\)")  # a box as the screen lists it


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
    # pixels are not names: a click is checked against the boxes the screen showed (ungrounded_arguments)
    grounding = Exemptions(fields=frozenset({("click", "x"), ("click", "y")}))
    modality = "vision"
    params_model = GuiParams
    state_model = GuiState
    wrong_answer_bound = 0.5
    levels = {
        1: GuiParams(level=1, fields=3, targets=2, kinds="tc"),
        2: GuiParams(level=2, fields=5, targets=3, kinds="tcd", options=4, decoy_buttons=1),
        3: GuiParams(
            level=3, fields=8, targets=4, kinds="tcd", options=6, prefilled=True, decoy_buttons=2, screen_height=360
        ),
        4: GuiParams(
            level=4,
            fields=12,
            targets=6,
            kinds="tcd",
            options=8,
            prefilled=True,
            decoy_buttons=3,
            screen_width=440,
            screen_height=300,
        ),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: GuiParams, rng: random.Random) -> dict[str, Any]:
        return layout(params, rng)

    def prompt(self, instance: Instance[GuiParams]) -> list[dict[str, Any]]:
        state = self.new_state(instance)
        return self.chat(
            user_content(
                instance.params.observation,
                instance.data["goal"],
                lambda: render(instance, state),
                lambda: describe(instance, state),
            )
        )

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
                raise ToolError(
                    f"{axis} = {value} is off the screen; expected 0 <= {axis} < {size} (the screen is {w}x{h})"
                )
        if state.open is not None:
            dropdown = widgets_by_id(instance)[state.open]
            state.open = None
            for option, box in option_boxes(instance, dropdown, state.scroll):
                if inside(box, args.x, args.y):
                    state.values[dropdown["id"]] = option
                    return Observation(f'Chose "{option}" in "{dropdown["label"]}".')
            return Observation(f'Closed the "{dropdown["label"]}" list without choosing.')
        if args.y < HEADER:
            return Observation("That is the title bar; nothing happened.")
        if args.y >= h - FOOTER:
            button = next((b for b in instance.data["buttons"] if inside(b["box"], args.x, args.y)), None)
            return self._press(instance, state, button, args)
        for widget in instance.data["widgets"]:
            if inside(on_screen(widget["hit"], state.scroll), args.x, args.y):
                return self._activate(state, widget)
        state.focus = None
        return Observation(f"Nothing to click at ({args.x}, {args.y}).")

    @tool
    def type(self, instance: Instance, state: GuiState, args: TypeArgs) -> Observation:
        """Replace the text of the focused text field with `text`."""
        if state.focus is None:
            raise ToolError("no text field has focus; click a text field first")
        widget = widgets_by_id(instance)[state.focus]
        if not args.text.isprintable():
            raise ToolError(
                f"text {clip(args.text, 43)!r} holds a line break or control character; "
                "expected one line of printable text"
            )
        room = widget["box"][2] - widget["box"][0] - 16
        # the length test first, so a huge text is refused before anything measures it
        if len(args.text) * 4 > room or text_width(args.text, FONT) > room:
            raise ToolError(
                f"text {clip(args.text, 43)!r} ({len(args.text)} characters) is wider than the "
                f'"{widget["label"]}" field; expected at most about {room // 8} characters'
            )
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
        return observe(
            instance.params.observation,
            "The current screen:",
            lambda: render(instance, state),
            lambda: describe(instance, state),
        )

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

    def _press(
        self, instance: Instance, state: GuiState, button: dict[str, Any] | None, args: ClickArgs
    ) -> Observation:
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

    def ungrounded_arguments(self, instance: Instance, transcript: Sequence[Mapping[str, Any]]) -> list[str]:
        """The generic check, plus clicks outside every box the most recent screen (prompt, screenshot or
        action result) showed."""
        problems, boxes = super().ungrounded_arguments(instance, transcript), []
        for message in transcript:
            if message.get("role") in ("user", "tool"):
                boxes = [tuple(map(int, b)) for b in _BOX.findall(messages_text(message))] or boxes
            for name, args in tool_calls([message]) if message.get("role") == "assistant" else ():
                x, y = args.get("x"), args.get("y")
                inside = isinstance(x, int) and isinstance(y, int)
                if name == "click" and not (inside and any(a <= x < c and b <= y < d for a, b, c, d in boxes)):
                    problems.append(f"click ({x}, {y}) hits no box shown")
        return problems

    def score(self, instance: Instance, state: GuiState, transcript: Any) -> Score:
        targets, widgets = instance.data["targets"], widgets_by_id(instance)
        wrong = [i for i, v in targets.items() if state.values[i] != v]
        changed = [
            w["id"]
            for w in instance.data["widgets"]
            if w["id"] not in targets and state.values[w["id"]] != w["initial"]
        ]
        details = {"wrong": [widgets[i]["label"] for i in wrong], "changed": [widgets[i]["label"] for i in changed]}
        if state.outcome == "submitted" and not wrong and not changed:
            return Score(1.0, True, details)
        if state.outcome == "cancelled":
            return Score(0.0, False, {**details, "reason": "cancelled"})
        right = len(targets) - len(wrong)
        reason = f"wrong_{widgets[wrong[0]]['kind']}" if wrong else "collateral_change" if changed else "not_submitted"
        return Score(0.5 * right / (len(targets) + len(changed)), False, {**details, "reason": reason})

    # -- oracle ----------------------------------------------------------------------------------

    # demonstrate() is the oracle: it takes a screenshot whenever the screen changed unseen (after a
    # scroll or opening a list) and clicks only boxes the last screen showed, typing values the goal states.
    def oracle(self, instance: Instance, state: GuiState) -> Action:
        d, widgets = instance.data, widgets_by_id(instance)
        if state.open is not None:
            want = d["targets"].get(state.open)
            if want is None or state.values[state.open] == want:
                return _click_box((0, 0, d["image_size"][0], HEADER))  # close the list on the title bar
            if not state.seen:
                return Action("screenshot", {})
            boxes = dict(option_boxes(instance, widgets[state.open], state.scroll))
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
        return _click_box(on_screen(pending["box"], state.scroll))

    def perturb(self, instance: Instance, state: GuiState, action: Action, rng: random.Random) -> Action:
        w, h = instance.data["image_size"]
        if action.name == "click":  # a near miss by 15-40 px
            dx, dy = (rng.choice([-1, 1]) * rng.randint(15, 40) for _ in range(2))
            return Action(
                "click",
                {
                    "x": min(max(action.arguments["x"] + dx, 0), w - 1),
                    "y": min(max(action.arguments["y"] + dy, 0), h - 1),
                },
            )
        if action.name == "type" and len(action.arguments["text"]) > 1:  # a typo: the last letter dropped
            return Action("type", {"text": action.arguments["text"][:-1]})
        return action

    def wrong_answer(self, instance: Instance, state: GuiState, rng: random.Random) -> Action | None:
        if not all(state.values[i] == v for i, v in instance.data["targets"].items()):
            return Action("submit", {})  # an unfinished form: partial credit below 0.5
        if state.open is not None:
            return None  # a finished form can only be abandoned, and a click now would just close the list
        return _click_box(next(b for b in instance.data["buttons"] if b["id"] == "cancel")["box"])


# -- helpers ----------------------------------------------------------------------------------------


def _click_box(box: Any) -> Action:
    return Action("click", {"x": (box[0] + box[2]) // 2, "y": (box[1] + box[3]) // 2})
