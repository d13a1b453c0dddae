"""The mutation synthesizer, the offline default: perturb failing params along the implicated knobs.

For each proposal it takes one of the cluster's failing instances (most failures first, in turn) and
moves the knobs the cluster's traits implicate, staying inside each trait's region (a cluster with the
trait ``steps>=3`` gets other problems of three or more steps), and now and then one other knob, so the
variants explore around the weakness rather than copy it. The cluster's divergence steers it: where the
bootcamp can pair a failed problem with itself told another way at the deciding step
(:meth:`~campflow.bootcamps.base.Bootcamp.contrasts`: the calculator's ``operator_flipped`` gives the same
numbers with ``finds 5 extra`` and ``gives away 5``), those pairs come first, each pair whole in the same
batch; and the knobs the bootcamp names for the kind (``divergence_knobs``) are moved before any other.
No LLM; deterministic from the seed and the cluster id.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from campflow.bootcamps import registry
from campflow.bootcamps.base import Action, Bootcamp, Params
from campflow.bootcamps.splits import OBSERVATION
from campflow.serialization import canonical_json
from campflow.synthesis.knobs import Knob, knobs_of
from campflow.synthesis.proposals import ClusterContext, Proposal, Synthesizer
from campflow.synthesis.traits import Trait

_ATTEMPTS_PER_PROPOSAL = 25
_CANDIDATES_PER_KNOB = 6


class MutationSynthesizer(Synthesizer):
    """Proposes perturbed copies of a cluster's failing params (see the module docstring).

    Args:
        seed: varies the perturbations; the same seed and cluster give the same proposals.
        p_extra: chance per proposal of also moving one knob no trait implicates.
    """

    name = "mutate"

    def __init__(self, seed: int = 0, p_extra: float = 0.5) -> None:
        self.seed, self.p_extra = seed, p_extra

    def propose(self, context: ClusterContext, n: int) -> list[Proposal]:
        """Up to ``n`` distinct mutated params objects that validate against the bootcamp's model."""
        if not context.parents:
            return []
        model = registry.make(context.bootcamp).params_model
        # the observation mode is the model's (what it can see), not a difficulty: variants keep their parents'
        knobs = {k.name: k for k in knobs_of(model) if k.name != OBSERVATION}
        if not any(k.kind != "other" for name, k in knobs.items() if name != "level"):  # rows of a task file (MCP)
            from campflow import progress

            progress.current().note(
                f"{context.bootcamp}: the mutate synthesizer moves params knobs and this bootcamp has none "
                "but its level; its new tasks come from synthesis.synthesizer llm"
            )
            return []
        traits = {
            t.knob: t
            for t in (Trait.from_dict(d) for d in context.cluster.traits.get("knobs") or [])
            if t.knob in knobs
        }
        observed = {name: [p.params[name] for p in context.parents if name in p.params] for name in knobs}
        bootcamp = registry.make(context.bootcamp)
        kind = context.divergences[0].kind if context.divergences else None
        # the knobs under which the cluster's diverging decision comes up: moved before any other free one
        decisive = [k for k in bootcamp.divergence_knobs.get(kind or "", ()) if k in knobs and k not in traits]
        free = [name for name in knobs if name not in traits and name != "level"]
        rng = random.Random(f"mutate:{self.seed}:{context.cluster_id}")
        seen = {canonical_json(p.params) for p in context.parents}
        out = _contrast_pairs(bootcamp, context, n, seen)
        for attempt in range(n * _ATTEMPTS_PER_PROPOSAL):
            if len(out) >= n:
                break
            parent = context.parents[attempt % len(context.parents)]
            names = [
                name
                for name, t in traits.items()  # a parent outside a trait's region always moves in
                if rng.random() < 0.8 or not t.contains(knobs[name], parent.params.get(name, knobs[name].default))
            ]
            names = names or ([rng.choice(list(traits))] if traits else [])
            if decisive and rng.random() < 0.8:
                names.append(rng.choice(decisive))
            elif free and (not names or rng.random() < self.p_extra):
                names.append(rng.choice(free))
            params = dict(parent.params)
            changes = []
            for name in names:
                old = params.get(name, knobs[name].default)
                new = _first_valid(
                    model, params, name, _candidates(knobs[name], old, traits.get(name), rng, observed[name])
                )
                if new is not None:
                    params[name] = new
                    changes.append(f"{name} {old!r}->{new!r}")
            key = canonical_json(params)
            if not changes or key in seen:
                continue
            seen.add(key)
            aim = "; inside " + ", ".join(t.text() for t in traits.values()) if traits else ""
            aim += f"; where {kind} decides ({', '.join(decisive)})" if decisive and kind else ""
            out.append(
                Proposal(
                    context.bootcamp,
                    context.cluster_id,
                    self.name,
                    params,
                    f"mutated {parent.instance_id}: {', '.join(changes)}{aim}",
                    (parent.instance_id,),
                )
            )
        return out


