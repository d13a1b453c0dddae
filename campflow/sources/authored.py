"""The ``authored`` adapter: a bootcamp module an LLM wrote (``campflow author``), loaded from its file.

The spec's ``source`` is the module's file in the workspace and ``options["sha256"]`` the hash of the
source the contract accepted: a file that no longer hashes to it is refused, so what runs is what was
checked. The module must define exactly one :class:`~campflow.bootcamps.base.Bootcamp` subclass; the
bootcamp built is a subclass of it carrying the spec's name and a version made of this adapter's
revision and the source hash, so an edited module never shares instance ids with the one before.

The sandboxed contract run (:mod:`campflow.authoring.checks`) builds the module through this same
function, so the bootcamp it checked and the one evaluation later plays are built alike.

The ``bootcamp`` adapter (:func:`build_own`, ``campflow import bootcamp FILE.py[:Class]``) is the same
for a file a user wrote: it stays where the user keeps it, ``options["class"]`` names the class where the
file defines several, the version is the class's own plus the source hash, and an edited file is
refused with the command that imports it again.

Which classes count is decided by the classes themselves (:func:`defined_classes`): those the module
defines (not those it imports: a file that imports ``Calculator`` to subclass it has the built-in in its
namespace too) that are Bootcamp subclasses, however they derive (``class Zero(Calculator)``,
``class Notes(McpBootcamp[NotesParams])``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from campflow.bootcamps.base import Bootcamp
from campflow.errors import ImportSourceError

if TYPE_CHECKING:
    from campflow.sources import ImportSpec

REVISION = "1"  # bump when how a module becomes a bootcamp changes
HASH_OPTION = "sha256"
CLASS_OPTION = "class"


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
            define exactly one Bootcamp subclass (or the one ``options["class"]`` names). An exception from
            the module's own code propagates as it is (the contract run reports it with its traceback).
    """
    return _build(
        spec, "authored bootcamp", "accepted", "run campflow author again", lambda cls, sha: authored_version(sha)
    )


def build_own(spec: ImportSpec) -> Bootcamp:
    """The bootcamp of a user's own file ``spec.source`` (``campflow import bootcamp``), after checking its hash.

    Raises:
        ImportSourceError: the file is missing, or changed since it was imported (naming the command that
            imports it again), or does not define the Bootcamp subclass recorded.
    """
    again = f"campflow import bootcamp {spec.source}"
    if spec.options.get(CLASS_OPTION):
        again += f":{spec.options[CLASS_OPTION]}"
    again += f" --replace{_as_name(spec)}"
    return _build(spec, "bootcamp", "imported", f"import it again with `{again}`", own_version)


def own_version(cls: type[Bootcamp], sha256: str) -> str:
    """The version of a user's bootcamp built from a file with this source hash: the class's own, then the hash."""
    return f"{cls.version}.{sha256[:12]}"


def _as_name(spec: ImportSpec) -> str:
    return f" --as {spec.name}" if spec.options.get("as") else ""


def _build(
    spec: ImportSpec, kind: str, checked: str, again: str, version: Callable[[type[Bootcamp], str], str]
) -> Bootcamp:
    path = Path(spec.source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportSourceError(f"{kind} {spec.name!r}: its module {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportSourceError(f"{kind} {spec.name!r}: cannot read {path}: {exc}") from None
    sha = source_sha256(text)
    expected = spec.options.get(HASH_OPTION)
    if expected is not None and expected != sha:
        raise ImportSourceError(
            f"{kind} {spec.name!r}: {path} has changed since it was {checked} (sha256 {sha[:12]}, "
            f"{checked} {str(expected)[:12]}); {again}"
        )
    module = _load(path, f"campflow_authored_{_ident(spec.name)}_{sha[:12]}")
    cls = _bootcamp_class(spec.name, module, path, spec.options.get(CLASS_OPTION))
    named = type(
        cls.__name__,
        (cls,),
        {
            "name": spec.name,
            "version": version(cls, sha),
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


def load_module(path: Path, module_name: str) -> ModuleType:
    """Execute the file ``path`` as the module ``module_name`` (once per process: a second call returns it).

    Raises:
        ImportSourceError: the file cannot be loaded as a Python module. An exception from the module's
            own code propagates as it is.
    """
    return _load(path, module_name)


def defined_classes(module: ModuleType) -> dict[str, type]:
    """The classes ``module`` itself defines (not those it imports), by the name it binds them to, in
    definition order."""
    return {
        attr: value
        for attr, value in vars(module).items()
        if inspect.isclass(value) and value.__module__ == module.__name__
    }


def _bootcamp_class(name: str, module: ModuleType, path: Path, wanted: str | None = None) -> type[Bootcamp]:
    defined = {attr: cls for attr, cls in defined_classes(module).items() if issubclass(cls, Bootcamp)}
    if wanted is not None:
        if wanted not in defined:
            raise ImportSourceError(f"bootcamp {name!r}: {path.name} defines no Bootcamp subclass {wanted}")
        return defined[wanted]
    if len(defined) != 1:
        found = ", ".join(defined) or "none"
        raise ImportSourceError(
            f"authored bootcamp {name!r}: {path.name} must define exactly one Bootcamp subclass; found {found}"
        )
    return next(iter(defined.values()))


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
