"""The bootcamp registry: names to lazily imported classes.

Bootcamps register by dotted path, so listing names costs nothing and only the bootcamps a run uses
are imported (InternBootcamp's eager imports take seconds; ours do not). An entry states where its
class lives, never what the class says of itself: :attr:`Entry.modality` is read from the class.

A name that is not registered is not yet an error: the registry first asks its resolver, if one is
installed, to register more (:func:`set_resolver`). The workspace installs one that loads the
bootcamps imported into its store (:class:`campflow.storage.workspace.Workspace`); the registry
itself knows nothing of stores.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from campflow.bootcamps.base import Bootcamp
from campflow.errors import UnknownBootcampError


@dataclass(frozen=True)
class Entry:
    """A registered bootcamp: where its class lives and how to build it."""

    name: str
    target: str | Callable[..., Bootcamp]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    origin: str = "builtin"

    def factory(self) -> Callable[..., Bootcamp]:
        """The class (or callable) that builds the bootcamp, imported now if registered by dotted path."""
        if not isinstance(self.target, str):
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    @property
    def modality(self) -> str:
        """``"text"`` or ``"vision"``, as the bootcamp's class says (imported, not built); a factory that
        is not a class is built (once per process) to ask."""
        factory = self.factory()
        if isinstance(factory, type) and issubclass(factory, Bootcamp):
            return factory.modality
        return make(self.name).modality


_REGISTRY: dict[str, Entry] = {}
_CACHE: dict[str, Bootcamp] = {}
_RESOLVER: Callable[[], object] | None = None  # asked to register more when a name is missing
_SEARCHED: str | None = None  # what the resolver searched, for the unknown-name message

#: the built-in bootcamps: name -> ``module:Class`` (each a package, see :mod:`campflow.bootcamps`)
BUILTIN: dict[str, str] = {
    "calculator": "campflow.bootcamps.calculator:Calculator",
    "maze": "campflow.bootcamps.maze:Maze",
    "filesystem": "campflow.bootcamps.filesystem:Filesystem",
    "sql": "campflow.bootcamps.sql:Sql",
    "shop": "campflow.bootcamps.shop:Shop",
    "calendar": "campflow.bootcamps.calendar:Calendar",
    "wordle": "campflow.bootcamps.wordle:Wordle",
    "gridworld": "campflow.bootcamps.gridworld:Gridworld",
    "chart": "campflow.bootcamps.chart:Chart",
    "gui": "campflow.bootcamps.gui:Gui",
}


def register(
    name: str,
    target: str | Callable[..., Bootcamp],
    *,
    kwargs: Mapping[str, Any] | None = None,
    origin: str = "user",
    replace: bool = False,
) -> None:
    """Register a bootcamp under ``name``, to be built by :func:`make` on first use.

    Args:
        name: the registry name; the bootcamp built must call itself this (its ``name`` attribute).
        target: ``"package.module:Class"`` (imported on first :func:`make`, so registering costs nothing
            and works in worker processes) or a callable returning the bootcamp, such as the class.
        kwargs: keyword arguments for ``target``.
        origin: where the bootcamp comes from, as ``campflow bootcamps list`` shows it: ``"builtin"``,
            ``"imported"`` (adapters) or ``"user"`` (the default: registered by your own code).
        replace: replace an entry of the same name instead of refusing it.

    Raises:
        ValueError: if ``name`` is registered already and ``replace`` is False.
    """
    if name in _REGISTRY and not replace:
        raise ValueError(f"bootcamp {name!r} is already registered")
    _REGISTRY[name] = Entry(name, target, dict(kwargs or {}), origin)
    _CACHE.pop(name, None)


def unregister(name: str) -> None:
    """Forget a registered bootcamp (used for imported ones that were removed)."""
    _REGISTRY.pop(name, None)
    _CACHE.pop(name, None)


def set_resolver(resolver: Callable[[], object] | None, searched: str | None = None) -> None:
    """Install ``resolver`` (replacing any other; None removes it): called with no arguments whenever
    :func:`make` or :func:`parse_names` meets a name that is not registered, or is asked for ``all``,
    to register the bootcamps it knows. It must be cheap to call again (load once, then return).
    ``searched`` says where it looks (``the workspace /data/ws``), for the message of an unknown name."""
    global _RESOLVER, _SEARCHED
    _RESOLVER, _SEARCHED = resolver, searched


def current_resolver() -> Callable[[], object] | None:
    """The installed resolver, or None."""
    return _RESOLVER


def _resolve() -> None:
    if _RESOLVER is not None:
        _RESOLVER()


def names() -> list[str]:
    """All registered bootcamp names, in registration order."""
    return list(_REGISTRY)


def entries() -> list[Entry]:
    """All registry entries, without importing any bootcamp."""
    return list(_REGISTRY.values())


def make(name: str) -> Bootcamp:
    """The bootcamp registered as ``name`` (built once per process)."""
    if name in _CACHE:
        return _CACHE[name]
    if name not in _REGISTRY:
        _resolve()
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise UnknownBootcampError(_unknown(name)) from None
    bootcamp = entry.factory()(**entry.kwargs)
    if bootcamp.name != name:
        raise ValueError(f"bootcamp registered as {name!r} calls itself {bootcamp.name!r}")
    _CACHE[name] = bootcamp
    return bootcamp


def parse_names(spec: str | list[str]) -> list[str]:
    """Split ``"calculator,maze"`` (or ``all``) into registered names, validating each."""
    items = spec if isinstance(spec, list) else [s.strip() for s in spec.split(",")]
    items = [s for s in items if s]
    if items == ["all"] or any(s not in _REGISTRY for s in items):
        _resolve()
    if items == ["all"]:
        return names()
    unknown = [s for s in items if s not in _REGISTRY]
    if unknown:
        raise UnknownBootcampError(_unknown(unknown[0]))
    if not items:
        raise UnknownBootcampError("no bootcamp named; expected a comma-separated list such as calculator,maze")
    return items


def _unknown(name: str) -> str:
    where = f"; searched {_SEARCHED}" if _RESOLVER is not None and _SEARCHED else ""
    return (
        f"unknown bootcamp {name!r}; expected one of: {', '.join(sorted(_REGISTRY))}{where}; "
        "to add a bootcamp file of your own: campflow import bootcamp FILE.py --workspace DIR"
    )


for _name, _target in BUILTIN.items():
    register(_name, _target, origin="builtin")
