"""The chart bootcamp's params and drawing: the knobs of a chart question, and how its chart is drawn
(a PNG) and described (text mode). Generation, the tools and the reward live in campflow.bootcamps.chart.bootcamp."""

from __future__ import annotations

import math
from typing import Any, Literal

from PIL import Image, ImageDraw
from pydantic import Field, model_validator

from campflow.bootcamps.arithmetic import format_number
from campflow.bootcamps.base import Instance
from campflow.bootcamps.rendering import RGB, VisionParams, draw_text, encode_png, text_width

QuestionKind = Literal["difference", "sum", "ratio", "range", "total", "series_difference"]

_SERIES_RGB = [(31, 119, 180), (255, 127, 14), (44, 160, 44)]
_SLICE_RGB = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75)]
_INK, _GRID, _AXIS, _WHITE = (25, 25, 25), (222, 222, 228), (90, 90, 90), (255, 255, 255)
_COLORS = (*_SERIES_RGB, *_SLICE_RGB[3:], _INK, _GRID, _AXIS, _WHITE)
_PIE_MAX_CATEGORIES = 6
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 20, 58, 52  # plot margins: axis labels left, title and legend on top


def plot_height(params: ChartParams) -> int:
    """Pixels between the plot's top and bottom margins."""
    return params.height - _TOP - _BOTTOM


def _bar_width(params: ChartParams) -> int:
    group = (params.width - _LEFT - _RIGHT) / params.categories
    return int(group * 0.8 / params.series)


class ChartParams(VisionParams):
    """Knobs of a chart question."""

    kind: Literal["bar", "line", "pie"] = Field("bar", description="chart type")
    categories: int = Field(4, ge=3, le=8, description="categories along the x axis (slices of a pie)")
    series: int = Field(1, ge=1, le=3, description="data series; the question uses one or two, the rest distract")
    value_labels: bool = Field(True, description="print each value on its bar, point or slice")
    gridlines: bool = Field(False, description="draw horizontal gridlines (bar and line charts)")
    max_value: int = Field(100, ge=10, le=1000, description="largest value a data point may take")
    decimals: int = Field(0, ge=0, le=1, description="decimal places of the values (needs value labels)")
    questions: tuple[QuestionKind, ...] = Field(
        ("difference",), min_length=1, max_length=6, description="question kinds to draw from"
    )
    tolerance: float = Field(0.01, ge=0.0, le=0.2, description="relative error an answer may have")
    footnote: bool = Field(False, description="add a footnote with numbers that play no part")
    width: int = Field(640, ge=360, le=1024, description="image width in pixels")
    height: int = Field(400, ge=280, le=768, description="image height in pixels")

    @model_validator(mode="after")
    def _readable(self) -> ChartParams:
        if self.kind == "pie" and not self.value_labels:
            raise ValueError("a pie chart is read from its slice labels; expected value_labels = true for kind pie")
        if self.kind == "pie" and self.categories > _PIE_MAX_CATEGORIES:
            raise ValueError(f"categories = {self.categories}: a pie has at most {_PIE_MAX_CATEGORIES} slices")
        if not self.value_labels and not self.gridlines:
            raise ValueError("without value labels the values are read against gridlines; expected gridlines = true")
        if self.decimals and not self.value_labels:
            raise ValueError("decimals = 1 cannot be read off gridlines; expected value_labels = true")
        if "series_difference" in self.questions and self.series < 2:
            raise ValueError("question series_difference compares two series; expected series >= 2")
        if self.kind == "bar" and self.value_labels and _bar_width(self) < 18:
            raise ValueError(
                f"bars would be {_bar_width(self)} px wide, too narrow for value labels; expected "
                "fewer categories or series, or a wider image"
            )
        if self.kind == "pie" and self.width // self.series < 180:
            raise ValueError(f"{self.series} pies need a width of at least {180 * self.series} px")
        return self


def num(value: float) -> float:
    """A value as it appears in the identity: an int when whole, else rounded to one decimal."""
    value = round(value, 1)
    return int(value) if value == int(value) else value


# -- drawing ------------------------------------------------------------------------------------------


def render(instance: Instance[ChartParams]) -> bytes:
    """The chart of ``instance`` as PNG bytes of ``image_size``."""
    p, d = instance.params, instance.data
    image = Image.new("RGB", (p.width, p.height), _WHITE)
    draw_text(image, (p.width / 2, 18), d["title"], 16, _INK, "mm")
    if d["footnote"]:
        draw_text(image, (8, p.height - 8), d["footnote"], 11, _AXIS, "ls")
    if p.kind == "pie":
        _draw_pies(image, p, d)
    else:
        _draw_axes_chart(image, p, d)
    return encode_png(image, _COLORS)


def _legend(image: Image.Image, names: list[str], colors: list[RGB], y: int) -> None:
    widths = [text_width(n, 12) + 34 for n in names]
    x = (image.width - sum(widths)) / 2
    for name, color, w in zip(names, colors, widths):
        ImageDraw.Draw(image).rectangle((x, y - 6, x + 12, y + 6), fill=color)
        draw_text(image, (x + 17, y), name, 12, _INK, "lm")
        x += w


