"""Judging production episodes: the application's feedback, a reward function, or an LLM judge.

A production episode has no verifier; it is judged by one of three sources, each judgement naming it
(``production_judgements.source``):

- ``feedback``: the application's own word, ``POST /episodes/<id>/feedback`` on the proxy;
- ``reward``: a Python callable of the team's over the transcript (``production.reward``,
  ``module:function`` or ``file.py:function``), returning a score, ``(score, label)`` or a dict with
  ``score``, ``label`` and ``reason``;
- ``judge``: an OpenAI-compatible model that scores a group of alike episodes (the same model and
  system prompt) against each other with a rubric, as RULER does: relative scores within a group are
  easier to give consistently than absolute ones. Its reply must score every episode of the group once;
  a reply that does not is the judge's failure, and that group stays unjudged (said, never guessed).

Where sources disagree, feedback counts over a reward function over the judge (view
``production_verdicts``). :func:`judge_unjudged` (``campflow proxy judge``) judges what no one judged
yet and files every judged episode (:mod:`campflow.proxy.filing`) as a run of kind ``production``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import importlib.util
import os
import secrets
import sys
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pydantic import BaseModel, Field, ValidationError

from campflow.config import JudgeConfig, ProductionConfig, SynthesisConfig
from campflow.errors import CampflowError, ConfigError
from campflow.serialization import from_json, to_json

if TYPE_CHECKING:
    from campflow.proxy.filing import FilingSummary

SOURCES = ("feedback", "reward", "judge")


class JudgeError(CampflowError):
    """The judge's reply could not be read as a score for every episode of its group."""


@dataclass
class Judgement:
    """One verdict on a production episode (a row of ``production_judgements``)."""

    episode_id: str
    source: str  # feedback, reward, judge
    judge: str | None
    score: float
    label: str | None = None
    reason: str | None = None
    group_id: str | None = None
    judgement_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    judged_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC).replace(tzinfo=None))

    def row(self) -> dict[str, Any]:
        """The judgement as a JSON-able row."""
        return {
            "judgement_id": self.judgement_id,
            "episode_id": self.episode_id,
            "source": self.source,
            "judge": self.judge,
            "score": self.score,
            "label": self.label,
            "reason": self.reason,
            "group_id": self.group_id,
            "judged_at": self.judged_at.isoformat(),
        }


JUDGEMENT_SCHEMA = pa.schema(
    [
        ("judgement_id", pa.string()),
        ("episode_id", pa.string()),
        ("source", pa.string()),
        ("judge", pa.string()),
        ("score", pa.float64()),
        ("label", pa.string()),
        ("reason", pa.string()),
        ("group_id", pa.string()),
        ("judged_at", pa.timestamp("us")),
    ]
)


