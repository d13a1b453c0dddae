"""InternBootcamp-style classes: ``case_generator``, ``prompt_func`` and ``verify_score`` become a bootcamp.

The convention (InternBootcamp's ``Basebootcamp``): the class is constructed with keyword arguments
(its difficulty knobs), ``case_generator()`` returns an *identity* dict, ``prompt_func(identity)``
the task text, and ``verify_score(model_output, identity, ...)`` a score (a float, or a bool). Any of
them may be instance, class or static methods. Here:

    source  ``package.module:Class``, ``package.module.Class`` or ``path/to/file.py:Class``; how the
            class is found (and InternBootcamp's ``from bootcamp import ...``) is in
            :mod:`~campflow.sources.class_sources`.
    params  the constructor's keyword arguments with JSON defaults (options set them at import). A
            parameter whose default is None and has no annotation takes its type from the values
            the options or levels give it.
    levels  option ``levels``: a list of constructor-argument objects, one per level, as in
            InternBootcamp's own config files (``campflow import class ... --levels-from FILE``).
            Keys the constructor does not name are dropped, as InternBootcamp's data generator drops
            them; fewer than three entries are padded with the last. Without it, three levels that
            are all the constructor's defaults (the import says so).
    seeds   the instance's seed goes to every ``seed``-like constructor argument (``seed``,
            ``random_seed``, ...: not a knob then), since classes such as ``Game24bootcamp`` build their
            own ``numpy.random.default_rng(seed)`` from it; ``case_generator`` and ``prompt_func`` run
            on a freshly constructed object with ``random`` and ``numpy.random`` seeded from the same
            seed (:mod:`~campflow.sources.seeding`), and generators the object keeps in its
            attributes are reseeded. The identity must be JSON. The import checks that this is enough:
            the same instances generated in two processes must match (see vetting).
    reward  ``verify_score(answer, identity)``, clipped to [0, 1]; success is a full score. Where
            ``verify_score`` takes InternBootcamp's ``short_penalty``/``format_penalty`` flags they
            are turned off: the answer arrives through ``submit``, not as a long ``<think>`` reply. An
            ``extract_output`` method, if present, reports what it read from a failed answer.
    oracle  ``oracle_answer(identity)`` or ``solve(identity)``, only where the method's signature
            takes the identity (one required argument named ``identity``, ``case`` or
            ``question_case``, or annotated as a dict): a Codeforces-style helper ``solve(n, p)`` is
            not an oracle. A class without one can be evaluated but has no oracle: the oracle raises
            ImportSourceError, so teacher collection records ``infra_error`` and never trains on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import random
import threading
import typing
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from campflow.bootcamps.base import Bootcamp, Instance, Params, Score, State
from campflow.errors import ImportSourceError
from campflow.sources import ImportSpec
from campflow.sources.class_sources import class_summary, load_class
from campflow.sources.seeding import reseed_object, seeded_globals
from campflow.sources.single_turn import BOUND_OPTION, AnswerBootcamp, answer_instructions
from campflow.sources.source_params import Knob, explain, json_form, knob, params_model, source_kwargs

ADAPTER_REVISION = "2"
REQUIRED = ("case_generator", "prompt_func", "verify_score")
ORACLES = ("oracle_answer", "solve")
IDENTITY_NAMES = ("identity", "case", "question_case")  # what InternBootcamp calls the case dict
LEVELS_OPTION = "levels"
MIN_LEVELS = 3


def is_seed_name(name: str) -> bool:
    """Whether a constructor argument is the class's random seed (``seed``, ``random_seed``, ``rng_seed``)."""
    return name == "seed" or name.endswith("_seed")


