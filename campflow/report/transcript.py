"""An episode as text for a terminal: its turns, tool calls and results, how it ended; images become files."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

from campflow.report.episodes import StoredEpisode

_RULE = "─"


def render_episode(episode: StoredEpisode, images_dir: Path, width: int = 80) -> str:
    """The transcript of ``episode`` as plain text; each image is written to ``images_dir`` and named in
    the text where it appeared."""
    lines = [
        f"episode {episode.episode_id} · run {episode.run_id} · model {episode.model_id} · sample {episode.sample}",
        f"{episode.bootcamp} level {episode.level} · instance {episode.instance_id} ({episode.split or 'unrecorded'})"
        f" · params {json.dumps(episode.params, sort_keys=True)}",
    ]
    if episode.category:
        cluster = f" · cluster {episode.cluster_id[:8]}: {episode.cluster_label}" if episode.cluster_id else ""
        lines.append(f"failure {episode.category}{cluster}")
    images = 0
    for message in episode.transcript:
        role = message.get("role", "?")
        title = f"{role} {message.get('name')}" if role == "tool" and message.get("name") else role
        lines.append(f"{_RULE * 3} {title} " + _RULE * max(0, width - len(title) - 5))
        if message.get("reasoning_content"):
            lines.append(f"[reasoning] {message['reasoning_content']}")
        text, written = _text(message.get("content"), images_dir, images)
        images += written
        if text:
            lines.append(text)
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            lines.append(f"→ {function.get('name')}({_arguments(function.get('arguments'))})  [{call.get('id')}]")
    lines.append(_RULE * width)
    ending = f"ended: {episode.termination}"
    if episode.reason:
        ending += f" ({episode.reason})"
    ending += f" · reward {episode.reward:.2f} · {episode.turns} turns, {episode.tool_calls} tool calls"
    lines.append(ending)
    extra = {k: v for k, v in episode.details.items() if k != "reason"}
    if extra:
        lines.append("details: " + json.dumps(extra, sort_keys=True, default=str))
    if episode.error and episode.error != episode.reason:
        lines.append(f"error: {episode.error}")
    return "\n".join(lines)


def _text(content: Any, images_dir: Path, first: int) -> tuple[str, int]:
    """The text of a message's content, its images written to ``images_dir/image-<n>`` (numbered from
    ``first``) and named by path; returns the text and how many images it wrote."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    out, written = [], 0
    for part in content:
        kind = part.get("type")
        if kind == "text":
            out.append(part.get("text") or "")
        elif kind in ("image_url", "image"):
            url = part.get("image_url", {}).get("url") if kind == "image_url" else part.get("image")
            path = save_image(url or "", images_dir / f"image-{first + written}")
            out.append(f"[image: {path}]" if path else "[image: not a data URL]")
            written += 1
        else:
            out.append(json.dumps(part))
    return "\n".join(out), written


def save_image(url: str, stem: Path) -> Path | None:
    """Write a ``data:image/...;base64,`` URL to ``stem.<ext>``; None when it is not one."""
    if not url.startswith("data:image/") or ";base64," not in url:
        return None
    head, data = url.split(";base64,", 1)
    ext = head.removeprefix("data:image/").split("+")[0] or "png"
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    stem.parent.mkdir(parents=True, exist_ok=True)
    path = stem.with_suffix(f".{ext}")
    path.write_bytes(raw)
    return path


def _arguments(raw: Any) -> str:
    if isinstance(raw, str):
        try:
            return json.dumps(json.loads(raw), ensure_ascii=False)
        except ValueError:
            return raw
    return json.dumps(raw, ensure_ascii=False)
