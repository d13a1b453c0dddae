"""The vision bootcamps (gridworld, chart, gui): images, text mode, hostile tool calls and no-op bounds."""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import json
import re

import pytest
from PIL import Image

from campflow.agents.base import Policy, PolicyReply
from campflow.agents.oracle import OraclePolicy, native_call
from campflow.bootcamps import registry
from campflow.bootcamps.arithmetic import evaluate
from campflow.bootcamps.base import Action, Bootcamp, Instance
from campflow.errors import InvalidParamsError, ToolError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from tests.conftest import run_cli

VISION = ["gridworld", "chart", "gui"]
SEEDS = range(25)
# What a policy that calls the final tool at once earns, at most, per bootcamp.
NOOP_BOUND = {"gridworld": 0.0, "chart": 0.0, "gui": 0.0}


def _levels(name: str) -> list[int]:
    return sorted(registry.make(name).levels)


def _text_mode(b: Bootcamp, level: int, seed: int) -> Instance:
    return b.generate({**b.levels[level].model_dump(), "observation": "text"}, seed)


def _images(transcript: list[dict]) -> list[bytes]:
    """Every PNG in a transcript: prompt images and images returned by tools."""
    out = []
    for msg in transcript:
        if isinstance(msg.get("content"), list):
            for part in msg["content"]:
                if part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    assert url.startswith("data:image/png;base64,")
                    out.append(base64.b64decode(url.split(",", 1)[1]))
    return out


def _decode(png: bytes) -> Image.Image:
    Image.open(io.BytesIO(png)).verify()  # checks chunk CRCs and structure; the image is unusable afterwards
    image = Image.open(io.BytesIO(png))
    image.load()
    assert image.format == "PNG"
    return image


def _play(specs: list[EpisodeSpec], policy: Policy = OraclePolicy()):
    return asyncio.run(run_episodes(specs, policy))


def _declared_size(b: Bootcamp, inst: Instance) -> tuple[int, int]:
    p = inst.params
    if b.name == "gridworld":
        from campflow.bootcamps.gridworld.view import image_size

        return image_size(p)
    return (p.width, p.height) if b.name == "chart" else (p.screen_width, p.screen_height)


# -- images ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VISION)
def test_every_image_in_oracle_episodes_is_a_valid_png_of_the_declared_size(name: str) -> None:
    b = registry.make(name)
    for level in _levels(name):
        instances = [b.generate(level, s) for s in SEEDS]
        episodes = _play([EpisodeSpec(b, i) for i in instances])
        for inst, ep in zip(instances, episodes):
            assert ep.termination == Termination.SOLVED, (inst.seed, ep.error)
            images = _images(ep.transcript)
            assert images, "the prompt carries the first image"
            size = _declared_size(b, inst)
            assert tuple(inst.data["image_size"]) == size
            for png in images:
                assert _decode(png).size == size, (name, level, inst.seed)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("gridworld", {"width": 7, "height": 5, "cell_px": 17}),
        ("gridworld", {"cell_px": 17, "show_coordinates": False}),
        ("chart", {"width": 361, "height": 281}),
        ("gui", {"screen_width": 401, "screen_height": 241, "fields": 6}),
    ],
)
def test_odd_image_sizes_decode_too(name: str, params: dict) -> None:
    b = registry.make(name)
    for seed in range(10):
        inst = b.generate({"level": 5, **params}, seed)
        (ep,) = _play([EpisodeSpec(b, inst)])
        assert ep.termination == Termination.SOLVED
        assert {_decode(png).size for png in _images(ep.transcript)} == {tuple(inst.data["image_size"])}


def test_gridworld_sends_a_new_image_after_every_move() -> None:
    b = registry.make("gridworld")
    for level in _levels("gridworld"):
        inst = b.generate(level, 3)
        (ep,) = _play([EpisodeSpec(b, inst)])
        calls = [c["function"]["name"] for m in ep.transcript for c in m.get("tool_calls") or []]
        assert len(_images(ep.transcript)) == 1 + len(calls) - 1  # the prompt, then every call but submit


