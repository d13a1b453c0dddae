"""Runs as Inspect AI eval logs, written through inspect-ai's own log API, so ``inspect view`` shows them.

One log per run, one sample per episode: the transcript's messages (tool calls and results, images,
reasoning) become Inspect chat messages, the reward is the sample's score, and what campflow knows about
the episode (termination, reason, failure category and cluster, bootcamp, level, instance, split, model)
is its metadata, which the viewer filters on. inspect-ai is the optional extra ``view``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from campflow.errors import ExportError
from campflow.report.episodes import StoredEpisode, run_episodes
from campflow.storage.store import Store

INSTALL_HINT = "inspect-ai is not installed; install the view extra: pip install 'campflow[view]'"


def require_inspect() -> None:
    """Raise :class:`ExportError` with the install line when inspect-ai is missing."""
    try:
        import inspect_ai.log  # noqa: F401
    except ImportError:
        raise ExportError(INSTALL_HINT) from None


def export_runs(store: Store, run_ids: Sequence[str], out_dir: Path) -> list[Path]:
    """Write each of ``run_ids`` as ``out_dir/<run_id>.eval``; returns the files written.

    Every run is read before anything is written, so an unknown run id leaves ``out_dir`` as it was.

    Raises:
        ExportError: inspect-ai is not installed, or ``out_dir`` is a file.
        RunNotFoundError: a run has no episodes.
    """
    require_inspect()
    if out_dir.exists() and not out_dir.is_dir():
        raise ExportError(f"--out {out_dir}: a file is there; expected a folder for the logs")
    logs = [eval_log(store, run_id, run_episodes(store, run_id)) for run_id in run_ids]
    from inspect_ai.log import write_eval_log

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for run_id, log in zip(run_ids, logs):
        path = out_dir / f"{run_id}.eval"
        write_eval_log(log, str(path))
        paths.append(path)
    return paths


def eval_log(store: Store, run_id: str, episodes: Sequence[StoredEpisode]) -> Any:
    """The ``inspect_ai.log.EvalLog`` of one run's episodes."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )

    runs = store.query("SELECT kind, model_id, status, started_at, finished_at FROM runs WHERE run_id = ?", [run_id])
    run = runs[0] if runs else {}
    started = run.get("started_at") or min(e.created_at for e in episodes)
    finished = run.get("finished_at") or max(e.created_at for e in episodes)
    model = run.get("model_id") or episodes[0].model_id
    kind = run.get("kind") or "run"
    samples = [eval_sample(e) for e in episodes]
    n = len(episodes)
    passed = sum(e.success for e in episodes)
    mean = sum(e.reward for e in episodes) / n
    spec = EvalSpec(
        run_id=run_id,
        eval_id=run_id,
        created=_iso(started),
        task=run_id,
        task_display_name=f"{kind} {run_id}",
        tags=[kind, *sorted({e.bootcamp for e in episodes})],
        dataset=EvalDataset(name=run_id, samples=n, sample_ids=[e.episode_id for e in episodes]),
        model=f"campflow/{model}",
        config=EvalConfig(),
        metadata={"run_id": run_id, "kind": kind, "status": run.get("status"), "bootcamps": _bootcamps(episodes)},
    )
    results = EvalResults(
        total_samples=n,
        completed_samples=n,
        scores=[
            EvalScore(
                name="reward",
                scorer="campflow",
                metrics={
                    "mean": EvalMetric(name="mean", value=mean),
                    "pass_rate": EvalMetric(name="pass_rate", value=passed / n),
                },
            )
        ],
    )
    return EvalLog(
        status="success",
        eval=spec,
        results=results,
        stats=EvalStats(started_at=_iso(started), completed_at=_iso(finished)),
        samples=samples,
    )


