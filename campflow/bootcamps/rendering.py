"""Shared rendering for the vision bootcamps: the observation knob, fonts, PNG encoding, text layout.

Everything here is deterministic for a given Pillow version: the fonts are the ones Pillow ships
(``ImageFont.load_default``, no downloads), and PNG encoding writes no timestamps, so the same identity
always renders to the same bytes.
"""

from __future__ import annotations

import functools
import io
import struct
import zlib
from collections.abc import Callable
from typing import Any, Literal

from PIL import Image, ImageDraw, ImageFont
from pydantic import Field

from campflow.bootcamps.base import Observation, Params
from campflow.bootcamps.messages import image_parts

ObservationMode = Literal["image", "text"]
Box = tuple[int, int, int, int]
RGB = tuple[int, int, int]


class VisionParams(Params):
    """Base of every vision bootcamp's params: adds the observation mode."""

    observation: ObservationMode = Field(
        "image", description="'image' renders PNG observations; 'text' describes the same facts in text"
    )


@functools.cache
def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font at ``size`` pixels (loaded once per size)."""
    return ImageFont.load_default(size=size)


@functools.lru_cache(maxsize=4096)
def text_width(text: str, size: int) -> int:
    """Width in pixels of ``text`` in :func:`font` ``(size)``."""
    return int(font(size).getlength(text))


def draw_text(
    image: Image.Image,
    xy: tuple[float, float],
    text: str,
    size: int,
    fill: RGB,
    anchor: str = "la",
    stroke: RGB | None = None,
) -> None:
    """Draw ``text`` on an RGB image like ``ImageDraw.text`` (same anchors), from a cached glyph mask.

    FreeType costs ~0.2 ms a string and a frame has dozens, most of them the same from frame to frame
    (labels, values, buttons); pasting a cached mask costs ~10 us. ``stroke`` outlines the text 2 px wide.
    """
    x, y = round(xy[0]), round(xy[1])
    if stroke is not None:
        mask, left, top = _text_mask(text, size, anchor, 2)
        image.paste(stroke, (x + left, y + top), mask)
    mask, left, top = _text_mask(text, size, anchor, 0)
    image.paste(fill, (x + left, y + top), mask)


@functools.lru_cache(maxsize=8192)
def _text_mask(text: str, size: int, anchor: str, stroke_width: int) -> tuple[Image.Image, int, int]:
    """The coverage mask of ``text`` and its offset from the anchor point."""
    f = font(size)
    left, top, right, bottom = f.getbbox(text, anchor=anchor, stroke_width=stroke_width)
    mask = Image.new("L", (max(1, right - left), max(1, bottom - top)), 0)
    ImageDraw.Draw(mask).text(
        (-left, -top), text, font=f, fill=255, anchor=anchor, stroke_width=stroke_width, stroke_fill=255
    )
    return mask, left, top


def encode_png(image: Image.Image, colors: tuple[RGB, ...] | None = None) -> bytes:
    """PNG bytes of ``image``, at a low zlib level because encoding dominates the cost of a frame.

    With ``colors`` (the colours the image was drawn with), an RGB image is first mapped onto a fixed
    palette of those colours, their blends towards white and a grey ramp, without dithering: an RGB
    PNG of a form costs ~4 ms to encode, the palette one under 1 ms, and antialiased text survives.
    """
    if colors is not None and image.mode == "RGB":
        image = image.quantize(palette=_palette(colors), dither=Image.Dither.NONE)
    if image.mode == "P" and len(image.getpalette() or ()) <= 16 * 3:
        return _png_4bit(image)
    buf = io.BytesIO()
    image.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _png_4bit(image: Image.Image) -> bytes:
    """A palette image of at most 16 colours as a 4-bit PNG, written directly: half the bytes to
    compress and none of Pillow's per-save overhead, which together take ~40% off a gridworld frame."""
    w, h = image.size
    raw, stride = image.tobytes("raw", "P;4"), (w + 1) // 2  # rows padded to whole bytes, as PNG wants
    rows = b"".join(b"\0" + raw[r * stride : (r + 1) * stride] for r in range(h))  # filter type 0 each row
    chunks = [
        (b"IHDR", struct.pack(">IIBBBBB", w, h, 4, 3, 0, 0, 0)),  # 4-bit indexed colour
        (b"PLTE", bytes(image.getpalette())),
        (b"IDAT", zlib.compress(rows, 1)),
        (b"IEND", b""),
    ]
    return b"\x89PNG\r\n\x1a\n" + b"".join(
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data)) for kind, data in chunks
    )


@functools.cache
def _palette(colors: tuple[RGB, ...]) -> Image.Image:
    candidates = [(v, v, v) for v in range(0, 256, 15)]
    for r, g, b in colors:  # blends towards white: antialiased edges of text and shapes
        candidates += [(r + (255 - r) * k // 5, g + (255 - g) * k // 5, b + (255 - b) * k // 5) for k in range(1, 5)]
    # Pillow maps a pixel through a cache of coarse colour cells, so an entry close to a drawing colour
    # could take its pixels; blends and greys near an entry already there are left out.
    entries = list(dict.fromkeys(colors))
    for c in candidates:
        if all(max(abs(c[0] - e[0]), abs(c[1] - e[1]), abs(c[2] - e[2])) > 10 for e in entries):
            entries.append(c)
    if len(entries) > 256:
        raise ValueError(f"{len(colors)} colours make a palette of {len(entries)} entries; at most 256 fit")
    image = Image.new("P", (1, 1))
    image.putpalette([c for rgb in entries for c in rgb])
    return image


def user_content(
    mode: ObservationMode, caption: str, render: Callable[[], bytes], describe: Callable[[], str]
) -> str | list[dict[str, Any]]:
    """The user message of a vision prompt: caption plus image, or caption plus text description.

    ``render`` and ``describe`` are called lazily so each mode pays only for what it shows.
    """
    if mode == "image":
        return image_parts(caption, render())
    return f"{caption}\n\n{describe()}"


def observe(
    mode: ObservationMode, caption: str, render: Callable[[], bytes], describe: Callable[[], str], final: bool = False
) -> Observation:
    """A tool observation in the instance's mode: caption with a PNG, or caption with the text view."""
    if mode == "image":
        return Observation(caption, image=render(), final=final)
    return Observation(f"{caption}\n\n{describe()}", final=final)


def palette_canvas(
    size: tuple[int, int], colors: list[RGB], background: int = 0
) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    """A palette image filled with ``colors[background]``; draw with palette indices.

    Palette images encode about five times faster than RGB and the frames of a grid need few colours;
    the price is unsmoothed text, which stays legible at the sizes used here.
    """
    image = Image.new("P", size, background)
    image.putpalette([c for rgb in colors for c in rgb])
    return image, ImageDraw.Draw(image)


def center_text(draw: ImageDraw.ImageDraw, box: Box, text: str, size: int, fill: Any) -> None:
    """Draw ``text`` centred in ``box``."""
    x0, y0, x1, y1 = box
    draw.text(((x0 + x1) / 2, (y0 + y1) / 2), text, font=font(size), fill=fill, anchor="mm")
