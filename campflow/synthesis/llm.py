"""The LLM synthesizer: an OpenAI-compatible model proposes params aimed at a cluster's weakness.

The prompt gives the model the bootcamp's description, the JSON schema of its params, its level
presets, the cluster's label and traits, the failing params, where the failures left the oracle's path
(the divergence's kind, the state the agent was in and both calls: the mistake itself, not the last
turn) and a few exemplar transcripts (truncated), and asks for ``n`` new params objects as JSON. Where the endpoint accepts a JSON-schema
``response_format`` it gets one; where it refuses, the request is sent again without, and every reply
is read defensively (prose around a fenced block, ``<think>`` reasoning, a bare list). A reply with
nothing readable is itself recorded as a rejected proposal (``invalid_json``), and the model is asked
again, up to ``max_requests`` times per cluster.
"""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Sequence
from typing import Any

from campflow.agents.openai_policy import describe_sdk_error
from campflow.bootcamps import registry
from campflow.bootcamps.messages import clip, content_text
from campflow.config import SynthesisLLMConfig
from campflow.errors import ConfigError, SynthesisError
from campflow.rollout.parsing import split_reasoning
from campflow.synthesis.proposals import ClusterContext, Proposal, Synthesizer

SYSTEM_PROMPT = (
    "You design training tasks for an AI agent. A procedural generator builds each task from a params "
    "object, and you propose params objects. Every object must validate against the JSON schema you are "
    "given: respect every bound and use only the listed keys. Reply with JSON only."
)
_LIST_KEYS = ("proposals", "variants", "params_list", "items")
_NOTHING = object()