def _contrast_pairs(bootcamp: Bootcamp, context: ClusterContext, n: int, seen: set[str]) -> list[Proposal]:
    """The bootcamp's minimal pairs (:meth:`~campflow.bootcamps.base.Bootcamp.contrasts`) for the failures of
    the cluster's commonest divergence kind, one failing instance after another, each pair whole or not at all,
    at most ``n`` proposals."""
    out: list[Proposal] = []
    if not context.divergences:
        return out
    kind = context.divergences[0].kind
    parents = {p.instance_id: p for p in context.parents}
    done: set[str] = set()
    for d in context.divergences:
        if d.kind != kind or d.instance_id in done or d.instance_id not in parents:
            continue
        done.add(d.instance_id)
        parent = parents[d.instance_id]
        if parent.seed is None:
            continue
        model = d.model_action
        action = Action(model["tool"], model.get("arguments") or {}) if model else None
        try:
            instance = bootcamp.generate(parent.params, int(parent.seed))
            pair = bootcamp.contrasts(instance, kind, action)
        except Exception:  # a parent the bootcamp no longer makes, or one it cannot pair: knobs do instead
            continue
        texts = [canonical_json(p.model_dump(mode="json")) for p in pair]
        if not pair or len(out) + len(pair) > n or any(t in seen for t in texts):
            continue
        seen.update(texts)
        for i, params in enumerate(pair):
            out.append(
                Proposal(
                    context.bootcamp,
                    context.cluster_id,
                    "mutate",
                    params.model_dump(mode="json"),
                    f"contrast {i + 1} of {len(pair)} for {kind} on {parent.instance_id}: the same problem with "
                    "the deciding step told another way",
                    (parent.instance_id,),
                )
            )
    return out


def _first_valid(model: type[Params], params: dict[str, Any], name: str, candidates: Iterator[Any]) -> Any:
    """The first candidate value of ``name`` with which ``params`` validate (odd widths, patterns...)."""
    for value in candidates:
        try:
            model.model_validate({**params, name: value})
        except ValidationError:
            continue
        return value
    return None


def _candidates(
    knob: Knob,
    value: Any,
    trait: Trait | None,
    rng: random.Random,
    observed: Sequence[Any],
) -> Iterator[Any]:
    """New values for ``knob`` near ``value``, inside ``trait``'s region when one is given."""
    if knob.kind in ("int", "float") and not math.isnan(knob.number(value)):
        x = knob.number(value)
        lo = trait.lo if trait is not None and trait.lo is not None else knob.lo
        hi = trait.hi if trait is not None and trait.hi is not None else knob.hi
        span = (hi - lo) if lo is not None and hi is not None else max(2.0, abs(x))
        for _ in range(_CANDIDATES_PER_KNOB):
            step = rng.uniform(0.05, 0.3) * span * rng.choice((-1, 1))
            y = x + (step if knob.kind == "float" else (round(step) or rng.choice((-1, 1))))
            y = min(max(y, lo if lo is not None else y), hi if hi is not None else y)
            y = int(round(y)) if knob.kind == "int" else round(y, 4)
            if y != x:
                yield y
        return
    if knob.kind == "bool":
        if trait is None:
            yield not value
        return
    # Non-numeric values travel as labels (knob.category); map them back to the values they stand for.
    known = {knob.category(v): v for v in [*knob.choices, *observed]}
    labels = list(dict.fromkeys(trait.values if trait is not None and trait.values else known))
    rng.shuffle(labels)
    current = knob.category(value)
    for label in labels[:_CANDIDATES_PER_KNOB]:
        if label != current:
            yield known[label] if label in known else _parse_label(label)


def _parse_label(label: str) -> Any:
    """A label's value: JSON text for non-strings, the string itself otherwise."""
    try:
        return json.loads(label)
    except json.JSONDecodeError:
        return label
