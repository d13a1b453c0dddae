"""Chat message content as every layer writes and reads it (OpenAI format), and short quotes of values.

A message's ``content`` is a string, or a list of content parts: ``{"type": "text", "text": ...}`` and
``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``. Bootcamps write images
with :func:`image_parts` (vision prompts, and the engine for image observations); everyone who needs
the words of a message reads them with :func:`content_text`. :func:`clip` shortens a value quoted in an
error or a table cell. This module sits below every other (bootcamps are the lowest layer), so agents,
the engine, synthesis, training and the CLI all use these one definitions.
"""

from __future__ import annotations

import base64
from typing import Any

IMAGE_NOTE = "[image]"


def image_parts(caption: str, png: bytes) -> list[dict[str, Any]]:
    """OpenAI content parts carrying a caption and a PNG image as a data URL (how vision prompts and
    image observations reach a model)."""
    url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return [{"type": "text", "text": caption}, {"type": "image_url", "image_url": {"url": url}}]


def content_text(content: Any, image: str = IMAGE_NOTE) -> str:
    """The text of a message's ``content``.

    Args:
        content: a string (returned as it is), a list of content parts, or None.
        image: what stands for each image part (``image_url`` or ``image``); ``""`` to leave images out.

    Returns:
        The parts' texts and image notes in order, joined by newlines; parts of other types and
        anything that is not a dict are skipped. ``""`` for None or any other value.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            parts.append(part.get("text", ""))
        elif part.get("type") in ("image_url", "image"):
            parts.append(image)
    return "\n".join(parts)


def clip(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit - 3`` and ``...``."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
