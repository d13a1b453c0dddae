"""Task sources: tasks other people wrote, imported as bootcamps the whole loop uses unchanged.

An import is described by an :class:`ImportSpec` -- a name, an adapter (the kind of source), a source
and options -- and the adapter turns the spec into an ordinary :class:`~campflow.bootcamps.base.Bootcamp`
(params model, levels, tools, score, oracle), so evaluation, mining, synthesis, SFT and RL need no
special case:

======================  ======================================  ==============================================
adapter                 source                                  module
======================  ======================================  ==============================================
``reasoning-gym``       a procedural dataset name               :mod:`~campflow.sources.rgym`
``gymnasium``           an environment id with discrete actions :mod:`~campflow.sources.gym_envs`
``function-calling``    a JSONL file or a saved HF dataset      :mod:`~campflow.sources.function_calling`
``internbootcamp``      a class by dotted path (or file.py:Cls) :mod:`~campflow.sources.class_bootcamps`
``authored``            a module an LLM wrote (campflow author) :mod:`~campflow.sources.authored`
``mcp``                 an MCP server and a task file           :mod:`campflow.mcp.tasks`
``bootcamp``            your own file.py[:Class] (import        :mod:`~campflow.sources.authored`
                        bootcamp)
``verifiers``           a verifiers environment (module or      :mod:`~campflow.sources.verifiers_env`
                        file.py with load_environment)
======================  ======================================  ==============================================

:func:`register_import` puts a spec in the registry (``origin="imported"``) by dotted path plus the
spec as JSON kwargs, so nothing is imported until :func:`~campflow.bootcamps.registry.make` and a
registry entry stays picklable. The adapter's third-party package (reasoning-gym, gymnasium) is
imported only then, never by ``campflow --help``.

Vetting: ``campflow import`` (:func:`campflow.storage.imports.import_bootcamp`) runs
:mod:`~campflow.sources.vetting` on every import before recording it: each level must
generate in time, the same instance must be the same task in two processes with different hash seeds,
a scorer must not give full marks to nonsense; failing levels are dropped and what was measured (the
levels kept, a raised wrong-answer bound) goes into the recorded spec's options.

Versions: every adapter computes its bootcamp's ``version`` from its own revision and the source's
(the package version, or a hash of the file or module), so instance ids change when the source does.
``ImportSpec.version`` records the version seen at import time.

Persistence lives in :mod:`campflow.storage.imports`: imports are written to the store's
``imported_bootcamps`` table and loaded back into the registry by the workspace
(:class:`campflow.storage.workspace.Workspace`) when a name is not registered. Rollout shards that
run in other processes receive the specs as a task argument and call :func:`ensure_registered` before
rebuilding instances.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp
from campflow.errors import ImportSourceError

AdapterName = Literal[
    "reasoning-gym", "gymnasium", "function-calling", "internbootcamp", "authored", "mcp", "bootcamp", "verifiers"
]

#: adapter name -> "module:function" building a Bootcamp from an ImportSpec
ADAPTERS: dict[str, str] = {
    "reasoning-gym": "campflow.sources.rgym:build",
    "gymnasium": "campflow.sources.gym_envs:build",
    "function-calling": "campflow.sources.function_calling:build",
    "internbootcamp": "campflow.sources.class_bootcamps:build",
    "authored": "campflow.sources.authored:build",
    "mcp": "campflow.mcp.tasks:build",
    "bootcamp": "campflow.sources.authored:build_own",
    "verifiers": "campflow.sources.verifiers_env:build",
}

#: name prefix of each adapter's default bootcamp names (``rg-basic_arithmetic``, ``gym-Taxi-v4``)
NAME_PREFIX: dict[str, str] = {
    "reasoning-gym": "rg",
    "gymnasium": "gym",
    "function-calling": "fc",
    "internbootcamp": "ib",
    "authored": "au",
    "mcp": "mcp",
    "bootcamp": "own",
    "verifiers": "vf",
}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")
_BUILD_TARGET = "campflow.sources:build_bootcamp"


class ImportSpec(BaseModel):
    """What one import is: the bootcamp's name, the adapter, the source and the adapter's options.

    ``options`` are the source's own knobs set at import time (reasoning-gym config fields, environment
    kwargs, constructor arguments of a class); they become the defaults of every level.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="registry name of the bootcamp, e.g. rg-basic_arithmetic")
    adapter: AdapterName = Field(description="which adapter turns the source into a bootcamp")
    source: str = Field(min_length=1, description="dataset name, environment id, file path or dotted class path")
    options: dict[str, Any] = Field(default_factory=dict, description="source knobs fixed at import time")
    version: str = Field("", description="the bootcamp version when it was imported (set by the import)")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(
                f"bootcamp name {v!r} must be 1-100 letters, digits, '_', '-' or '.', starting with a letter or digit"
            )
        return v


