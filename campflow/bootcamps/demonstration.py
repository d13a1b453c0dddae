"""Grounded demonstrations: what a transcript has shown, and a checker that nothing was invented.

The oracle (:meth:`~campflow.bootcamps.base.Bootcamp.oracle`) may read hidden state: right for proving
an instance solvable, wrong for teaching, since SFT on its transcripts teaches a model to invent ids,
paths and names. A bootcamp's :meth:`~campflow.bootcamps.base.Bootcamp.demonstrate` acts only on the
prompt and earlier tool results; the helpers here read those from the transcript (OpenAI messages),
and :func:`ungrounded` checks a finished demonstration.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A token of an argument or of the text shown: a clock time, a number, or a name-like word (ids such
#: as e5, file names such as router_v2.js, SQL identifiers such as customers.city split at the dot).
_TOKEN = re.compile(r"\d{1,2}:\d{2}|-?\d+(?:\.\d+)?|[A-Za-z_][A-Za-z0-9_-]*")


def messages_text(message: Mapping[str, Any]) -> str:
    """The text parts of one message (image parts are skipped)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return ""


def tool_calls(transcript: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every tool call the assistant made so far, as (name, arguments), in order."""
    for message in transcript:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            fn = call.get("function", {})
            raw = fn.get("arguments") or "{}"
            try:
                args = json.loads(raw) if isinstance(raw, str) else dict(raw)
            except json.JSONDecodeError:
                args = {}
            yield fn.get("name", ""), args if isinstance(args, dict) else {}


def exchanges(transcript: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """Every tool call so far with the text of its result: (name, arguments, result)."""
    results = {m.get("tool_call_id"): messages_text(m) for m in transcript if m.get("role") == "tool"}
    out = []
    for message in transcript:
        if message.get("role") != "assistant":
            continue
        for call, (name, args) in zip(message.get("tool_calls") or (), tool_calls([message]), strict=True):
            out.append((name, args, results.get(call.get("id"), "")))
    return out


def called(transcript: Sequence[Mapping[str, Any]], name: str, **arguments: Any) -> bool:
    """Whether the transcript holds a call of ``name`` whose arguments include ``arguments``."""
    return any(n == name and all(a.get(k) == v for k, v in arguments.items()) for n, a in tool_calls(transcript))


def tool_results(transcript: Sequence[Mapping[str, Any]]) -> list[str]:
    """The texts of every tool result so far, in order."""
    return [messages_text(m) for m in transcript if m.get("role") == "tool"]


def shown_text(transcript: Sequence[Mapping[str, Any]]) -> str:
    """Everything the agent has read: system and user messages (the prompt) and tool results."""
    return "\n".join(messages_text(m) for m in transcript if m.get("role") in ("system", "user", "tool"))


def _norm_number(token: str) -> str:
    value = float(token)
    return str(int(value)) if value.is_integer() else repr(round(value, 9))


def _norm(token: str) -> str:
    if ":" in token:
        h, m = token.split(":")
        return f"{int(h)}:{m}"
    if token[0].isdigit() or token[0] == "-":
        return _norm_number(token)
    return token.lower()


_DIGITS_IN_WORD = re.compile(r"(?<=[A-Za-z])\d+(?![A-Za-z])")
_RANGE = re.compile(r"\b(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})\b")


def tokens(text: str, *, shown: bool = False) -> set[str]:
    """The normalized tokens of ``text``: times as H:MM, numbers as their shortest form, words lower-cased.

    A time range (``09:00-10:30``) also shows its length in minutes (``90``): an event listed so
    shows how long it is. With ``shown`` (text the agent read), a number written after a letter is
    shown on its own too: ``bolt x2`` shows the count ``2``, ``v3`` the ``3``.
    """
    out = {str((int(c) - int(a)) * 60 + int(d) - int(b)) for a, b, c, d in _RANGE.findall(text)}
    for t in _TOKEN.findall(text):
        out.add(_norm(t))
        if t[0] == "-" and len(t) > 1:
            out.add(_norm(t[1:]))  # "-3" in "5-3" is also the 3 shown
        elif shown and (t[0].isalpha() or t[0] == "_"):
            out.update(_norm(n) for n in _DIGITS_IN_WORD.findall(t))  # "bolt x2" shows the count 2
    return out


def leaves(value: Any) -> Iterator[Any]:
    """The string and number leaves of a JSON-able value."""
    if isinstance(value, Mapping):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from leaves(v)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield value


@dataclass(frozen=True)
class Exemptions:
    """What a tool's arguments may hold without having been shown, each for a stated reason.

    Attributes:
        fields: (tool, argument) pairs that are the agent's own free choice or free text, for example
            a wordle guess (any word of the vocabulary the prompt names). Say why beside each use.
        syntax: words of a tool's own language (SQL keywords and functions for ``query``), which
            are part of the tool, not facts about the world.
        enums: values a tool's schema itself enumerates (directions), the agent reads them there.
        defines: per tool, patterns whose first group is a name or number the argument makes up for
            its own use (a SQL table alias in ``FROM orders o``, the ``1`` of ``LIMIT 1``).
    """

    fields: frozenset[tuple[str, str]] = frozenset()
    syntax: Mapping[str, frozenset[str]] = field(default_factory=dict)
    enums: frozenset[str] = frozenset()
    defines: Mapping[str, Sequence[re.Pattern[str]]] = field(default_factory=dict)


def schema_enums(tool_schemas: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """Every enumerated value in function-calling schemas (a Literal argument's choices)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for v in node.get("enum", ()):
                found.add(str(v).lower())
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(list(tool_schemas))
    return frozenset(found)


def ungrounded(transcript: Sequence[Mapping[str, Any]], exemptions: Exemptions = Exemptions()) -> list[str]:
    """Arguments of the transcript's tool calls that nothing shown before the call contains.

    Every string and number leaf of each call's arguments is cut into tokens (times, numbers, words);
    each token must occur among the tokens of the prompt and the tool results *before* that call
    (numbers compared by value: 12.50 is 12.5). So a result a tool computed (a ``calculate`` value, a
    query's rows) grounds what follows it. :class:`Exemptions` lists what needs no grounding.

    Returns:
        One line per ungrounded token, ``"turn N tool(arg): 'token'"``; empty when all are grounded.
    """
    seen: set[str] = set()
    problems: list[str] = []
    turn = 0
    for message in transcript:
        role = message.get("role")
        if role in ("system", "user", "tool"):
            seen |= tokens(messages_text(message), shown=True)
            continue
        if role != "assistant":
            continue
        for name, args in tool_calls([message]):
            syntax = exemptions.syntax.get(name, frozenset())
            for key, value in args.items():
                if (name, key) in exemptions.fields:
                    continue
                for leaf in leaves(value):
                    own = {_norm(m) for p in exemptions.defines.get(name, ()) for m in p.findall(str(leaf))}
                    for t in tokens(str(leaf)):
                        if t not in seen and t not in syntax and t not in exemptions.enums and t not in own:
                            problems.append(f"turn {turn} {name}({key}): {t!r}")
        turn += 1
    return problems