def build(spec: ImportSpec) -> Bootcamp:
    """The bootcamp for the class at ``spec.source`` (raises ImportSourceError for a bad source)."""
    cls = load_class(spec.source)
    if isinstance(cls, type) and issubclass(cls, Bootcamp):
        raise ImportSourceError(
            f"{spec.source} is a campflow Bootcamp, not an InternBootcamp-style class; import it with "
            f"`campflow import bootcamp {spec.source}`"
        )
    missing = [m for m in REQUIRED if not callable(getattr(cls, m, None))]
    if missing:
        raise ImportSourceError(
            f"{spec.source} has no {missing[0]}(); an InternBootcamp-style class needs {', '.join(REQUIRED)}"
        )
    options = dict(spec.options)
    presets = options.pop(LEVELS_OPTION, None)
    bound = options.pop(BOUND_OPTION, None)
    if presets is not None and not (isinstance(presets, list) and all(isinstance(p, dict) for p in presets)):
        raise ImportSourceError(
            f"option {LEVELS_OPTION} of {spec.source}: expected a list of objects of constructor "
            f"arguments, one per level; got {presets!r:.80}"
        )
    params = _constructor_params(cls)
    seed_names = [n for n in params if is_seed_name(n)]
    seeded = [n for n in options if n in seed_names]
    if seeded:
        raise ImportSourceError(
            f"{spec.source}: {seeded[0]} is set from each instance's seed, so one instance id is "
            "one task; it cannot be an import option"
        )
    knobs = _knobs(cls, params, [options, *(presets or [])])
    unknown = sorted(set(options) - {k.name for k in knobs})
    if unknown:
        raise ImportSourceError(
            f"{spec.source} takes no keyword argument {unknown[0]!r}; it takes: "
            f"{', '.join(k.name for k in knobs) or 'none'}"
        )
    knobs = [dataclasses.replace(k, default=json_form(options[k.name])) if k.name in options else k for k in knobs]
    model = params_model(
        f"{cls.__name__}Params", knobs, doc=f"Constructor arguments of {cls.__name__}, plus the level."
    )
    levels, notes = _levels(spec.source, model, knobs, seed_names, presets)
    oracle, why_not = _oracle(cls)  # the import says so when there is none (see vetting)
    doc = (
        f"{class_summary(cls)}\n\n{answer_instructions()}\n\n"
        f"Imported from the InternBootcamp-style class {spec.source}; reward is its verify_score."
    )
    bootcamp_cls = type(
        f"Imported_{cls.__name__}",
        (ClassBootcamp,),
        {
            "__doc__": doc,
            "name": spec.name,
            "version": f"ib{ADAPTER_REVISION}-{_source_hash(cls)}",
            "params_model": model,
            "levels": levels,
            "__module__": __name__,
            "import_notes": tuple(notes),
            "wrong_answer_bound": float(bound) if bound is not None else 0.0,
        },
    )
    return bootcamp_cls(cls, knobs, seed_names, oracle, why_not)


class ClassBootcamp(AnswerBootcamp):
    """An InternBootcamp-style class as a bootcamp (one dynamic subclass per import; see the module docstring)."""

    def __init__(
        self, source_cls: type, knobs: list[Knob], seed_names: list[str], oracle: str | None, no_oracle: str
    ) -> None:
        self.source_cls = source_cls
        self.knobs = knobs
        self.seed_names = seed_names
        self.oracle_method = oracle
        self.no_oracle = no_oracle
        self._objects: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._verify_flags = _verify_flags(source_cls.verify_score)

    def build(self, params: Params, rng: random.Random) -> dict[str, Any]:
        seed = rng.randrange(2**31)
        kwargs = {**source_kwargs(params, self.knobs), **{name: seed for name in self.seed_names}}
        with seeded_globals(seed):
            obj = self.source_cls(**kwargs)
            reseed_object(obj, seed)
            identity = obj.case_generator()
            prompt = obj.prompt_func(identity)
        try:
            identity = json.loads(json.dumps(identity))
        except (TypeError, ValueError) as exc:
            raise ImportSourceError(
                f"{self.source_cls.__name__}.case_generator() returned an identity that is not JSON ({exc})"
            ) from None
        return {"identity": identity, "prompt": str(prompt), "case_seed": seed}

    def question(self, instance: Instance) -> str:
        return instance.data["prompt"]

    def grade(self, instance: Instance, answer: str) -> float:
        obj = self._object(instance.params)
        return float(obj.verify_score(answer, instance.data["identity"], **self._verify_flags))

    def reference(self, instance: Instance) -> str:
        if self.oracle_method is None:
            raise ImportSourceError(f"{self.no_oracle}, so the imported bootcamp {self.name!r} has no oracle")
        return str(getattr(self._object(instance.params), self.oracle_method)(instance.data["identity"]))

    def respec(self, spec: ImportSpec, keep: Sequence[int], wrong_answer_bound: float | None) -> ImportSpec:
        options = dict(spec.options)
        if list(keep) != sorted(self.levels):
            presets = options.get(LEVELS_OPTION)
            if presets is None:  # every level is the same config: one that fails condemns them all
                raise ImportSourceError(
                    f"{spec.source}: the constructor's defaults fail at level(s) "
                    f"{sorted(set(self.levels) - set(keep))}; with no levels option there is "
                    "no other level to keep"
                )
            padded = _padded(presets)
            options[LEVELS_OPTION] = [padded[lv - 1] for lv in keep]
        if wrong_answer_bound is not None:
            options[BOUND_OPTION] = wrong_answer_bound
        return spec.model_copy(update={"options": options})

    def score(self, instance: Instance, state: State, transcript: Any) -> Score:
        result = super().score(instance, state, transcript)
        extract = getattr(self._object(instance.params), "extract_output", None)
        if not result.success and state.answer is not None and callable(extract):
            try:
                result.details["extracted"] = repr(extract(state.answer))[:200]
            except Exception as exc:  # the class's parser failing on model output is worth a note, no more
                result.details["extracted"] = f"{type(exc).__name__}: {exc}"[:200]
        return result

    def _object(self, params: Params) -> Any:
        """An object of the source class for these params, to grade with (built once per params)."""
        key = json.dumps(params.model_dump(mode="json", exclude={"level"}), sort_keys=True)
        with self._lock:
            obj = self._objects.get(key)
            if obj is None:
                # the seed does not matter to grading, but the constructor may require one
                obj = self.source_cls(**source_kwargs(params, self.knobs), **{name: 0 for name in self.seed_names})
                self._objects[key] = obj
                while len(self._objects) > 64:
                    self._objects.popitem(last=False)
        return obj