def judgements_to_arrow(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Judgement rows (``judged_at`` as ISO text or a datetime) in the ``production_judgements`` layout."""
    columns: dict[str, list[Any]] = {name: [] for name in JUDGEMENT_SCHEMA.names}
    for r in rows:
        for name in JUDGEMENT_SCHEMA.names:
            value = r.get(name)
            if name == "judged_at" and isinstance(value, str):
                value = dt.datetime.fromisoformat(value)
            columns[name].append(value)
    return pa.Table.from_pydict(columns, schema=JUDGEMENT_SCHEMA)


def record_judgements(store: Any, judgements: Sequence[Judgement]) -> int:
    """Write judgements to the store (an id already there is left as it is)."""
    return store.insert(
        "production_judgements", judgements_to_arrow([j.row() for j in judgements]), on_conflict="ignore"
    )


# -- production episodes -------------------------------------------------------------------------------


@dataclass
class ProductionEpisode:
    """A production episode as recorded: its conversation as of its last answered call."""

    episode_id: str
    model: str
    transcript: list[dict[str, Any]]
    calls: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    upstream_s: float
    wall_s: float

    @property
    def group_key(self) -> str:
        """What makes episodes alike for the judge: the model and the system prompt."""
        system = next((m.get("content") for m in self.transcript if m.get("role") in ("system", "developer")), "")
        return hashlib.sha256(to_json([self.model, system]).encode()).hexdigest()[:12]


_EPISODES_SQL = """
    WITH last AS (
        SELECT episode_id, request, response, model_id
        FROM proxy_calls WHERE backend = 'upstream' AND status = 200
        QUALIFY row_number() OVER (PARTITION BY episode_id ORDER BY started_at DESC, seq DESC) = 1)
    SELECT p.episode_id, p.calls, p.upstream_s,
           epoch(p.last_call_at) - epoch(p.first_call_at) AS wall_s,
           l.request, l.response, l.model_id,
           (SELECT coalesce(sum(c.prompt_tokens), 0) FROM proxy_calls c WHERE c.episode_id = p.episode_id
                AND c.backend = 'upstream') AS prompt_tokens,
           (SELECT coalesce(sum(c.completion_tokens), 0) FROM proxy_calls c WHERE c.episode_id = p.episode_id
                AND c.backend = 'upstream') AS completion_tokens
    FROM production_episodes p JOIN last l USING (episode_id)
"""


def load_episodes(
    store: Any, *, unjudged: bool = False, episode_ids: Sequence[str] | None = None
) -> list[ProductionEpisode]:
    """Production episodes with at least one answered call (only those without a judgement, if ``unjudged``)."""
    sql, params = _EPISODES_SQL + " WHERE true", []
    if unjudged:
        sql += " AND p.episode_id NOT IN (SELECT episode_id FROM production_judgements)"
    if episode_ids is not None:
        sql += " AND list_contains(?, p.episode_id)"
        params.append(list(episode_ids))
    out = []
    for r in store.query(sql + " ORDER BY p.episode_id", params):
        request, response = from_json(r["request"] or "{}"), from_json(r["response"] or "{}")
        transcript = list(request.get("messages") or []) if isinstance(request, dict) else []
        choices = response.get("choices") if isinstance(response, dict) else None
        if choices:
            transcript.append(choices[0].get("message") or {})
        out.append(
            ProductionEpisode(
                episode_id=r["episode_id"],
                model=r["model_id"] or "",
                transcript=transcript,
                calls=int(r["calls"]),
                tool_calls=sum(len(m.get("tool_calls") or []) for m in transcript if m.get("role") == "assistant"),
                prompt_tokens=int(r["prompt_tokens"] or 0),
                completion_tokens=int(r["completion_tokens"] or 0),
                upstream_s=float(r["upstream_s"] or 0.0),
                wall_s=float(r["wall_s"] or 0.0),
            )
        )
    return out


# -- a reward function of the team's -------------------------------------------------------------------

RewardFunction = Callable[[list[dict[str, Any]]], Any]


def load_reward(spec: str) -> RewardFunction:
    """The callable ``spec`` names: ``package.module:function`` or ``path/to/file.py:function``.

    Raises:
        ConfigError: the spec, module or function cannot be found, or is not callable.
    """
    module_name, _, name = spec.rpartition(":")
    if not module_name or not name:
        raise ConfigError(f"production.reward = {spec!r}: expected module:function or file.py:function")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise ConfigError(f"production.reward = {spec!r}: the file {path} does not exist")
            loader = importlib.util.spec_from_file_location(f"campflow_reward_{path.stem}", path)
            assert loader is not None and loader.loader is not None
            module = importlib.util.module_from_spec(loader)
            sys.modules[loader.name] = module
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"production.reward = {spec!r}: cannot import {module_name} ({exc})") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"production.reward = {spec!r}: {module_name} has no callable {name!r}")
    return fn


def judge_with_reward(fn: RewardFunction, name: str, episodes: Sequence[ProductionEpisode]) -> list[Judgement]:
    """Score each episode's transcript with ``fn``.

    Raises:
        JudgeError: ``fn`` returned something that is not a score from 0 to 1 (naming the episode).
    """
    out = []
    for e in episodes:
        value = fn(e.transcript)
        label = reason = None
        if isinstance(value, tuple):
            value, label = value[0], (value[1] if len(value) > 1 else None)
        elif isinstance(value, dict):
            value, label, reason = value.get("score"), value.get("label"), value.get("reason")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise JudgeError(
                f"reward function {name}: episode {e.episode_id!r} got {value!r}; expected a score from 0 to 1"
            )
        out.append(Judgement(e.episode_id, "reward", name, float(value), _opt_str(label), _opt_str(reason)))
    return out


# -- an LLM judge, RULER-style -------------------------------------------------------------------------

JUDGE_SYSTEM = (
    "You judge how well an AI assistant handled conversations with users. You are given a rubric and a "
    "group of conversations of the same assistant; score each from 0 to 1 against the rubric, comparing "
    "them with each other. Reply with JSON only."
)


class _Score(BaseModel):
    episode: int = Field(ge=1)
    score: float = Field(ge=0, le=1)
    label: str | None = None
    reason: str | None = None


class _Scores(BaseModel):
    scores: list[_Score]


class LLMJudge:
    """Scores groups of alike production episodes through an OpenAI-compatible chat endpoint.

    Args:
        cfg: the ``production.judge`` section (model, base URL, rubric, group size).
    """

    def __init__(self, cfg: JudgeConfig) -> None:
        if not cfg.model:
            raise ConfigError("production.judge.model: not set; expected the judge's model name")
        import openai

        self.cfg = cfg
        self.client = openai.OpenAI(
            base_url=cfg.base_url, api_key=os.environ.get(cfg.api_key_env) or "none", timeout=cfg.timeout
        )

    def groups(self, episodes: Sequence[ProductionEpisode]) -> list[list[ProductionEpisode]]:
        """Alike episodes together (same model and system prompt), at most ``group_size`` a group."""
        by_key: dict[str, list[ProductionEpisode]] = defaultdict(list)
        for e in episodes:
            by_key[e.group_key].append(e)
        size = self.cfg.group_size
        return [members[i : i + size] for _, members in sorted(by_key.items()) for i in range(0, len(members), size)]

    def messages(self, group: Sequence[ProductionEpisode]) -> list[dict[str, str]]:
        """The judge's prompt for one group."""
        parts = [f"Rubric: {self.cfg.rubric}", ""]
        for i, e in enumerate(group, 1):
            parts += [f"## Conversation {i}", _render(e.transcript, self.cfg.transcript_chars), ""]
        parts.append(
            'Reply with {"scores": [{"episode": <conversation number>, "score": <0..1>, "label": '
            '"<what went wrong, two or three words, or ok>", "reason": "<one sentence>"}, ...]}, '
            f"one entry for each of the {len(group)} conversations."
        )
        return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": "\n".join(parts)}]

    def judge_group(self, group: Sequence[ProductionEpisode]) -> list[Judgement]:
        """Judgements for every episode of ``group``.

        Raises:
            JudgeError: the reply is not JSON scoring each conversation exactly once.
        """
        reply = self.client.chat.completions.create(model=self.cfg.model or "", messages=self.messages(group))  # type: ignore[arg-type]
        text = reply.choices[0].message.content or ""
        scores = read_scores(text, len(group))
        group_id = "g-" + secrets.token_hex(6)
        return [
            Judgement(e.episode_id, "judge", self.cfg.model, s.score, _opt_str(s.label), _opt_str(s.reason), group_id)
            for e, s in zip(group, scores, strict=True)
        ]

    def close(self) -> None:
        """Release the HTTP client."""
        self.client.close()


def read_scores(text: str, n: int) -> list[_Score]:
    """The judge's scores, one per conversation in order.

    Raises:
        JudgeError: not JSON, not the expected shape, or not each of the ``n`` conversations exactly once.
    """
    from campflow.synthesis.llm import _first_json

    data = _first_json(text)
    if isinstance(data, list):
        data = {"scores": data}
    try:
        parsed = _Scores.model_validate(data)
    except ValidationError as exc:
        raise JudgeError(
            f"the judge's reply is not a scores object ({exc.errors()[0]['msg']}): {text[:200]!r}"
        ) from None
    seen = Counter(s.episode for s in parsed.scores)
    if sorted(seen) != list(range(1, n + 1)) or any(c > 1 for c in seen.values()):
        raise JudgeError(f"the judge scored conversations {sorted(seen)}; expected each of 1..{n} once")
    return sorted(parsed.scores, key=lambda s: s.episode)


def _render(transcript: Sequence[dict[str, Any]], limit: int) -> str:
    from campflow.synthesis.llm import render_transcript

    return render_transcript(transcript, limit)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass
class JudgingResult:
    """What :func:`judge_unjudged` did: judgements per source, groups the judge failed on, the filing."""

    by_source: Counter[str] = field(default_factory=Counter)
    judge_failures: list[str] = field(default_factory=list)
    filing: FilingSummary | None = None  # noqa: F821  (campflow.proxy.filing, imported when typing)

    def lines(self) -> list[str]:
        """The outcome in a few lines for the CLI."""
        judged = ", ".join(f"{n} by {s}" for s, n in sorted(self.by_source.items())) or "none"
        out = [f"judged now: {judged}"]
        out += [f"judge failed on a group: {why}" for why in self.judge_failures]
        f = self.filing
        if f is None or f.run_id is None:
            out.append("nothing new to file")
        else:
            out.append(
                f"filed {f.episodes} episode(s) as run {f.run_id}: {f.failures} failure(s) in {f.clusters} cluster(s); "
                f"`campflow failures --run {f.run_id}` lists them"
            )
        return out


def judge_unjudged(
    store: Any, cfg: ProductionConfig, synthesis: SynthesisConfig | None = None, *, llm: bool = False
) -> JudgingResult:
    """Judge episodes without a judgement (the reward function, if configured, then the LLM judge if
    ``llm``), record the judgements, and file every judged episode (:func:`file_judged`)."""
    result = JudgingResult()
    if cfg.reward:
        fn = load_reward(cfg.reward)
        judged = judge_with_reward(fn, cfg.reward, load_episodes(store, unjudged=True))
        record_judgements(store, judged)
        result.by_source["reward"] += len(judged)
    if llm:
        judge, judged = LLMJudge(cfg.judge), []
        try:
            for group in judge.groups(load_episodes(store, unjudged=True)):
                try:
                    judged += judge.judge_group(group)
                except JudgeError as exc:
                    result.judge_failures.append(str(exc))
        finally:
            judge.close()
            record_judgements(store, judged)  # what was judged before a failure is kept
        result.by_source["judge"] += len(judged)
    from campflow.proxy.filing import file_judged

    result.filing = file_judged(store, cfg, synthesis)
    return result
