"""An episode's transcript as an HTML fragment that needs nothing beside it: images stay inline data URLs."""

from __future__ import annotations

import html
import json
from typing import Any

from campflow.report.episodes import StoredEpisode

TRANSCRIPT_CSS = """
.transcript{font-size:13px;border:1px solid #ddd;border-radius:4px;padding:6px;background:#fafafa}
.msg{margin:4px 0;padding:4px 6px;border-left:3px solid #bbb}
.msg .role{font-weight:bold;font-size:11px;text-transform:uppercase;color:#555}
.msg.assistant{border-color:#1f77b4}.msg.tool{border-color:#2ca02c}.msg.user{border-color:#ff7f0e}
.msg pre{white-space:pre-wrap;margin:2px 0;font-family:monospace}
.msg pre.call{color:#1f4e79}.msg img{max-width:100%;border:1px solid #ccc}
.ending{font-weight:bold;margin-top:4px}
"""


def transcript_html(episode: StoredEpisode) -> str:
    """``<div class="transcript">`` with every message of ``episode`` and how it ended."""
    e = html.escape
    parts = [f'<div class="transcript" data-episode="{e(episode.episode_id)}">']
    for message in episode.transcript:
        role = str(message.get("role", "?"))
        title = f"{role} · {message['name']}" if role == "tool" and message.get("name") else role
        body = []
        if message.get("reasoning_content"):
            body.append(
                f"<details><summary>reasoning</summary><pre>{e(str(message['reasoning_content']))}</pre></details>"
            )
        body.append(_content(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            body.append(
                f'<pre class="call">→ {e(str(function.get("name")))}({e(_arguments(function.get("arguments")))})</pre>'
            )
        inner = "".join(body)
        if role == "system":  # the same long instructions in every episode: folded
            inner = f"<details><summary>instructions</summary>{inner}</details>"
        parts.append(f'<div class="msg {e(role)}"><div class="role">{e(title)}</div>{inner}</div>')
    ending = f"{episode.termination}" + (f" ({episode.reason})" if episode.reason else "")
    parts.append(
        f'<div class="ending">ended: {e(ending)} · reward {episode.reward:.2f} · {episode.turns} turns</div></div>'
    )
    return "".join(parts)


def _content(content: Any) -> str:
    e = html.escape
    if not content:
        return ""
    if isinstance(content, str):
        return f"<pre>{e(content)}</pre>"
    out = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            out.append(f"<pre>{e(part.get('text') or '')}</pre>")
        elif kind in ("image_url", "image"):
            url = (part.get("image_url") or {}).get("url") if kind == "image_url" else part.get("image")
            if isinstance(url, str) and url.startswith("data:image/"):
                out.append(f'<img src="{e(url)}" alt="image the agent saw">')
            else:  # only inline images keep the page whole; a link would break once it is copied
                out.append(f"<pre>[image not embedded: {e(str(url)[:80])}]</pre>")
        else:
            out.append(f"<pre>{e(json.dumps(part))}</pre>")
    return "".join(out)


def _arguments(raw: Any) -> str:
    if isinstance(raw, str):
        try:
            return json.dumps(json.loads(raw), ensure_ascii=False)
        except ValueError:
            return raw
    return json.dumps(raw, ensure_ascii=False)