def test_gridworld_image_pixels_show_the_identity_it_was_drawn_from() -> None:
    b = registry.make("gridworld")
    for seed in SEEDS:
        inst = b.generate(1, seed)  # level 1: coordinate labels on, so cells start after an 18 px margin
        d, cell, margin = inst.data, inst.params.cell_px, 18
        image = _decode(_images(b.prompt(inst))[0]).convert("RGB")
        objects = {tuple(d["start"]), tuple(d["goal"])} | {tuple(k["pos"]) for k in d["keys"]}
        for y, row in enumerate(d["grid"]):
            for x, ch in enumerate(row):
                pixel = image.getpixel((margin + x * cell + cell // 2, margin + y * cell + cell // 2))
                if (x, y) == tuple(d["goal"]):
                    assert pixel == (46, 160, 67)
                elif (x, y) == tuple(d["start"]):
                    assert pixel == (20, 20, 20)
                elif (x, y) not in objects:
                    assert pixel == ((70, 70, 80) if ch == "#" else (255, 255, 255)), (seed, x, y)


def test_gui_checkbox_pixels_match_their_state() -> None:
    b = registry.make("gui")
    from campflow.bootcamps.gui.screen import HEADER, render

    for seed in SEEDS:
        inst = b.generate(2, seed)
        state = b.new_state(inst)
        image = _decode(render(inst, state)).convert("RGB")
        for w in inst.data["widgets"]:
            x0, y0 = w["box"][0], w["box"][1] + HEADER
            if w["kind"] == "checkbox" and y0 + 3 < inst.data["image_size"][1] - 48:
                checked = state.values[w["id"]]
                assert image.getpixel((x0 + 3, y0 + 3)) == ((40, 110, 220) if checked else (255, 255, 255))


def test_cli_sample_writes_the_gui_screenshot(tmp_path) -> None:
    out = run_cli("bootcamps", "sample", "gui", "--seed", "3", "--out", "screen.png", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    inst = registry.make("gui").generate(None, 3)
    assert _decode((tmp_path / "screen.png").read_bytes()).size == tuple(inst.data["image_size"])


# -- text mode --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VISION)
def test_text_mode_is_solved_by_the_oracle_without_any_image(name: str) -> None:
    b = registry.make(name)
    for level in _levels(name):
        instances = [_text_mode(b, level, s) for s in SEEDS]
        for inst, ep in zip(instances, _play([EpisodeSpec(b, i) for i in instances])):
            assert ep.termination == Termination.SOLVED, (level, inst.seed, ep.error)
            assert _images(ep.transcript) == []
            assert isinstance(ep.transcript[1]["content"], str)


def test_gridworld_text_map_shows_walls_objects_and_you_where_the_identity_has_them() -> None:
    b = registry.make("gridworld")
    letters = {"red": "r", "blue": "b", "yellow": "y", "purple": "p", "orange": "o"}
    for level in _levels("gridworld"):
        for seed in SEEDS:
            inst = _text_mode(b, level, seed)
            d, p = inst.data, inst.params
            lines = b.prompt(inst)[1]["content"].split("Map:\n", 1)[1].splitlines()
            if p.show_coordinates:
                assert lines[0].strip() == "".join(str(x % 10) for x in range(p.width))
                lines = [ln[3:] for ln in lines[1 : p.height + 1]]
            rows = lines[: p.height]
            expected = [list(r) for r in d["grid"]]
            for k in d["keys"]:
                expected[k["pos"][1]][k["pos"][0]] = letters[k["color"]]
            for door in d["doors"]:
                expected[door["pos"][1]][door["pos"][0]] = letters[door["color"]].upper()
            expected[d["goal"][1]][d["goal"][0]] = "*"
            expected[d["start"][1]][d["start"][0]] = "@"
            assert rows == ["".join(r) for r in expected], (level, seed)
            assert "Carrying: nothing" in b.prompt(inst)[1]["content"]


def test_chart_text_table_holds_exactly_the_values_the_chart_was_drawn_from() -> None:
    b = registry.make("chart")
    for level in _levels("chart"):
        for seed in SEEDS:
            inst = _text_mode(b, level, seed)
            d = inst.data
            text = b.prompt(inst)[1]["content"]
            assert d["question"] in text
            header = " | ".join(["category", *[s["name"] for s in d["series"]]])
            rows = text.split(header + "\n", 1)[1].splitlines()
            for i, cat in enumerate(d["categories"]):
                cells = rows[i].split(" | ")
                assert cells[0] == cat
                assert [float(c) for c in cells[1:]] == [s["values"][i] for s in d["series"]], (level, seed)
            assert (f"Footnote: {d['footnote']}" in text) == bool(d["footnote"])


_WIDGET_LINE = re.compile(
    r'^(?:(text field|checkbox|dropdown) "([^"]+)"|partly hidden widget) '
    r'\((\d+), (-?\d+), (\d+), (-?\d+)\)(?:: (checked|unchecked|"[^"]*")( \[focused\])?|; .*)$'
)


def _check_screen(inst: Instance, state, text: str) -> None:
    """Every widget in view is listed with its clickable box on screen, and its state where fully shown."""
    from campflow.bootcamps.gui.screen import FOOTER, HEADER

    d, h = inst.data, inst.data["image_size"][1]
    lines = text.splitlines()
    parsed = [m.groups() for m in map(_WIDGET_LINE.match, lines) if m]
    shift = HEADER - state.scroll  # form pixels to screen pixels
    boxes = {w["id"]: [w["hit"][0], w["hit"][1] + shift, w["hit"][2], w["hit"][3] + shift] for w in d["widgets"]}
    in_view = [w for w in d["widgets"] if boxes[w["id"]][3] > HEADER and boxes[w["id"]][1] < h - FOOTER]
    assert len(parsed) == len(in_view), (inst.seed, state.scroll)
    for w, (kind, label, x0, y0, x1, y1, value, focused) in zip(in_view, parsed):
        box = boxes[w["id"]]
        assert [int(x0), int(y0), int(x1), int(y1)] == box
        if box[1] < HEADER or box[3] > h - FOOTER:  # cut off: the screenshot shows no label or value either
            assert kind is None
            continue
        assert (kind.split()[0], label, bool(focused)) == (w["kind"], w["label"], state.focus == w["id"])
        v = state.values[w["id"]]
        assert value == (
            ("checked" if v else "unchecked")
            if w["kind"] == "checkbox"
            else json.dumps("Select..." if v is None else v)
        )
    for button in d["buttons"]:
        assert f'"{button["label"]}" {tuple(button["box"])}' in text


def test_gui_text_screen_lists_the_widgets_in_view_with_their_boxes_and_state() -> None:
    b = registry.make("gui")
    for level in _levels("gui"):
        for seed in SEEDS:
            inst = _text_mode(b, level, seed)
            state = b.new_state(inst)
            _check_screen(inst, state, b.prompt(inst)[1]["content"])
            while not state.finished:  # and on every screenshot the oracle takes, scrolled or not
                action = b.oracle(inst, state)
                observation = b.apply(inst, state, action)
                if action.name == "screenshot":
                    _check_screen(inst, state, observation.text)


# -- the worlds' rules --------------------------------------------------------------------------------


def test_gridworld_doors_open_only_with_their_key_and_the_oracle_fetches_every_key() -> None:
    b = registry.make("gridworld")
    for level in (2, 3, 4):
        for seed in range(10):
            inst = b.generate(level, seed)
            state = b.new_state(inst)
            names = []
            while not state.finished:
                action = b.oracle(inst, state)
                if action.name == "unlock":
                    door = next(
                        d["color"]
                        for d in inst.data["doors"]
                        if d["color"] not in state.opened and d["color"] in state.held
                    )
                    bare = copy.deepcopy(state)
                    bare.held.remove(door)
                    with pytest.raises(ToolError, match=f"needs the {door} key"):
                        b.apply(inst, bare, action)
                b.apply(inst, state, action)
                names.append(action.name)
            assert names.count("unlock") == len(inst.data["doors"]) <= names.count("pick_up")
            assert b.score(inst, state, ()).success


def test_chart_answers_within_the_tolerance_score_one_and_others_zero_with_a_reason() -> None:
    b = registry.make("chart")
    for level in _levels("chart"):
        for seed in SEEDS:
            inst = b.generate(level, seed)
            expected, tol, step = inst.data["answer"], inst.params.tolerance, inst.data["axis"]["step"]
            numbers = inst.data["expression"].split(" ")
            misread = " ".join([str(float(numbers[0]) + step), *numbers[1:]])  # the first value a step too high
            a, b_ = float(numbers[0]), float(numbers[2])
            cases = [
                (expected * (1 + tol * 0.9), None),
                (-expected, "sign"),
                (evaluate(misread), "misread"),
                (expected * 7.3, "wrong_value"),
            ]
            if len(numbers) == 3:  # two values: the other operators on them are a wrong operation
                cases.append((a + b_ if numbers[1] != "+" else a * b_, "wrong_operation"))
            for answer, reason in cases:
                state = b.new_state(inst)
                b.apply(inst, state, Action("submit", {"answer": answer}))
                score = b.score(inst, state, ())
                if reason is None:
                    assert score.reward == 1.0 and score.success
                elif abs(answer - expected) > tol * expected:  # a misread can land inside the tolerance
                    assert score.reward == 0.0 and score.details["reason"] == reason, (inst.seed, answer, reason)


def test_gui_reset_restores_the_form_and_cancel_ends_it_with_nothing() -> None:
    b = registry.make("gui")
    inst = b.generate(4, 1)
    state = b.new_state(inst)
    while state.values == b.new_state(inst).values:  # play the oracle until the form has changed
        b.apply(inst, state, b.oracle(inst, state))
    buttons = {btn["id"]: btn["box"] for btn in inst.data["buttons"]}
    centre = {k: {"x": (v[0] + v[2]) // 2, "y": (v[1] + v[3]) // 2} for k, v in buttons.items()}
    b.apply(inst, state, Action("click", centre["reset"]))
    assert state.values == b.new_state(inst).values
    b.apply(inst, state, Action("click", centre["cancel"]))
    assert state.finished and b.score(inst, state, ()).reward == 0.0
    assert b.score(inst, state, ()).details["reason"] == "cancelled"


def test_gui_changing_a_field_outside_the_goal_costs_success() -> None:
    b = registry.make("gui")
    for seed in range(10):
        inst = b.generate(2, seed)
        state, _ = b.solve(inst)
        other = next(
            (w for w in inst.data["widgets"] if w["id"] not in inst.data["targets"] and w["kind"] == "checkbox"), None
        )
        if other is None:
            continue
        state.values[other["id"]] = not other["initial"]
        score = b.score(inst, state, ())
        assert not score.success and score.reward < 0.5 and score.details["reason"] == "collateral_change"


def test_gui_wrong_answers_mid_episode_earn_less_than_the_declared_bound() -> None:
    b = registry.make("gui")
    for seed in range(20):
        inst = b.generate(3, seed)
        for steps in range(0, 12, 3):
            state = b.new_state(inst)
            for _ in range(steps):
                b.apply(inst, state, b.oracle(inst, state))
            action = b.wrong_answer(inst, state, None)
            if action is None or state.finished:
                continue
            b.apply(inst, state, action)
            score = b.score(inst, state, ())
            assert state.finished and not score.success and score.reward < b.wrong_answer_bound


# -- hostile tool calls -------------------------------------------------------------------------------

LONG = "x" * 100_000


def _refused(b: Bootcamp, inst: Instance, state, name: str, arguments: dict, *fragments: str) -> None:
    """The call raises ToolError whose message has every fragment, and the world stays exactly as it was."""
    before = copy.deepcopy(state)
    args = b.tools(inst)[[t.name for t in b.tools(inst)].index(name)].args_model.model_validate(arguments)
    with pytest.raises(ToolError) as err:
        b.call(inst, state, name, args)
    for fragment in fragments:
        assert fragment in str(err.value), (str(err.value)[:300], fragment)
    assert len(str(err.value)) < 500, "a refusal must not echo a huge argument back"
    assert state == before


def test_gridworld_refuses_unknown_directions_walls_locked_doors_and_missing_keys() -> None:
    b = registry.make("gridworld")
    for seed in range(20):
        inst = b.generate(4, seed)
        state = b.new_state(inst)
        _refused(b, inst, state, "move", {"direction": "up"}, "'up'", "expected one of north, south, east, west")
        _refused(b, inst, state, "move", {"direction": LONG}, "unknown direction 'xxx", "expected one of")
        _refused(b, inst, state, "unlock", {"direction": "northwest"}, "'northwest'", "expected one of")
        _refused(b, inst, state, "pick_up", {}, "no key at", "stand on a key first")
        walls = [
            n
            for n, (dx, dy) in {"north": (0, -1), "south": (0, 1), "east": (1, 0), "west": (-1, 0)}.items()
            if inst.data["grid"][state.y + dy][state.x + dx] == "#"
        ]
        for direction in walls:
            _refused(b, inst, state, "move", {"direction": direction}, "is a wall")
            _refused(b, inst, state, "unlock", {"direction": direction}, "no door", "expected a direction")
        door = inst.data["doors"][0]
        state.x, state.y = door["pos"][0] - 1, door["pos"][1]  # beside the first door, without its key
        _refused(b, inst, state, "move", {"direction": "east"}, f"the {door['color']} door", "is locked")
        _refused(b, inst, state, "unlock", {"direction": "east"}, f"needs the {door['color']} key", "no keys")


def test_chart_refuses_huge_expressions_and_answers_that_no_chart_gives() -> None:
    b = registry.make("chart")
    inst = b.generate(3, 0)
    state = b.new_state(inst)
    _refused(b, inst, state, "calculate", {"expression": LONG}, "100000 characters", "at most 200")
    _refused(b, inst, state, "calculate", {"expression": "9 ** 999"}, "exponent 999", "at most 64")
    _refused(b, inst, state, "calculate", {"expression": "__import__('os')"}, "unsupported element")
    _refused(b, inst, state, "calculate", {"expression": "1 / 0"}, "division by zero")
    for answer in (1e300, -1e16, float("nan"), float("inf")):
        _refused(b, inst, state, "submit", {"answer": answer}, repr(answer), "expected a finite number")


def test_gui_refuses_off_screen_clicks_oversized_text_and_unknown_scrolls() -> None:
    b = registry.make("gui")
    for seed in range(10):
        inst = b.generate(4, seed)
        w, h = inst.data["image_size"]
        state = b.new_state(inst)
        for x, y, bad in (
            (-1, 5, "x = -1"),
            (5, -40, "y = -40"),
            (10**12, 5, f"x = {10**12}"),
            (w, 0, f"x = {w}"),
            (0, h, f"y = {h}"),
            (10**30, 10**30, "x = 1000000000000000000000"),
        ):
            _refused(
                b, inst, state, "click", {"x": x, "y": y}, bad, f"expected 0 <= {bad[0]} < ", f"the screen is {w}x{h}"
            )
        _refused(b, inst, state, "type", {"text": "hello"}, "no text field has focus", "click a text field first")
        _refused(b, inst, state, "scroll", {"direction": "sideways"}, "'sideways'", "expected up or down")
        _refused(b, inst, state, "scroll", {"direction": LONG}, "unknown direction 'xxx", "expected up or down")
        field = next(wd for wd in inst.data["widgets"] if wd["kind"] == "text")
        state.focus = field["id"]
        _refused(b, inst, state, "type", {"text": LONG}, "100000 characters", f'"{field["label"]}"', "expected at most")
        _refused(b, inst, state, "type", {"text": "two\nlines"}, "'two\\nlines'", "expected one line")


def test_huge_numbers_from_a_model_are_refused_naming_the_value() -> None:
    """Integers of any size reach the tool, which refuses them (above); a JSON float too large to be an
    integer is refused one step earlier, by argument validation, with the value in the message too."""
    from campflow.rollout.parsing import parse_turn

    b = registry.make("gui")
    inst = b.generate(1, 0)
    tools = {t.name: t for t in b.tools(inst)}
    call = parse_turn(
        "",
        [
            {
                "id": "c",
                "type": "function",
                "function": {"name": "click", "arguments": '{"x": 123456789012345678901234567890, "y": 5}'},
            }
        ],
        tools,
    ).calls[0]
    assert call.error is None
    _refused(b, inst, b.new_state(inst), "click", call.arguments.model_dump(), "x = 123456789012345678901234567890")
    call = parse_turn(
        "", [{"id": "c", "type": "function", "function": {"name": "click", "arguments": '{"x": 1e30, "y": 5}'}}], tools
    ).calls[0]
    assert call.error is not None and "x = 1e+30" in call.error


def test_the_footer_holds_every_button_at_the_narrowest_screen() -> None:
    from campflow.bootcamps.gui.screen import _DECOYS, _footer

    boxes = sorted(b["box"] for b in _footer(400, 240, _DECOYS))
    assert all(left[2] + 8 <= right[0] for left, right in zip(boxes, boxes[1:]))
    assert boxes[0][0] >= 0 and boxes[-1][2] <= 400


@pytest.mark.parametrize("name", VISION)
def test_noisy_oracle_episodes_end_as_model_failures_never_infra_errors(name: str) -> None:
    """Wrong steps, malformed calls and early wrong answers, in both modes, never break a bootcamp."""
    from campflow.agents.oracle import NoisyOraclePolicy

    b = registry.make(name)
    specs = [
        EpisodeSpec(b, b.generate({**b.levels[level].model_dump(), "observation": mode}, s))
        for level in _levels(name)
        for mode in ("image", "text")
        for s in range(10)
    ]
    episodes = _play(specs, NoisyOraclePolicy(p_wrong_move=0.3, p_malformed=0.1, p_wrong_answer=0.2, seed=1))
    assert all(e.termination.is_model_failure or e.termination == Termination.SOLVED for e in episodes)
    assert {Termination.SOLVED, Termination.WRONG_ANSWER} <= {e.termination for e in episodes}
    assert all(e.details.get("reason") for e in episodes if not e.success)


# -- no-op and wrong answers ----------------------------------------------------------------------------


class _FinalAtOnce(Policy):
    """Calls the bootcamp's final tool on the first turn, with a zero where it takes an answer."""

    model_id = "noop"

    async def respond(self, messages, tools, context) -> PolicyReply:
        final = next(t for t in context.bootcamp.tools(context.instance) if t.final)
        arguments = {k: 0 for k in final.args_model.model_fields}
        return PolicyReply(tool_calls=[native_call(Action(final.name, arguments), "call_0")])


@pytest.mark.parametrize("name", VISION)
def test_a_policy_that_ends_at_once_scores_at_most_the_noop_bound(name: str) -> None:
    b = registry.make(name)
    specs = [EpisodeSpec(b, b.generate(level, s)) for level in _levels(name) for s in SEEDS]
    episodes = _play(specs, _FinalAtOnce())
    assert {e.termination for e in episodes} == {Termination.WRONG_ANSWER}
    assert max(e.reward for e in episodes) <= NOOP_BOUND[name]


# -- params -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("gridworld", {"width": 6, "doors": 2}, "too narrow for 2 door"),
        ("chart", {"kind": "pie", "value_labels": False}, "expected value_labels = true"),
        ("chart", {"value_labels": False, "gridlines": False}, "expected gridlines = true"),
        ("chart", {"questions": ["series_difference"], "series": 1}, "expected series >= 2"),
        ("chart", {"categories": 8, "series": 3, "width": 360}, "too narrow for value labels"),
        ("gui", {"fields": 3, "targets": 5}, "expected targets <= fields"),
        ("gui", {"kinds": "tt"}, "repeats a letter"),
        ("gui", {"observation": "audio"}, "observation = 'audio'"),
    ],
)
def test_inconsistent_params_are_refused_with_the_reason(name: str, params: dict, message: str) -> None:
    with pytest.raises(InvalidParamsError, match=re.escape(message)):
        registry.make(name).params({"level": 1, **params})


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("gridworld", {"width": 13, "height": 5, "doors": 3, "spare_keys": 2, "wall_density": 0.35}),
        ("gridworld", {"width": 16, "height": 16, "wall_density": 0.35, "cell_px": 16}),
        ("chart", {"kind": "line", "categories": 8, "series": 3, "max_value": 10, "height": 280}),
        ("chart", {"kind": "pie", "categories": 6, "series": 3, "decimals": 1}),
        ("gui", {"fields": 14, "targets": 8, "kinds": "tcd", "options": 8, "screen_height": 240}),
    ],
)
def test_extreme_params_still_give_solvable_instances(name: str, params: dict) -> None:
    b = registry.make(name)
    for seed in range(40):
        inst = b.generate({"level": 5, **params}, seed)
        assert b.solve(inst)[1].success, (params, seed)
