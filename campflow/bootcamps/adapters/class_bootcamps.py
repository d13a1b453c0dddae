"""InternBootcamp-style classes: ``case_generator``, ``prompt_func`` and ``verify_score`` become a bootcamp.

The convention (InternBootcamp's ``Basebootcamp``): the class is constructed with keyword arguments
(its difficulty knobs), ``case_generator()`` returns an *identity* dict, ``prompt_func(identity)``
the task text, and ``verify_score(model_output, identity, ...)`` a score (a float, or a bool). Any of
them may be instance, class or static methods. Here:

    source  ``package.module:Class``, ``package.module.Class`` or ``path/to/file.py:Class``.
    params  the constructor's keyword arguments with JSON defaults (options set them at import);
            three levels, all the defaults, since the convention has no difficulty presets.
    seeds   ``case_generator`` (and ``prompt_func``, which may pick a template at random) run with
            ``random`` and ``numpy.random`` seeded from the instance's rng, under a lock and with the
            previous global states restored afterwards, on a freshly constructed object (so a generator
            that keeps state between calls still reproduces); an ``rng``/``random``/``_rng`` attribute
            holding a ``random.Random`` is reseeded too. The identity must be JSON.
    reward  ``verify_score(answer, identity)``, clipped to [0, 1]; success is a full score. Where
            ``verify_score`` takes InternBootcamp's ``short_penalty``/``format_penalty`` flags they
            are turned off: the answer arrives through ``submit``, not as a long ``<think>`` reply. An
            ``extract_output`` method, if present, reports what it read from a failed answer.
    oracle  ``oracle_answer(identity)`` or ``solve(identity)`` if the class has one. A class without
            either can be evaluated but has no oracle: the oracle raises ImportSourceError, so teacher
            collection records those episodes as ``infra_error`` and never trains on them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import json
import random
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from campflow.bootcamps.adapters import ImportSpec
from campflow.bootcamps.adapters.single_turn import AnswerBootcamp, answer_instructions
from campflow.bootcamps.adapters.source_params import Knob, json_form, knob, params_model, source_kwargs
from campflow.bootcamps.base import Bootcamp, Instance, Params, Score, State
from campflow.errors import ImportSourceError

ADAPTER_REVISION = "1"
REQUIRED = ("case_generator", "prompt_func", "verify_score")
ORACLES = ("oracle_answer", "solve")
_GLOBAL_RNG = threading.Lock()  # seeding the global generators must not interleave across threads


def build(spec: ImportSpec) -> Bootcamp:
    """The bootcamp for the class at ``spec.source`` (raises ImportSourceError for a bad source)."""
    cls = load_class(spec.source)
    missing = [m for m in REQUIRED if not callable(getattr(cls, m, None))]
    if missing:
        raise ImportSourceError(f"{spec.source} has no {missing[0]}(); an InternBootcamp-style class needs "
                                f"{', '.join(REQUIRED)}")
    knobs = _constructor_knobs(cls)
    unknown = sorted(set(spec.options) - {k.name for k in knobs})
    if unknown:
        raise ImportSourceError(f"{spec.source} takes no keyword argument {unknown[0]!r}; it takes: "
                                f"{', '.join(k.name for k in knobs) or 'none'}")
    knobs = [dataclasses.replace(k, default=json_form(spec.options[k.name])) if k.name in spec.options else k
             for k in knobs]
    model = params_model(f"{cls.__name__}Params", knobs,
                         doc=f"Constructor arguments of {cls.__name__}, plus the level.")
    levels = {i: model(level=i) for i in (1, 2, 3)}
    summary = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ").strip()
    summary = summary or f"Solve a {cls.__name__} task."
    doc = (f"{summary}\n\n{answer_instructions()}\n\n"
           f"Imported from the InternBootcamp-style class {spec.source}; reward is its verify_score.")
    bootcamp_cls = type(f"Imported_{cls.__name__}", (ClassBootcamp,), {
        "__doc__": doc, "name": spec.name, "version": f"ib{ADAPTER_REVISION}-{_source_hash(cls)}",
        "params_model": model, "levels": levels, "__module__": __name__,
    })
    return bootcamp_cls(cls, knobs)


class ClassBootcamp(AnswerBootcamp):
    """An InternBootcamp-style class as a bootcamp (one dynamic subclass per import; see the module docstring)."""

    def __init__(self, source_cls: type, knobs: list[Knob]) -> None:
        self.source_cls = source_cls
        self.knobs = knobs
        self._objects: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._verify_flags = _verify_flags(source_cls.verify_score)

    def build(self, params: Params, rng: random.Random) -> dict[str, Any]:
        seed = rng.randrange(2**31)
        kwargs = source_kwargs(params, self.knobs)
        with _GLOBAL_RNG:
            saved = _global_states()
            try:
                _seed_globals(seed)
                obj = self.source_cls(**kwargs)
                for attr in ("rng", "random", "_rng"):
                    if isinstance(getattr(obj, attr, None), random.Random):
                        getattr(obj, attr).seed(seed)
                identity = obj.case_generator()
                prompt = obj.prompt_func(identity)
            finally:
                _restore_globals(saved)
        try:
            identity = json.loads(json.dumps(identity))
        except (TypeError, ValueError) as exc:
            raise ImportSourceError(f"{self.source_cls.__name__}.case_generator() returned an identity that is not "
                                    f"JSON ({exc})") from None
        return {"identity": identity, "prompt": str(prompt), "case_seed": seed}

    def question(self, instance: Instance) -> str:
        return instance.data["prompt"]

    def grade(self, instance: Instance, answer: str) -> float:
        obj = self._object(instance.params)
        return float(obj.verify_score(answer, instance.data["identity"], **self._verify_flags))

    def reference(self, instance: Instance) -> str:
        obj = self._object(instance.params)
        for name in ORACLES:
            method = getattr(obj, name, None)
            if callable(method):
                return str(method(instance.data["identity"]))
        wanted = " or ".join(f"{n}(identity)" for n in ORACLES)
        raise ImportSourceError(f"{self.source_cls.__name__} has no {wanted}, "
                                f"so the imported bootcamp {self.name!r} has no oracle")

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
                obj = self.source_cls(**source_kwargs(params, self.knobs))
                self._objects[key] = obj
                while len(self._objects) > 64:
                    self._objects.popitem(last=False)
        return obj


def load_class(source: str) -> type:
    """The class at ``module:Class``, ``module.Class`` or ``file.py:Class``."""
    if ":" in source:
        module_name, attr = source.rsplit(":", 1)
    else:
        module_name, _, attr = source.rpartition(".")
    if not module_name or not attr:
        raise ImportSourceError(f"class source {source!r}: expected package.module:Class or path/to/file.py:Class")
    try:
        module = _module_from_file(Path(module_name)) if module_name.endswith(".py") else \
            importlib.import_module(module_name)
    except ImportSourceError:
        raise
    except Exception as exc:  # an import error in user code, reported on one line
        raise ImportSourceError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    cls = getattr(module, attr, None)
    if not inspect.isclass(cls):
        raise ImportSourceError(f"{module_name} has no class {attr!r}")
    return cls


def _module_from_file(path: Path) -> Any:
    if not path.is_file():
        raise ImportSourceError(f"class source file {path} does not exist")
    path = path.resolve()
    name = "campflow_imported_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _constructor_knobs(cls: type) -> list[Knob]:
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return []
    knobs = []
    for p in signature.parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is inspect.Parameter.empty:
            continue
        annotation = Any if p.annotation is inspect.Parameter.empty else p.annotation
        k = knob(p.name, annotation, p.default, f"{cls.__name__} constructor argument {p.name}")
        if k is not None and p.name != "level":
            knobs.append(k)
    return knobs


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


def _global_states() -> tuple[Any, Any]:
    np = sys.modules.get("numpy")
    return random.getstate(), (np.random.get_state() if np is not None else None)


def _seed_globals(seed: int) -> None:
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed)


def _restore_globals(saved: tuple[Any, Any]) -> None:
    random.setstate(saved[0])
    np = sys.modules.get("numpy")
    if np is not None and saved[1] is not None:
        np.random.set_state(saved[1])
