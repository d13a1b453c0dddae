"""The bootcamp registry: names to lazily imported classes.

Bootcamps register by dotted path, so listing names costs nothing and only the bootcamps a run uses
are imported (InternBootcamp's eager imports take seconds; ours do not).
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
    modality: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    origin: str = "builtin"


_REGISTRY: dict[str, Entry] = {}
_CACHE: dict[str, Bootcamp] = {}

BUILTIN: dict[str, tuple[str, str]] = {
    # text
    "calculator": ("campflow.bootcamps.calculator:Calculator", "text"),
    "maze": ("campflow.bootcamps.maze:Maze", "text"),
    "filesystem": ("campflow.bootcamps.filesystem:Filesystem", "text"),
    "sql": ("campflow.bootcamps.sql:Sql", "text"),
    "shop": ("campflow.bootcamps.shop:Shop", "text"),
    "calendar": ("campflow.bootcamps.calendar:Calendar", "text"),
    "wordle": ("campflow.bootcamps.wordle:Wordle", "text"),
    # vision
    "gridworld": ("campflow.bootcamps.gridworld:Gridworld", "vision"),
    "chart": ("campflow.bootcamps.chart:Chart", "vision"),
    "gui": ("campflow.bootcamps.gui:Gui", "vision"),
}


def register(
    name: str,
    target: str | Callable[..., Bootcamp],
    *,
    modality: str = "text",
    kwargs: Mapping[str, Any] | None = None,
    origin: str = "user",
    replace: bool = False,
) -> None:
    """Register a bootcamp under ``name``, to be built by :func:`make` on first use.

    Args:
        name: the registry name; the bootcamp built must call itself this (its ``name`` attribute).
        target: ``"package.module:Class"`` (imported on first :func:`make`, so registering costs nothing
            and works in worker processes) or a callable returning the bootcamp, such as the class.
        modality: ``"text"`` or ``"vision"``, as the bootcamp's own ``modality`` says.
        kwargs: keyword arguments for ``target``.
        origin: where the bootcamp comes from, as ``campflow bootcamps list`` shows it: ``"builtin"``,
            ``"imported"`` (adapters) or ``"user"`` (the default: registered by your own code).
        replace: replace an entry of the same name instead of refusing it.

    Raises:
        ValueError: if ``name`` is registered already and ``replace`` is False.
    """
    if name in _REGISTRY and not replace:
        raise ValueError(f"bootcamp {name!r} is already registered")
    _REGISTRY[name] = Entry(name, target, modality, dict(kwargs or {}), origin)
    _CACHE.pop(name, None)


def unregister(name: str) -> None:
    """Forget a registered bootcamp (used for imported ones that were removed)."""
    _REGISTRY.pop(name, None)
    _CACHE.pop(name, None)


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
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise UnknownBootcampError(
            f"unknown bootcamp {name!r}; expected one of: {', '.join(sorted(_REGISTRY))}"
        ) from None
    factory = entry.target
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    bootcamp = factory(**entry.kwargs)
    if bootcamp.name != name:
        raise ValueError(f"bootcamp registered as {name!r} calls itself {bootcamp.name!r}")
    _CACHE[name] = bootcamp
    return bootcamp


def parse_names(spec: str | list[str]) -> list[str]:
    """Split ``"calculator,maze"`` (or ``all``) into registered names, validating each."""
    items = spec if isinstance(spec, list) else [s.strip() for s in spec.split(",")]
    items = [s for s in items if s]
    if items == ["all"]:
        return names()
    unknown = [s for s in items if s not in _REGISTRY]
    if unknown:
        raise UnknownBootcampError(
            f"unknown bootcamp {unknown[0]!r}; expected one of: {', '.join(sorted(_REGISTRY))}"
        )
    if not items:
        raise UnknownBootcampError("no bootcamp named; expected a comma-separated list such as calculator,maze")
    return items


for _name, (_target, _modality) in BUILTIN.items():
    register(_name, _target, modality=_modality, origin="builtin")
