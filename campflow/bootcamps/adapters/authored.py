"""The ``authored`` adapter: a bootcamp module an LLM wrote (``campflow author``), loaded from its file.

The spec's ``source`` is the module's file in the workspace and ``options["sha256"]`` the hash of the
source the contract accepted: a file that no longer hashes to it is refused, so what runs is what was
checked. The module must define exactly one :class:`~campflow.bootcamps.base.Bootcamp` subclass; the
bootcamp built is a subclass of it carrying the spec's name and a version made of this adapter's
revision and the source hash, so an edited module never shares instance ids with the one before.

The sandboxed contract run (:mod:`campflow.authoring.checks`) builds the module through this same
function, so the bootcamp it checked and the one evaluation later plays are built alike.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from campflow.bootcamps.base import Bootcamp
from campflow.errors import ImportSourceError

if TYPE_CHECKING:
    from campflow.bootcamps.adapters import ImportSpec

REVISION = "1"  # bump when how a module becomes a bootcamp changes
HASH_OPTION = "sha256"


def source_sha256(text: str) -> str:
    """The hash an authored module is known by: SHA-256 of its UTF-8 source."""
    return hashlib.sha256(text.encode()).hexdigest()


def authored_version(sha256: str) -> str:
    """The version of the bootcamp built from the module with this source hash."""
    return f"{REVISION}.{sha256[:12]}"


def build(spec: ImportSpec) -> Bootcamp:
    """The bootcamp of the authored module ``spec.source``, after checking its hash.

    Raises:
        ImportSourceError: the file is missing or changed since it was accepted, or the module does not
            define exactly one Bootcamp subclass. An exception from the module's own code propagates as
            it is (the contract run reports it with its traceback).
    """
    path = Path(spec.source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportSourceError(f"authored bootcamp {spec.name!r}: its module {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportSourceError(f"authored bootcamp {spec.name!r}: cannot read {path}: {exc}") from None
    sha = source_sha256(text)
    expected = spec.options.get(HASH_OPTION)
    if expected is not None and expected != sha:
        raise ImportSourceError(
            f"authored bootcamp {spec.name!r}: {path} has changed since it was accepted (sha256 {sha[:12]}, "
            f"accepted {str(expected)[:12]}); run campflow author again"
        )
    cls = _bootcamp_class(spec.name, _load(path, f"campflow_authored_{_ident(spec.name)}_{sha[:12]}"), path)
    named = type(
        cls.__name__,
        (cls,),
        {
            "name": spec.name,
            "version": authored_version(sha),
            "__doc__": cls.__doc__,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        },
    )
    return named()


def _load(path: Path, module_name: str) -> ModuleType:
    if module_name in sys.modules:  # the same source, loaded before in this process
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportSourceError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # pydantic resolves the module's annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _bootcamp_class(name: str, module: ModuleType, path: Path) -> type[Bootcamp]:
    defined = [
        v
        for v in vars(module).values()
        if inspect.isclass(v) and issubclass(v, Bootcamp) and v.__module__ == module.__name__
    ]
    if len(defined) != 1:
        found = ", ".join(c.__name__ for c in defined) or "none"
        raise ImportSourceError(
            f"authored bootcamp {name!r}: {path.name} must define exactly one Bootcamp subclass; found {found}"
        )
    return defined[0]


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