def _constructor_params(cls: type) -> dict[str, inspect.Parameter]:
    """The constructor's named arguments (``self``, ``*args``, ``**kwargs`` left out)."""
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return {}
    return {
        p.name: p
        for p in signature.parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def _knobs(cls: type, params: Mapping[str, inspect.Parameter], examples: Sequence[Mapping[str, Any]]) -> list[Knob]:
    knobs = []
    for p in params.values():
        if p.name == "level" or is_seed_name(p.name) or p.default is inspect.Parameter.empty:
            continue
        annotation = Any if p.annotation is inspect.Parameter.empty else p.annotation
        if annotation is Any and p.default is None:  # untyped and None: the values given say what it holds
            given = next((e[p.name] for e in examples if e.get(p.name) is not None), None)
            if given is not None:
                annotation = typing.Optional[type(given)]  # noqa: UP007, UP045 -- a runtime type expression
        k = knob(p.name, annotation, p.default, f"{cls.__name__} constructor argument {p.name}")
        if k is not None:
            knobs.append(k)
    return knobs


def _padded(presets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    presets = presets or [{}]
    return presets + [presets[-1]] * max(0, MIN_LEVELS - len(presets))


def _levels(
    source: str, model: type[Params], knobs: list[Knob], seed_names: list[str], presets: list[dict[str, Any]] | None
) -> tuple[dict[int, Params], list[str]]:
    notes: list[str] = []
    if presets is None:
        notes.append(
            f"{source} has no difficulty presets here: levels 1-{MIN_LEVELS} are all the constructor's "
            "defaults (import with --levels-from FILE to use InternBootcamp's config files)"
        )
        return {i: model(level=i) for i in range(1, MIN_LEVELS + 1)}, notes
    names = {k.name for k in knobs}
    dropped = sorted({key for p in presets for key in p if key not in names})
    if dropped:
        seeds = [d for d in dropped if d in seed_names]
        why = f" ({', '.join(seeds)} comes from each instance's seed)" if seeds else ""
        notes.append(
            f"levels: {source}'s constructor does not take {', '.join(dropped)}; dropped as InternBootcamp's "
            f"own data generator drops them{why}"
        )
    if len(presets) < MIN_LEVELS:
        notes.append(f"levels: {len(presets)} given, the last repeated to make {MIN_LEVELS}")
    levels: dict[int, Params] = {}
    for i, preset in enumerate(_padded(presets), start=1):
        try:
            levels[i] = model.model_validate({**{k: v for k, v in preset.items() if k in names}, "level": i})
        except ValidationError as exc:
            raise ImportSourceError(f"level {i} of the levels for {source} is invalid: {explain(exc)}") from None
    if len({json.dumps(p.model_dump(mode="json", exclude={"level"}), sort_keys=True) for p in levels.values()}) == 1:
        notes.append(f"levels: all {len(levels)} levels are the same constructor arguments")
    return levels, notes


def _oracle(cls: type) -> tuple[str | None, str]:
    """The oracle method's name, or None and why the class has none."""
    rejected = []
    for name in ORACLES:
        if not callable(getattr(cls, name, None)):
            continue
        takes, signature = _takes_identity(cls, name)
        if takes:
            return name, ""
        rejected.append(f"{name}{signature}")
    if rejected:
        return None, (
            f"{cls.__name__}.{rejected[0]} does not take the identity (one argument named "
            f"{' or '.join(IDENTITY_NAMES)}), so it is not an oracle"
        )
    return None, f"{cls.__name__} has no {' or '.join(f'{n}(identity)' for n in ORACLES)}"


def _takes_identity(cls: type, name: str) -> tuple[bool, str]:
    static = inspect.getattr_static(cls, name)
    fn = static.__func__ if isinstance(static, staticmethod | classmethod) else static
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False, "(...)"
    params = list(signature.parameters.values())
    if not isinstance(static, staticmethod) and params:
        params = params[1:]  # self or cls
    required = [
        p
        for p in params
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    shown = "(" + ", ".join(p.name for p in params) + ")"
    if len(required) != 1:
        return False, shown
    p = required[0]
    hint = p.annotation
    return (p.name in IDENTITY_NAMES or hint in (dict, Mapping) or typing.get_origin(hint) in (dict, Mapping)), shown


def _verify_flags(verify: Any) -> dict[str, Any]:
    try:
        names = set(inspect.signature(verify).parameters)
    except (TypeError, ValueError):
        return {}
    return {flag: False for flag in ("short_penalty", "format_penalty") if flag in names}


def _source_hash(cls: type) -> str:
    try:
        text = Path(inspect.getsourcefile(cls) or "").read_bytes()
    except (OSError, TypeError):
        try:
            text = inspect.getsource(cls).encode()
        except (OSError, TypeError):
            text = f"{cls.__module__}.{cls.__qualname__}".encode()
    return hashlib.sha256(text).hexdigest()[:12]
