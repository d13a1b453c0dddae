"""reasoning-gym: any procedural dataset by name becomes a single-turn ``submit(answer)`` bootcamp.

Mapping:
    params  the dataset's config dataclass fields (types and defaults from the dataclass; ``seed`` and
            ``size`` are ours), plus ``level``. Every value is checked by the config's own
            ``validate()``; lower bounds the config enforces (``> 0``, ``>= 0``) are found by probing it
            and written into the schema, and integer knobs get a ceiling of twice the largest value the
            defaults, presets or options use, so synthesis explores past the hardest preset without
            asking for generation costs nobody has measured.
    levels  the dataset's curriculum where it has one: its global levels whose config passes the
            dataset's own ``validate()``, 3 to 5 of them spread over the range, each range attribute at
            its upper segment, so levels are crisp tiers.
            Without a curriculum every level is the default config. Import options override every level.
    item    ``(params, seed)`` -> ``create_dataset(name, seed=s, size=1, **config)[0]`` with ``s`` drawn
            from the instance's rng: the dataset's documented API, correct for datasets that generate
            eagerly in ``__init__`` as well as lazily. It runs with ``random`` and ``numpy.random``
            seeded from ``s`` (:mod:`~campflow.sources.seeding`): ``list_functions``'
            generators and the code ``codeio`` executes draw from the global ``random``, so without it
            one id gave another task on every call. Entries are cached per (config, s). A generator
            that gives up on a seed (countdown's top levels do) gets up to five seeds, still drawn
            from the instance's rng, so the instance stays deterministic.
    reward  ``dataset.score_answer(answer, entry)``, reasoning-gym's own scorer, on a dataset object of
            the instance's config.
    oracle  submits the item's ``answer``. A few datasets (e.g. ``rush_hour``, ``graph_color``) have
            no single reference answer; their oracle raises ImportSourceError, so they can be evaluated
            but give no teacher demonstrations.

Option ``curriculum_levels=[0,2,4]`` picks the curriculum's global levels by hand (repeats allowed).
The import writes it itself when its checks drop a level whose generator fails or never finishes
(letter_jumble's and spell_backward's top levels fail, puzzle24's level 4 loops forever): the levels
left are the ones on record.

``composite`` mixes other datasets and needs them named: ``--set 'datasets=[gcd, chain_sum]'``,
each item a dataset name or ``{name, weight, config}`` (weight 1 and the default config if left out).

Some reasoning-gym scorers give a little format credit (0.01-0.05) to any answer, hence
``wrong_answer_bound = 0.05``; option ``wrong_answer_bound`` is the bound the import measured where a
scorer gives more (see :mod:`~campflow.sources.vetting`).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import json
import random
import threading
import typing
from collections import OrderedDict
from typing import Any

from pydantic import ValidationError

from campflow.bootcamps.base import Bootcamp, Instance, Params
from campflow.errors import ImportSourceError
from campflow.sources import ImportSpec
from campflow.sources.seeding import GENERATION_LOCK, seeded_globals
from campflow.sources.single_turn import BOUND_OPTION, AnswerBootcamp, answer_instructions
from campflow.sources.source_params import (
    Knob,
    explain,
    json_form,
    knob,
    params_model,
    source_kwargs,
)

ADAPTER_REVISION = "2"
OURS = ("seed", "size")  # config fields the adapter sets itself
MAX_LEVELS = 5
MIN_LEVELS = 3
CHOSEN_LEVELS = "curriculum_levels"  # with BOUND_OPTION, the options that are not config fields
ATTEMPTS = 5  # seeds tried per instance before a generator's failure is reported
_CACHE_SIZE = 4096  # entries
_SCORERS = 8  # dataset objects


def build(spec: ImportSpec) -> Bootcamp:
    """The bootcamp for reasoning-gym dataset ``spec.source`` (raises ImportSourceError for a bad source)."""
    factory = _factory()
    name = spec.source
    if name not in factory.DATASETS:
        close = difflib.get_close_matches(name, list(factory.DATASETS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; it has {len(factory.DATASETS)} datasets"
        raise ImportSourceError(f"reasoning-gym has no dataset {name!r}{hint}")
    _, config_cls = factory.DATASETS[name]
    options = dict(spec.options)
    chosen = options.pop(CHOSEN_LEVELS, None)
    bound = options.pop(BOUND_OPTION, None)
    if name == "composite":
        options = _composite_options(options)
    knobs = _knobs(name, config_cls, options)
    check = _checker(config_cls)
    try:
        check(source_kwargs_from(knobs, {}))
    except (AssertionError, ValueError, TypeError) as exc:
        raise ImportSourceError(
            f"reasoning-gym dataset {name!r} rejects its config with options {options}: {exc or type(exc).__name__}"
        ) from None
    curriculum, presets = _presets(name, factory, knobs, options, check, chosen)
    knobs = _fit_to_presets(knobs, presets)
    model = params_model(
        f"RG_{name}_Params", knobs, check=check, doc=f"Config fields of reasoning-gym's {name} dataset, plus the level."
    )
    levels = _levels(name, model, presets, options)
    version = f"rg{ADAPTER_REVISION}-{importlib.metadata.version('reasoning-gym')}"
    doc = (
        f"Solve a reasoning-gym `{name}` problem and submit the answer.\n\n"
        f"{answer_instructions()}\n\n"
        f"Imported from reasoning-gym {importlib.metadata.version('reasoning-gym')}: params are the "
        f"dataset's config fields, levels follow its curriculum, and the reward is reasoning-gym's own "
        f"score_answer."
    )
    attrs = {
        "__doc__": doc,
        "name": spec.name,
        "version": version,
        "params_model": model,
        "levels": levels,
        "__module__": __name__,
        "curriculum": tuple(curriculum),
    }
    if bound is not None:
        attrs["wrong_answer_bound"] = float(bound)
    cls = type(f"ReasoningGym_{name}", (ReasoningGymBootcamp,), attrs)
    return cls(name, knobs)


class ReasoningGymBootcamp(AnswerBootcamp):
    """A reasoning-gym dataset as a bootcamp (one dynamic subclass per import; see the module docstring)."""

    wrong_answer_bound = 0.05
    #: the curriculum's global level behind each level (None where the dataset has no curriculum)
    curriculum: typing.ClassVar[tuple[int | None, ...]] = ()

    def __init__(self, dataset: str, knobs: list[Knob]) -> None:
        self.dataset = dataset
        self.knobs = knobs
        self._items: OrderedDict[tuple[str, int], dict[str, Any]] = OrderedDict()
        self._scorers: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def build(self, params: Params, rng: random.Random) -> dict[str, Any]:
        error = ""
        for _ in range(ATTEMPTS):
            rg_seed = rng.randrange(2**31)
            try:
                entry = self._item(params, rg_seed)
            except Exception as exc:  # some generators give up on unlucky seeds (countdown's top levels)
                error = f"{type(exc).__name__}: {exc}"
                continue
            answer = entry.get("answer")
            return {
                "question": str(entry["question"]),
                "answer": None if answer is None else str(answer),
                "rg_seed": rg_seed,
            }
        raise ImportSourceError(
            f"reasoning-gym dataset {self.dataset!r} failed to generate an item for "
            f"{params.model_dump()} with {ATTEMPTS} seeds: {error}"
        )

    def question(self, instance: Instance) -> str:
        return instance.data["question"]

    def grade(self, instance: Instance, answer: str) -> float:
        entry = self._item(instance.params, instance.data["rg_seed"])
        return self._scorer(instance.params).score_answer(answer, entry)

    def reference(self, instance: Instance) -> str:
        if instance.data["answer"] is None:
            raise ImportSourceError(
                f"reasoning-gym dataset {self.dataset!r} gives no reference answer for its "
                "items, so the imported bootcamp has no oracle"
            )
        return instance.data["answer"]

    def respec(self, spec: ImportSpec, keep: typing.Sequence[int], wrong_answer_bound: float | None) -> ImportSpec:
        options = dict(spec.options)
        if list(keep) != sorted(self.levels):
            chosen = [self.curriculum[lv - 1] for lv in keep]
            if None in chosen:
                raise ImportSourceError(
                    f"reasoning-gym dataset {self.dataset!r} fails at level(s) "
                    f"{sorted(set(self.levels) - set(keep))} and has no curriculum to take "
                    "other levels from"
                )
            options[CHOSEN_LEVELS] = chosen + [chosen[-1]] * max(0, MIN_LEVELS - len(chosen))
        if wrong_answer_bound is not None:
            options[BOUND_OPTION] = wrong_answer_bound
        return spec.model_copy(update={"options": options})

    def _item(self, params: Params, rg_seed: int) -> dict[str, Any]:
        """The dataset entry of a config and seed (cached: scoring reads the entry's metadata)."""
        key = (_config_key(params), rg_seed)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        with seeded_globals(rg_seed):  # whole, under the lock: codeio keeps its data on the class
            entry = _factory().create_dataset(self.dataset, seed=rg_seed, size=1, **source_kwargs(params, self.knobs))[
                0
            ]
        with self._lock:
            self._items[key] = entry
            while len(self._items) > _CACHE_SIZE:
                self._items.popitem(last=False)
        return entry

    def _scorer(self, params: Params) -> Any:
        """A dataset object of this config, for ``score_answer`` (which reads the config, never the seed).

        Few are kept: some datasets load word lists or fonts per object.
        """
        key = _config_key(params)
        with self._lock:
            hit = self._scorers.get(key)
            if hit is not None:
                self._scorers.move_to_end(key)
                return hit
        with GENERATION_LOCK:
            dataset = _factory().create_dataset(self.dataset, seed=0, size=1, **source_kwargs(params, self.knobs))
        with self._lock:
            self._scorers[key] = dataset
            while len(self._scorers) > _SCORERS:
                self._scorers.popitem(last=False)
        return dataset


def _config_key(params: Params) -> str:
    return json.dumps(params.model_dump(mode="json", exclude={"level"}), sort_keys=True)


def _factory() -> Any:
    try:
        import reasoning_gym.factory as factory
    except ImportError:
        raise ImportSourceError(
            "reasoning-gym is not installed; install the imports extra: pip install 'campflow[imports]'"
        ) from None
    return factory


def _knobs(name: str, config_cls: type, options: dict[str, Any]) -> list[Knob]:
    try:
        hints = typing.get_type_hints(config_cls)
    except Exception:  # unresolvable annotations: fall back to each field's default's type
        hints = {}
    knobs: list[Knob] = []
    for f in dataclasses.fields(config_cls):
        if f.name in OURS or f.name == "level" or not f.init:
            continue
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        k = knob(f.name, hints.get(f.name, f.type), default, f"reasoning-gym {name} config: {f.name}")
        if k is not None:
            knobs.append(k)
    by_name = {k.name: k for k in knobs}
    unknown = sorted(set(options) - set(by_name))
    if unknown:
        raise ImportSourceError(
            f"reasoning-gym dataset {name!r} has no config field {unknown[0]!r}; its fields are: {', '.join(by_name)}"
        )
    knobs = [dataclasses.replace(k, default=json_form(options[k.name])) if k.name in options else k for k in knobs]
    check = _checker(config_cls)
    base = source_kwargs_from(knobs, {})
    return [_bounded(k, base, check) for k in knobs]


def source_kwargs_from(knobs: list[Knob], values: dict[str, Any]) -> dict[str, Any]:
    """Source kwargs from knob defaults updated with ``values`` (JSON form)."""
    return {k.name: k.to_source(values.get(k.name, k.default)) for k in knobs}


def _checker(config_cls: type) -> typing.Callable[[dict[str, Any]], None]:
    def check(kwargs: dict[str, Any]) -> None:
        config = config_cls(**kwargs, seed=0, size=1)
        if callable(getattr(config, "validate", None)):
            config.validate()

    return check


def _accepts(check: typing.Callable[[dict[str, Any]], None], kwargs: dict[str, Any]) -> bool:
    try:
        check(kwargs)
    except Exception:
        return False
    return True


def _bounded(k: Knob, base: dict[str, Any], check: typing.Callable[[dict[str, Any]], None]) -> Knob:
    """The knob with the lower bound its config enforces, found by probing ``validate()``."""
    numeric = k.annotation in (int, float) and isinstance(k.default, int | float) and not isinstance(k.default, bool)
    if not numeric:
        return k
    probe = {v: _accepts(check, {**base, k.name: k.annotation(v)}) for v in (-1, 0, 1)}
    ge = None
    if not probe[-1] and probe[0]:
        ge = 0
    elif not probe[-1] and not probe[0] and probe[1] and k.annotation is int:
        ge = 1
    if ge is not None and k.default < ge:
        ge = None
    return dataclasses.replace(k, ge=ge)


def _presets(
    name: str,
    factory: Any,
    knobs: list[Knob],
    options: dict[str, Any],
    check: typing.Callable[[dict[str, Any]], None],
    chosen: Any = None,
) -> tuple[list[int | None], list[dict[str, Any]]]:
    """Difficulty presets from the curriculum (see the module docstring), options applied to each, and the
    curriculum's global level behind each (None without a curriculum).

    Curriculum levels whose config the dataset's own ``validate()`` rejects (caesar_cipher's upper
    levels ask for rotations past 25) are skipped; repeats of the last valid one pad to three.
    ``chosen`` (the ``curriculum_levels`` option) names the global curriculum levels to use instead.
    """
    if chosen is not None:
        return _chosen_presets(name, factory, knobs, options, chosen)
    valid: list[tuple[int | None, dict[str, Any]]] = []
    if factory.has_curriculum(name):
        curriculum, depth, context = _curriculum(factory, name)
        for level in range(depth):
            curriculum.set_global_level(level)
            try:
                config = curriculum.generate_configuration({"seed": 0, "size": 1}, context)
                preset = {k.name: json_form(getattr(config, k.name)) for k in knobs}
                check(source_kwargs_from(knobs, preset))
            except Exception:  # the curriculum's own level is invalid: not a preset
                continue
            if preset not in [p for _, p in valid]:
                valid.append((level, preset))
    if not valid:
        valid = [(None, {k.name: k.default for k in knobs})]
    count = min(max(len(valid), MIN_LEVELS), MAX_LEVELS)
    picked = [valid[min(round(i * (len(valid) - 1) / (count - 1)), len(valid) - 1)] for i in range(count)]
    return ([lv for lv, _ in picked], [{**p, **{k: json_form(v) for k, v in options.items()}} for _, p in picked])


def _curriculum(factory: Any, name: str) -> tuple[Any, int, Any]:
    from reasoning_gym.coaching.base_curriculum import DefaultCurriculumContext, RangeAttributeMode

    curriculum = factory.create_curriculum(name)
    depth = max((len(a.levels) for a in curriculum.attributes.values()), default=1)
    return curriculum, depth, DefaultCurriculumContext(mode=RangeAttributeMode.UPPER_BOUND)


def _chosen_presets(
    name: str, factory: Any, knobs: list[Knob], options: dict[str, Any], chosen: Any
) -> tuple[list[int | None], list[dict[str, Any]]]:
    if not factory.has_curriculum(name):
        raise ImportSourceError(f"reasoning-gym dataset {name!r} has no curriculum to choose levels from")
    curriculum, depth, context = _curriculum(factory, name)
    in_range = isinstance(chosen, list) and all(isinstance(c, int) and 0 <= c < depth for c in chosen)
    if not (in_range and len(chosen) >= MIN_LEVELS):
        raise ImportSourceError(
            f"{CHOSEN_LEVELS} = {chosen!r}: expected a list of at least three curriculum levels "
            f"between 0 and {depth - 1}"
        )
    presets = []
    for level in chosen:
        curriculum.set_global_level(level)
        config = curriculum.generate_configuration({"seed": 0, "size": 1}, context)
        presets.append(
            {
                **{k.name: json_form(getattr(config, k.name)) for k in knobs},
                **{k: json_form(v) for k, v in options.items()},
            }
        )
    return list(chosen), presets


def _composite_options(options: dict[str, Any]) -> dict[str, Any]:
    """``composite``'s ``datasets`` option in the form its config takes: names become ``{name, weight, config}``."""
    datasets = options.get("datasets")
    shape = "each a dataset name or an object {name, weight, config}, e.g. --set 'datasets=[gcd, chain_sum]'"
    if datasets is None:
        raise ImportSourceError(
            f"reasoning-gym's composite dataset mixes other datasets and needs them named: "
            f"option datasets, a list of them, {shape}"
        )
    if not isinstance(datasets, list) or not datasets:
        raise ImportSourceError(f"composite: datasets = {datasets!r}: expected a non-empty list, {shape}")
    items = []
    for item in datasets:
        if isinstance(item, str):
            item = {"name": item}
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or set(item) - {"name", "weight", "config"}
        ):
            raise ImportSourceError(f"composite: dataset {item!r}: expected {shape}")
        items.append({"weight": 1.0, "config": {}, **item})
    unknown = [i["name"] for i in items if i["name"] not in _factory().DATASETS or i["name"] == "composite"]
    if unknown:
        raise ImportSourceError(f"composite: {unknown[0]!r} is not a reasoning-gym dataset it can mix")
    return {**options, "datasets": items}


