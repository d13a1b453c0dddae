"""From recorded transcripts (OpenAI message format) to what chat templates render.

Transcripts keep tool-call arguments as JSON strings, as the OpenAI protocol does; chat templates
(and TRL) expect them as objects, and render tool results as ``tool`` messages. Images are dropped
with a note for a text-only model; for a vision-language model (``images=True``) a message with images
keeps its parts, each image as a ``{"type": "image"}`` placeholder filled in order from the transcript's
images (:func:`campflow.agents.vision.image_urls`), the form TRL's SFTTrainer and the processors read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from campflow.bootcamps.messages import content_text


class UnrenderableTranscript(ValueError):
    """A transcript that cannot become training text (e.g. a tool call whose arguments are not JSON)."""


def template_messages(
    transcript: Sequence[dict[str, Any]], *, strict: bool = True, images: bool = False
) -> list[dict[str, Any]]:
    """Messages for a chat template: arguments as dicts, content as text, no transport-only keys.

    With ``strict`` a tool call whose arguments are not a JSON object raises
    :class:`UnrenderableTranscript` (training data must not teach malformed calls); without it such
    arguments are kept as the raw string (for rendering a live conversation back to the model). With
    ``images`` a message holding images keeps them as ``{"type": "image"}`` placeholders among its
    ``{"type": "text"}`` parts; without, each image is a note in its text.

    In a conversation with images an assistant turn without text has the empty parts list as its
    content: TRL's vision collator turns a string into a text part, and a Qwen-VL template writes a
    newline before the tool call of an assistant turn whose content is a non-empty list, so an empty
    string would train a newline (merged with the header's into one token) that inference never sees.
    """
    vision = images and any(_has_image(m.get("content")) for m in transcript)
    out: list[dict[str, Any]] = []
    for message in transcript:
        role = message["role"]
        if vision and role != "assistant" and _has_image(message.get("content")):
            out.append({"role": role, "content": _parts(message["content"])})
            continue
        content = content_text(message.get("content"))
        if role == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": content if content or not vision else []}
            calls = []
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                calls.append(
                    {
                        "type": "function",
                        "function": {"name": fn.get("name", ""), "arguments": _arguments(fn.get("arguments"), strict)},
                    }
                )
            if calls:
                msg["tool_calls"] = calls
            if message.get("reasoning_content"):  # thinking templates render it; the others ignore it
                msg["reasoning_content"] = content_text(message["reasoning_content"])
            out.append(msg)
        elif role == "tool":
            out.append({"role": "tool", "name": message.get("name", ""), "content": content})
        else:
            out.append({"role": role, "content": content})
    return out


def _has_image(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") in ("image_url", "image") for p in content
    )


def _parts(content: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            out.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") in ("image_url", "image"):
            out.append({"type": "image"})
    return out


def _arguments(raw: Any, strict: bool) -> Any:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except json.JSONDecodeError:
        if strict:
            raise UnrenderableTranscript(f"tool call arguments are not JSON: {str(raw)[:80]!r}") from None
        return raw
    if not isinstance(value, dict):
        if strict:
            raise UnrenderableTranscript(f"tool call arguments are not a JSON object: {str(raw)[:80]!r}")
        return raw
    return value


def action_sequence(transcript: Sequence[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The (tool, canonical arguments) calls of a transcript, for deduplication."""
    seq = []
    for message in transcript:
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            try:
                args = json.dumps(json.loads(fn.get("arguments") or "{}"), sort_keys=True)
            except (json.JSONDecodeError, TypeError):
                args = str(fn.get("arguments"))
            seq.append((str(fn.get("name")), args))
    return tuple(seq)
