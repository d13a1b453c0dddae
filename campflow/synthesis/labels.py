"""Cluster labels that tell one bootcamp's clusters apart.

A label starts as the cluster's dominant category and traits (:mod:`campflow.synthesis.clustering`). Two
clusters can still read alike (``format_error:no_tool_call (100%)`` twice, one at level 1, one at level 3):
then each gets the trait that separates it from the others with the same label, tried in this order: the
level, a param, the turn at which it left the oracle's path, the turn at which it failed, the call it made
there, the last tool it called. Where nothing tells them apart, they are numbered, and so is any label
that still meets another's: one bootcamp's clusters never share a label.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from campflow.synthesis.knobs import Knob
from campflow.synthesis.mining import Failure


def separate_labels(groups: Sequence[tuple[Any, Sequence[Failure]]], knobs: Sequence[Knob]) -> None:
    """Give the clusters of ``groups`` (each with its failures; ``label`` and ``traits`` attributes, as
    :class:`~campflow.synthesis.clustering.Cluster` has) distinct labels, naming what separates them."""
    by_label: dict[str, list[tuple[Any, Sequence[Failure]]]] = defaultdict(list)
    for cluster, failures in groups:
        by_label[cluster.label].append((cluster, failures))
    for label, alike in by_label.items():
        if len(alike) < 2:
            continue
        texts = _separating([failures for _, failures in alike], knobs)
        counts: dict[str, int] = defaultdict(int)
        for text in texts:
            counts[text] += 1
        numbered: dict[str, int] = defaultdict(int)
        for (cluster, _), text in zip(alike, texts):
            suffix = text
            if counts[text] > 1:  # nothing told these apart: numbered, in the order given (largest first)
                numbered[text] += 1
                suffix = " · ".join(p for p in (text, f"{numbered[text]} of {counts[text]}") if p)
            cluster.label = f"{label} · {suffix}"
            cluster.traits["separated_by"] = suffix
    _number_repeats([cluster for cluster, _ in groups])


def _number_repeats(clusters: Sequence[Any]) -> None:
    """A label that still reads like another's (a separated one meeting a base one) gets a number."""
    seen: dict[str, int] = defaultdict(int)
    for cluster in clusters:
        seen[cluster.label] += 1
    taken = set(seen)
    at: dict[str, int] = defaultdict(int)
    for cluster in clusters:
        if seen[cluster.label] < 2:
            continue
        base = cluster.label
        at[base] += 1
        label = f"{base} · {at[base]} of {seen[base]}"
        while label in taken:
            label += "'"
        taken.add(label)
        cluster.label = label


def _separating(members: Sequence[Sequence[Failure]], knobs: Sequence[Knob]) -> list[str]:
    """Per group of failures, the text of the first trait that separates every group (or most of them)."""
    describers: list[Callable[[Sequence[Failure]], str]] = [_levels]
    describers += [lambda fs, k=k: _knob_values(fs, k) for k in knobs if k.name != "level"]
    describers += [_diverged_at, _turns, _diverging_call, _last_tool]
    best: list[str] = [""] * len(members)
    best_distinct = 1
    for describe in describers:
        texts = [describe(fs) for fs in members]
        distinct = len(set(texts))
        if distinct == len(members) and all(texts):
            return texts
        if distinct > best_distinct and all(texts):
            best, best_distinct = texts, distinct
    return best


def _span(name: str, values: Sequence[Any], numeric: bool) -> str:
    distinct = sorted(set(values), key=lambda v: (str(type(v)), v))
    if not distinct:
        return ""
    if len(distinct) == 1:
        return f"{name} {distinct[0]}" if name == "level" else f"{name}={distinct[0]}"
    if numeric:
        return f"{name}s {distinct[0]}-{distinct[-1]}" if name == "level" else f"{name} {distinct[0]}-{distinct[-1]}"
    return f"{name} in {{{', '.join(str(v) for v in distinct)}}}"


def _levels(failures: Sequence[Failure]) -> str:
    levels = [f.features.get("level") for f in failures if f.features.get("level") is not None]
    return _span("level", levels, numeric=True)


def _knob_values(failures: Sequence[Failure], knob: Knob) -> str:
    values = [(f.features.get("params") or {}).get(knob.name, knob.default) for f in failures]
    if knob.numeric:
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        return _span(knob.name, numbers, numeric=True) if len(numbers) == len(values) else ""
    return _span(knob.name, [knob.category(v) for v in values], numeric=False)


def _turns(failures: Sequence[Failure]) -> str:
    turns = [f.features.get("turns") for f in failures if f.features.get("turns") is not None]
    if not turns:
        return ""
    return f"failed at turn {statistics.median_low(turns)}"


def _diverged_at(failures: Sequence[Failure]) -> str:
    turns = [(f.features.get("divergence") or {}).get("turn") for f in failures]
    turns = [t for t in turns if t is not None]
    return f"diverged at turn {statistics.median_low(turns)}" if turns else ""


def _diverging_call(failures: Sequence[Failure]) -> str:
    pairs = [f.features.get("divergence") or {} for f in failures]
    pairs = [(d.get("model_tool") or "no call", d.get("oracle_tool")) for d in pairs if d.get("kind")]
    if not pairs:
        return ""
    mine, theirs = statistics.mode(pairs)
    return f"{mine} where the oracle called {theirs}" if theirs else mine


def _last_tool(failures: Sequence[Failure]) -> str:
    tools = [f.features.get("last_tool") or "" for f in failures]
    common = statistics.mode(tools) if tools else ""
    return f"last tool {common}" if common else "no tool called"