def default_name(adapter: str, source: str) -> str:
    """The name an import gets unless one is given: adapter prefix plus the source's short name."""
    short = re.split(r"[/\\:]", source.rstrip("/\\"))[-1]
    short = re.sub(r"\.(jsonl|json|py)$", "", short)
    if adapter == "internbootcamp":
        short = short.rsplit(".", 1)[-1]
    short = re.sub(r"[^A-Za-z0-9_.\-]", "_", short) or "source"
    return f"{NAME_PREFIX[adapter]}-{short}"


def parse_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``["max_terms=4", "operators=[+, -]"]`` -> options, each value read as YAML (``4``, ``true``, lists).

    Raises:
        ImportSourceError: for an item without ``=``.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ImportSourceError(f"option {pair!r} is not of the form key=value")
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = raw  # not YAML: keep the text as given
    return out


def build_bootcamp(spec: Mapping[str, Any] | ImportSpec) -> Bootcamp:
    """Build the bootcamp an import spec describes (the registry's factory for imported entries).

    Raises:
        ImportSourceError: when the source cannot become a bootcamp; the message names the source.
    """
    spec = spec if isinstance(spec, ImportSpec) else ImportSpec.model_validate(dict(spec))
    module, _, attr = ADAPTERS[spec.adapter].partition(":")
    builder = getattr(importlib.import_module(module), attr)
    return builder(spec)


def register_import(spec: ImportSpec, *, replace: bool = False) -> None:
    """Put ``spec`` in the registry with ``origin="imported"``; nothing is built until ``make``."""
    registry.register(spec.name, _BUILD_TARGET, kwargs={"spec": _spec_key(spec)}, origin="imported", replace=replace)


def ensure_registered(specs: Sequence[ImportSpec] | None) -> None:
    """Register each spec unless the registry already holds exactly it (rollout workers call this).

    An entry with the same name but another spec is replaced, so a worker that outlives a re-import
    never rebuilds instances from the stale source. Built-in bootcamps are never replaced.
    """
    for spec in specs or ():
        entry = next((e for e in registry.entries() if e.name == spec.name), None)
        if entry is not None and entry.origin != "imported":
            raise ImportSourceError(f"imported bootcamp {spec.name!r} clashes with a {entry.origin} bootcamp")
        if entry is None or entry.kwargs.get("spec") != _spec_key(spec):
            register_import(spec, replace=True)


def registered_imports() -> list[ImportSpec]:
    """The specs of every imported bootcamp in this process's registry (to ship to rollout workers)."""
    return [
        ImportSpec.model_validate(e.kwargs["spec"])
        for e in registry.entries()
        if e.origin == "imported" and "spec" in e.kwargs
    ]


def _spec_key(spec: ImportSpec) -> dict[str, Any]:
    # version is what the import saw, not an input of the build: two specs differing only in it build
    # the same bootcamp, so it is left out of the registry entry
    return spec.model_dump(mode="json", exclude={"version"})