class LLMSynthesizer(Synthesizer):
    """Asks an OpenAI-compatible chat model for params objects aimed at a cluster.

    Args:
        model: the model name the endpoint serves.
        base_url: e.g. ``http://localhost:8000/v1``; None means the SDK default (OpenAI).
        api_key: the key, or None to read ``api_key_env`` (local servers usually need none).
        temperature, max_tokens: sampling settings of every request.
        timeout, max_retries: per request, before the endpoint counts as failed.
        json_schema: send a JSON-schema ``response_format`` (dropped for good if the endpoint refuses it).
        max_requests: requests per cluster until ``n`` proposals have been read.
        exemplar_chars: characters kept of each exemplar transcript.
    """

    name = "llm"
    needs_transcripts = True

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.7,
        max_tokens: int = 2048,
        timeout: float = 120.0,
        max_retries: int = 2,
        json_schema: bool = True,
        max_requests: int = 3,
        exemplar_chars: int = 1500,
    ) -> None:
        self.model, self.base_url = model, base_url
        self.api_key = api_key or os.environ.get(api_key_env) or "not-needed"
        self.temperature, self.max_tokens = temperature, max_tokens
        self.timeout, self.max_retries = timeout, max_retries
        self.json_schema, self.max_requests, self.exemplar_chars = json_schema, max_requests, exemplar_chars
        self.requests = 0
        self._client: Any = None

    @classmethod
    def from_config(cls, cfg: SynthesisLLMConfig) -> LLMSynthesizer:
        """The synthesizer ``cfg`` describes; ``cfg.model`` is required."""
        if not cfg.model:
            raise ConfigError("synthesis.llm.model is required for the llm synthesizer (pass --model)")
        return cls(
            cfg.model,
            cfg.base_url,
            api_key_env=cfg.api_key_env,
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            timeout=cfg.timeout,
            max_retries=cfg.max_retries,
            json_schema=cfg.json_schema,
            max_requests=cfg.max_requests,
            exemplar_chars=cfg.exemplar_chars,
        )

    def propose(self, context: ClusterContext, n: int) -> list[Proposal]:
        """Up to ``n`` readable proposals, plus one unreadable proposal per reply that had none."""
        messages = self.messages(context, n)
        schema = response_schema(registry.make(context.bootcamp).describe()["params_schema"])
        out: list[Proposal] = []
        readable = 0
        for _ in range(self.max_requests):
            text = self.complete(messages, schema)
            items, problem = read_proposals(text)
            messages.append({"role": "assistant", "content": text})
            if problem is not None:
                out.append(Proposal(context.bootcamp, context.cluster_id, self.name, unreadable=problem, raw=text))
                messages.append(
                    {
                        "role": "user",
                        "content": f"That reply could not be read ({problem}). "
                        'Reply with the JSON object {"proposals": [...]} only.',
                    }
                )
                continue
            for item in items[: n - readable]:
                out.append(_proposal(context, item, self.name))
                readable += 1
            if readable >= n:
                break
            messages.append(
                {
                    "role": "user",
                    "content": f"Propose {n - readable} more, different from those, in the same JSON form.",
                }
            )
        return out

    def messages(self, context: ClusterContext, n: int) -> list[dict[str, str]]:
        """The chat messages that ask for ``n`` proposals for ``context``'s cluster."""
        d = registry.make(context.bootcamp).describe()
        c = context.cluster
        traits = c.traits.get("knobs") or []
        trait_text = (
            "; ".join(f"{t['text']} (fails {t['fail_in']:.0%} there vs {t['fail_out']:.0%} elsewhere)" for t in traits)
            or "none stand out"
        )
        categories = ", ".join(f"{cat} x{k}" for cat, k in c.traits.get("categories") or [])
        parents = "\n".join(json.dumps(p.params, sort_keys=True) for p in context.parents[:5])
        exemplars = (
            "\n\n".join(
                f"### Episode {i} ({e.category}), params {json.dumps(e.params, sort_keys=True)}\n"
                f"{render_transcript(e.transcript, self.exemplar_chars)}"
                for i, e in enumerate(context.exemplars, 1)
            )
            or "(none available)"
        )
        mistake = self.divergence_text(context)
        user = (
            f"## Task family: {d['name']}\n{d['description']}\n\n"
            f"## Params JSON schema\n{json.dumps(d['params_schema'], sort_keys=True)}\n\n"
            f"Difficulty presets: {json.dumps(d['levels'], sort_keys=True)}\n\n"
            f"## Weakness to target\nThe agent failed {c.size} episodes alike: {c.label}.\n"
            f"Failure categories: {categories}.\nWhere the failures concentrate: {trait_text}.\n"
            f"Params of failing tasks:\n{parents}\n\n"
            f"{mistake}"
            f"## Exemplar failed episodes (truncated)\n{exemplars}\n\n"
            f"## Your job\nPropose {n} new params objects that exercise this weakness"
            + (
                ": tasks where the same decision comes up (the step where the agent left the right path), "
                if mistake
                else ": "
            )
            + "inside the region where it fails, varied, and not copies of the params above. "
            "Reply with JSON only, in the form "
            '{"proposals": [{"params": {...}, "rationale": "one sentence"}]}.'
        )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def divergence_text(self, context: ClusterContext) -> str:
        """The prompt's section on where the cluster's failures left the oracle's path: the commonest kind,
        how many, and for a few of them the state the agent was in and both calls ('' when none was found)."""
        found = context.divergences
        if not found:
            return ""
        kind = found[0].kind
        same = [x for x in found if x.kind == kind]
        parts = [
            "## Where the agent went wrong\n"
            f"In {len(same)} of these {context.cluster.size} failures the first step that left every correct "
            f"path was of the kind `{kind}`: at that step the agent's call differs from what a correct "
            "solver would call from the same state.\n"
        ]
        for i, x in enumerate(same[:3], 1):
            state = render_transcript(x.state, self.exemplar_chars) if x.state else "(not loaded)"
            parts.append(
                f"### Divergence {i}, at turn {x.turn}\nThe state (what the agent had seen):\n{state}\n"
                f"The agent called: {_call_text(x.model_action)}\n"
                f"A correct solver would call: {_call_text(x.oracle_action)}\n"
            )
        return "\n".join(parts) + "\n"

    def complete(self, messages: Sequence[dict[str, str]], schema: dict[str, Any]) -> str:
        """One chat completion's text; the JSON-schema response format is dropped if refused.

        Raises:
            SynthesisError: the endpoint failed after its retries, naming the endpoint and the cause.
        """
        import openai  # deferred: `campflow --help` does not pay for the SDK

        if self._client is None:
            self._client = openai.OpenAI(
                api_key=self.api_key, base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries
            )
        request: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.json_schema:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "variant_proposals", "schema": schema},
            }
        where = f"LLM endpoint {self.base_url or 'api.openai.com'} (model {self.model})"
        try:
            try:
                self.requests += 1
                completion = self._client.chat.completions.create(**request)
            except (openai.BadRequestError, openai.UnprocessableEntityError):
                if "response_format" not in request:
                    raise
                self.json_schema = False  # this endpoint does not take a schema; read replies defensively
                request.pop("response_format")
                self.requests += 1
                completion = self._client.chat.completions.create(**request)
        except openai.OpenAIError as exc:
            raise SynthesisError(describe_sdk_error(exc, where, self.timeout, self.max_retries)) from None
        if not completion.choices:
            raise SynthesisError(f"{where} returned no choices")
        return completion.choices[0].message.content or ""

    def close(self) -> None:
        """Close the HTTP client (a later request opens a new one)."""
        if self._client is not None:
            self._client.close()
            self._client = None


