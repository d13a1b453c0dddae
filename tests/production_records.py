"""Production traffic on record without a proxy running: calls as the production proxy spools them, judged."""

from __future__ import annotations

from typing import Any


def record_judged(
    store: Any, conversations: dict[str, tuple[dict[str, Any], dict[str, Any]]], score: float, label: str
) -> None:
    """Each episode's one upstream call (the user's message -> the agent's reply) written as the production
    proxy writes its spool into ``proxy_calls``, and the application's feedback on it (``score``, ``label``)."""
    from campflow.proxy.judging import Judgement, record_judgements
    from campflow.proxy.production import spooled_calls_to_arrow
    from campflow.proxy.records import ProxyCall, calls_to_arrow
    from campflow.storage.store import now

    calls = [
        ProxyCall(f"{episode}-call", episode, 0, "upstream", "shop-model", 200, now(),
                  request={"messages": [asked]}, response={"choices": [{"message": said}]})
        for episode, (asked, said) in conversations.items()
    ]  # fmt: skip
    rows = calls_to_arrow(calls).drop_columns(["recorded_at"]).to_pylist()
    store.insert(
        "proxy_calls",
        spooled_calls_to_arrow([{**r, "upstream_latency_s": 0.1, "conversation": "path"} for r in rows]),
        on_conflict="error",
    )
    record_judgements(store, [Judgement(e, "feedback", "application", score, label) for e in conversations])
