"""Finding an InternBootcamp-style class and what it says about itself: its module, summary and level files.

Loading (:func:`load_class`): ``package.module:Class``, ``package.module.Class`` or ``path/file.py:Class``.
A file is loaded as a module of its own. InternBootcamp's Codeforces-derived classes import their base
class as ``from bootcamp import Basebootcamp``, which works only with the package's inner
``internbootcamp/`` folder on ``sys.path``; the package's own ``__init__`` puts it there as a side
effect of importing ``arc_default``, a file loaded alone does not. So when a source fails to import
because a top-level module is missing, and that module is a folder or file beside one of the source
file's ancestors (or inside the source package's own folder), that ancestor is appended to
``sys.path`` and the import retried. Appended, never prepended: an installed package of the same
name wins, and the folders stay on the path because the classes import lazily from them too.

Summary (:func:`class_summary`): the class's *own* docstring (never one inherited from
``Basebootcamp``, which says "Base class for bootcamp implementations." for every class), else the
problem statement in its module docstring (the Codeforces-derived modules carry it under a
``### 谜题描述`` heading, after the instructions given to the LLM that wrote the class), else a line
pointing at the user message, which holds the class's own prompt.

Levels (:func:`read_levels_file`): InternBootcamp's difficulty presets are JSON lists of constructor
arguments, one object per level (``examples/pipelines/puzzle_configs/*_train.json``,
``autogen_configs/*.json``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from campflow.errors import ImportSourceError

STATEMENT_HEADING = "### 谜题描述"  # "puzzle description", InternBootcamp's heading for the problem statement
_STATEMENT_ENDS = ("Here is a reference code", "```", "请完成", "#")  # what follows the statement
SUMMARY_CHARS = 400
_RESOLVE_ROUNDS = 4  # missing top-level modules resolved per import (bootcamp, then internbootcamp, ...)


def load_class(source: str) -> type:
    """The class at ``module:Class``, ``module.Class`` or ``file.py:Class`` (ImportSourceError if not there)."""
    if ":" in source:
        module_name, attr = source.rsplit(":", 1)
    else:
        module_name, _, attr = source.rpartition(".")
    if not module_name or not attr:
        raise ImportSourceError(f"class source {source!r}: expected package.module:Class or path/to/file.py:Class")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise ImportSourceError(f"class source file {path} does not exist")
            path = path.resolve()
            module = _resolving(lambda: _module_from_file(path), lambda: path.parents)
        else:
            module = _resolving(lambda: importlib.import_module(module_name), lambda: _package_dirs(module_name))
    except ImportSourceError:
        raise
    except Exception as exc:  # an import error in user code, reported on one line
        raise ImportSourceError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    cls = getattr(module, attr, None)
    if not inspect.isclass(cls):
        raise ImportSourceError(f"{module_name} has no class {attr!r}")
    return cls


def _resolving(load: Callable[[], Any], homes: Callable[[], Sequence[Path]]) -> Any:
    """``load()``, appending to sys.path the source's own folder that holds a module it misses (see above)."""
    for _ in range(_RESOLVE_ROUNDS):
        try:
            return load()
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            home = next((d for d in homes() if top and _holds(d, top)), None)
            if home is None or str(home) in sys.path:
                raise
            sys.path.append(str(home))
    return load()


def _holds(folder: Path, top: str) -> bool:
    return (folder / top).is_dir() or (folder / f"{top}.py").is_file()


def _package_dirs(module_name: str) -> list[Path]:
    try:
        spec = importlib.util.find_spec(module_name.split(".")[0])
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []


def _module_from_file(path: Path) -> Any:
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


def class_summary(cls: type) -> str:
    """The one-line task summary of an InternBootcamp-style class (see the module docstring for the order)."""
    own = cls.__dict__.get("__doc__")
    text = _paragraphs(own)[0] if own and _paragraphs(own) else ""
    if not text:
        module = sys.modules.get(cls.__module__)
        text = problem_statement(getattr(module, "__doc__", None) or "")
    if not text:
        short = re.sub(r"bootcamp$", "", cls.__name__) or cls.__name__
        text = f"Solve the {short} task posed in the user message."
    return _shortened(text)


def problem_statement(doc: str) -> str:
    """The first paragraph of the problem statement in a module docstring, or "" when it has none.

    A docstring with InternBootcamp's statement heading gives the text under it; one that opens with
    a Markdown heading is the brief given to the LLM that wrote the class, not a statement, and gives "".
    """
    if STATEMENT_HEADING in doc:
        section = doc.split(STATEMENT_HEADING, 1)[1]
        lines = []
        for line in section.splitlines():
            if line.strip().startswith(_STATEMENT_ENDS):
                break
            lines.append(line)
        paragraphs = _paragraphs("\n".join(lines))
        return paragraphs[0] if paragraphs else ""
    paragraphs = _paragraphs(doc)
    if not paragraphs or paragraphs[0].startswith("#"):
        return ""
    return paragraphs[0]


def _paragraphs(text: str | None) -> list[str]:
    cleaned = inspect.cleandoc(text or "").replace("**", "")
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", cleaned) if p.strip()]


def _shortened(text: str) -> str:
    if len(text) <= SUMMARY_CHARS:
        return text
    cut = text[:SUMMARY_CHARS]
    end = cut.rfind(". ")
    return cut[: end + 1] if end > SUMMARY_CHARS // 3 else cut.rstrip() + "..."


def read_levels_file(path: Path) -> list[dict[str, Any]]:
    """The levels in an InternBootcamp config file: a JSON list of constructor-argument objects.

    An empty list means the constructor's defaults, as in InternBootcamp's own data generator.

    Raises:
        ImportSourceError: the file is missing, not JSON, or not a list of objects.
    """
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ImportSourceError(f"levels file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ImportSourceError(f"levels file {path} is not JSON: {exc}") from None
    if not isinstance(raw, list) or not all(isinstance(entry, dict) for entry in raw):
        raise ImportSourceError(
            f"levels file {path}: expected a JSON list of objects of constructor arguments "
            "(as in InternBootcamp's examples/pipelines/*_configs/*.json)"
        )
    return raw or [{}]