def response_schema(params_schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a reply: ``{"proposals": [{"params": <params schema>, "rationale": str}]}``."""
    params = copy.deepcopy(params_schema)
    defs = params.pop("$defs", None)
    schema: dict[str, Any] = {
        "type": "object",
        "required": ["proposals"],
        "properties": {
            "proposals": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["params", "rationale"],
                    "properties": {"params": params, "rationale": {"type": "string"}},
                },
            }
        },
    }
    if defs:
        schema["$defs"] = defs
    return schema


def read_proposals(text: str) -> tuple[list[Any], str | None]:
    """The proposal items in a reply, or a problem (``invalid_json: ...``) when there are none.

    Accepts the whole reply as JSON, a fenced block within prose, or the first JSON object or array
    that decodes anywhere in the text; then a ``proposals`` (or ``variants``) list, a bare list, or a
    single object.
    """
    _, visible = split_reasoning(text or "")
    value = _first_json(visible)
    if value is _NOTHING:
        snippet = " ".join(visible.split())[:80]
        return [], f"invalid_json: no JSON object or array could be read from the reply {snippet!r}"
    if isinstance(value, dict):
        for key in _LIST_KEYS:
            if isinstance(value.get(key), list):
                return value[key], None
        return [value], None
    return (value if isinstance(value, list) else [value]), None


def _first_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    for block in re.findall(r"```(?:json)?\s*(.*?)```", text, re.S):
        try:
            return json.loads(block)
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[\[{]", text):
        try:
            value, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if value:
            return value
    return _NOTHING


def _proposal(context: ClusterContext, item: Any, synthesizer: str) -> Proposal:
    parents = tuple(p.instance_id for p in context.parents[:5])
    if isinstance(item, dict) and "params" in item:
        rationale = item.get("rationale")
        return Proposal(
            context.bootcamp,
            context.cluster_id,
            synthesizer,
            item["params"],
            rationale if isinstance(rationale, str) else None,
            parents,
        )
    return Proposal(context.bootcamp, context.cluster_id, synthesizer, item, None, parents)


def _call_text(action: dict[str, Any] | None) -> str:
    if action is None:
        return "(no tool call)"
    return f"{action['tool']}({json.dumps(action.get('arguments') or {}, sort_keys=True)})"


def render_transcript(transcript: Sequence[dict[str, Any]], limit: int) -> str:
    """A transcript as short lines (``role: text``, ``-> tool(args)``), middle cut to ``limit`` characters."""
    lines = []
    for m in transcript:
        role = m.get("role")
        if role == "system":
            continue
        content = content_text(m.get("content"))
        if role == "assistant":
            calls = [
                f"-> {c.get('function', {}).get('name')}({c.get('function', {}).get('arguments')})"
                for c in m.get("tool_calls") or []
                if isinstance(c, dict)
            ]
            content = " ".join([content, *calls]).strip()
        lines.append(clip(" ".join(f"{role}: {content}".split()), 300))
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    head, tail = int(limit * 0.4), int(limit * 0.6)
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"