def _levels(
    name: str, model: type[Params], presets: list[dict[str, Any]], options: dict[str, Any]
) -> dict[int, Params]:
    levels: dict[int, Params] = {}
    for i, preset in enumerate(presets, start=1):
        try:
            levels[i] = model.model_validate({**preset, "level": i})
        except ValidationError as exc:
            raise ImportSourceError(
                f"reasoning-gym dataset {name!r}: level {i} of its curriculum with options "
                f"{options} is invalid: {explain(exc)}"
            ) from None
    return levels


def _fit_to_presets(knobs: list[Knob], presets: list[dict[str, Any]]) -> list[Knob]:
    """Knobs widened to hold every preset: an int field the curriculum sets to 0.2 becomes a float, a
    probed lower bound never excludes a preset, and int knobs get the synthesis ceiling."""
    out = []
    for k in knobs:
        values = [k.default, *(p.get(k.name) for p in presets)]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if k.annotation is int and any(isinstance(v, float) and not v.is_integer() for v in numbers):
            k = dataclasses.replace(k, annotation=float)
        if k.ge is not None and numbers and min(numbers) < k.ge:
            k = dataclasses.replace(k, ge=min(numbers))
        if k.annotation is int and numbers and len(numbers) == len(values) and min(numbers) >= 0:
            top = int(max(numbers))
            k = dataclasses.replace(k, le=max(2 * top, top + 10))
        out.append(k)
    return out