def eval_sample(episode: StoredEpisode) -> Any:
    """One episode as an ``inspect_ai.log.EvalSample``: messages, output, reward score and metadata."""
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ChatCompletionChoice, ModelOutput
    from inspect_ai.scorer import Score

    messages = [chat_message(m) for m in episode.transcript]
    first_reply = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
    last = next((m for m in reversed(messages) if m.role == "assistant"), None)
    model = f"campflow/{episode.model_id}"
    output = ModelOutput(model=model, choices=[ChatCompletionChoice(message=last, stop_reason="stop")] if last else [])
    expected = episode.details.get("expected")
    return EvalSample(
        id=episode.episode_id,
        uuid=episode.episode_id,
        epoch=episode.sample + 1,
        input=messages[:first_reply] or "",
        target="" if expected is None else json.dumps(expected) if not isinstance(expected, str) else expected,
        messages=messages,
        output=output,
        scores={
            "reward": Score(
                value=episode.reward,
                answer=_answer(episode),
                explanation=f"{episode.termination}: {episode.reason}" if episode.reason else episode.termination,
                metadata={"success": episode.success, "termination": episode.termination, **episode.details},
            )
        },
        metadata=episode.metadata(),
        total_time=episode.wall_s,
        error=None,
    )


def chat_message(message: dict[str, Any]) -> Any:
    """One OpenAI-format transcript message as the Inspect chat message of its role."""
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
    )

    role = message.get("role")
    content = _content(message.get("content"))
    if role == "system":
        return ChatMessageSystem(content=content)
    if role == "tool":
        return ChatMessageTool(content=content, tool_call_id=message.get("tool_call_id"), function=message.get("name"))
    if role == "assistant":
        reasoning = message.get("reasoning_content")
        if reasoning:
            parts = content if isinstance(content, list) else ([ContentText(text=content)] if content else [])
            content = [ContentReasoning(reasoning=reasoning), *parts]
        calls = [_tool_call(c) for c in message.get("tool_calls") or []]
        return ChatMessageAssistant(content=content, tool_calls=calls or None)
    return ChatMessageUser(content=content)


def _content(content: Any) -> Any:
    """A string stays one; a list of OpenAI parts becomes Inspect text and image parts."""
    from inspect_ai.model import ContentImage, ContentText

    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            parts.append(ContentText(text=part.get("text") or ""))
        elif kind == "image_url":
            url = part["image_url"]["url"] if isinstance(part.get("image_url"), dict) else part.get("image_url")
            parts.append(ContentImage(image=url))
        elif kind == "image":
            parts.append(ContentImage(image=part.get("image") or part.get("url") or ""))
        else:
            parts.append(ContentText(text=json.dumps(part)))
    return parts


def _tool_call(call: dict[str, Any]) -> Any:
    """An OpenAI tool call; arguments that are not a JSON object keep their text as the parse error."""
    from inspect_ai.tool import ToolCall

    function = call.get("function") or {}
    raw = function.get("arguments")
    arguments: dict[str, Any] = {}
    parse_error = None
    if isinstance(raw, dict):
        arguments = raw
    elif raw:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            arguments = parsed
        else:
            parse_error = f"arguments are not a JSON object: {raw}"
    return ToolCall(
        id=call.get("id") or "", function=function.get("name") or "", arguments=arguments, parse_error=parse_error
    )


def _answer(episode: StoredEpisode) -> str | None:
    submitted = episode.details.get("submitted")
    return None if submitted is None else str(submitted)


def _bootcamps(episodes: Sequence[StoredEpisode]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in episodes:
        counts[e.bootcamp] = counts.get(e.bootcamp, 0) + 1
    return counts


def _iso(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).isoformat()
    return str(value or "")


def cycle_runs(store: Store, cycle_id: str, state: dict[str, Any]) -> list[str]:
    """The runs of cycle ``cycle_id`` (named in its recorded state) that have episodes, in the order it made them."""
    keys = ("eval_before", "probe_before", "collect_runs", "rl_band_run", "eval_after", "probe_after")
    named: list[str] = []
    for key in keys:
        value = state.get(key)
        for run_id in value if isinstance(value, list) else [value]:
            if run_id and run_id not in named:
                named.append(run_id)
    named += [f"{cycle_id}-band-sft", f"{cycle_id}-band-rl"]  # RL's measured effect (flows.band.measure)
    have = {
        r["run_id"]
        for r in store.query("SELECT DISTINCT run_id FROM episodes WHERE run_id IN (SELECT unnest(?))", [named])
    }
    return [r for r in named if r in have]