def _draw_axes_chart(image: Image.Image, p: ChartParams, d: dict[str, Any]) -> None:
    draw = ImageDraw.Draw(image)
    x0, x1, y0, y1 = _LEFT, p.width - _RIGHT, _TOP, p.height - _BOTTOM
    top = d["axis"]["max"]

    def y_of(v: float) -> float:
        return y1 - (y1 - y0) * v / top

    ticks = 10 if p.gridlines else 5
    for i in range(ticks + 1):
        y = y_of(top * i / ticks)
        if p.gridlines and i:
            draw.line((x0, y, x1, y), fill=_GRID)
        draw.line((x0 - 4, y, x0, y), fill=_AXIS)
        draw_text(image, (x0 - 7, y), format_number(num(top * i / ticks)), 11, _INK, "rm")
    draw.line((x0, y0, x0, y1), fill=_AXIS)
    draw.line((x0, y1, x1, y1), fill=_AXIS)
    if len(d["series"]) > 1:
        _legend(image, [s["name"] for s in d["series"]], _SERIES_RGB, 40)
    group = (x1 - x0) / len(d["categories"])
    for i, cat in enumerate(d["categories"]):
        draw_text(image, (x0 + group * (i + 0.5), y1 + 8), cat, 12, _INK, "mt")
    if p.kind == "bar":
        bar = _bar_width(p)
        for s_i, s in enumerate(d["series"]):
            for i, v in enumerate(s["values"]):
                left = x0 + group * (i + 0.5) - bar * len(d["series"]) / 2 + bar * s_i
                draw.rectangle((left + 1, y_of(v), left + bar - 1, y1 - 1), fill=_SERIES_RGB[s_i])
                if p.value_labels:
                    draw_text(image, (left + bar / 2, y_of(v) - 3), format_number(v), 11, _INK, "mb")
        return
    for s_i, s in enumerate(d["series"]):
        points = [(x0 + group * (i + 0.5), y_of(v)) for i, v in enumerate(s["values"])]
        draw.line(points, fill=_SERIES_RGB[s_i], width=2)
        for x, y in points:
            draw.ellipse((x - 4, y - 4, x + 4, y + 4), fill=_SERIES_RGB[s_i])
    if p.value_labels:  # after all lines, so no line is drawn over a label
        for s in d["series"]:
            for i, v in enumerate(s["values"]):
                x, y = x0 + group * (i + 0.5), y_of(v)
                below = _label_below(d["series"], s["values"], i)
                draw_text(
                    image,
                    (x, y + 8 if below else y - 8),
                    format_number(v),
                    11,
                    _INK,
                    "mt" if below else "mb",
                    stroke=_WHITE,
                )


def _label_below(series: list[dict[str, Any]], values: list[float], i: int) -> bool:
    """Whether a line point's label goes below it: the lowest of several series at a category (the
    others sit at least 30 px higher), or a lone series' valley, where the lines leave upwards."""
    if len(series) > 1:
        return values[i] == min(s["values"][i] for s in series)
    neighbours = values[max(0, i - 1) : i] + values[i + 1 : i + 2]
    return all(n > values[i] for n in neighbours)


def _draw_pies(image: Image.Image, p: ChartParams, d: dict[str, Any]) -> None:
    draw = ImageDraw.Draw(image)
    _legend(image, d["categories"], _SLICE_RGB, 42)
    n = len(d["series"])
    cell = p.width / n
    label_room = 22 if n > 1 else 0
    top, bottom = _TOP + label_room, p.height - 24  # below the legend and pie titles, above the footnote
    r = min(cell / 2 - 12, (bottom - top) / 2)
    cy = (top + bottom) / 2
    for s_i, s in enumerate(d["series"]):
        cx = cell * (s_i + 0.5)
        if n > 1:
            draw_text(image, (cx, _TOP + 12), s["name"], 13, _INK, "mm")
        total, angle = sum(s["values"]), -90.0
        for c_i, v in enumerate(s["values"]):
            sweep = 360 * v / total
            draw.pieslice((cx - r, cy - r, cx + r, cy + r), angle, angle + sweep, fill=_SLICE_RGB[c_i], outline=_WHITE)
            mid = math.radians(angle + sweep / 2)
            draw_text(
                image,
                (cx + 0.62 * r * math.cos(mid), cy + 0.62 * r * math.sin(mid)),
                format_number(v),
                12,
                _WHITE,
                "mm",
                stroke=_INK,
            )
            angle += sweep


def describe(instance: Instance[ChartParams]) -> str:
    """The text-mode chart: its kind, title and every drawn value as a table, plus the footnote."""
    d = instance.data
    lines = [
        f'A {d["kind"]} chart titled "{d["title"]}". Its data, as drawn:',
        " | ".join(["category", *[s["name"] for s in d["series"]]]),
    ]
    for i, cat in enumerate(d["categories"]):
        lines.append(" | ".join([cat, *[format_number(s["values"][i]) for s in d["series"]]]))
    if d["footnote"]:
        lines.append(f"Footnote: {d['footnote']}")
    return "\n".join(lines)
