"""A bootcamp file a user wrote: read it, check it in the sandbox, import it into a workspace.

``campflow bootcamps check FILE.py[:Class]`` (:func:`check_bootcamp`, ``campflow.check``) runs the
contract on the file in the same two sandboxed processes ``campflow author`` uses
(:func:`~campflow.authoring.contract_run.run_contract`), with no model involved, plus the
demonstrator's grounding on every level; where ``integrity.hacker`` names a model, its adversarial pass
follows in this process once every sandboxed check held (check ``hacker``). A built-in name (``campflow bootcamps check calculator``) is
checked the same way, built from the registry inside the sandbox.

``campflow import bootcamp FILE.py[:Class]`` (:func:`import_own_bootcamp`) runs the same checks and,
only when every one holds, records the file in the workspace's ``imported_bootcamps`` with adapter
``bootcamp``, its absolute path and source hash (:func:`~campflow.sources.authored.build_own`);
from then on every command finds the bootcamp by the name its class declares. A refused import writes
nothing: no store, no folder.

Which class a file means is decided by the classes themselves, not by the names in its class
statements: a first, short sandboxed process (:func:`discover_classes`) imports the file and says which
classes it defines (not those it imports), which of them are Bootcamp subclasses however they derive (from
``Bootcamp``, from a built-in such as ``Calculator``, from ``McpBootcamp``) and the ``name`` each carries.
Here the file is only read as text, to refuse a syntax error at once; its code runs only in the sandbox
until it is imported. A file whose import raises is not refused here: the contract's ``imports`` check
reports it, with its traceback.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from campflow.authoring.checks import MODULE_FILE
from campflow.authoring.contract_run import (
    SERVED_INSTANCES,
    ContractReport,
    Verdict,
    add_hacker_verdicts,
    run_contract,
)
from campflow.authoring.sandbox import run_confined
from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp
from campflow.config import CampflowConfig, SandboxConfig, load_config
from campflow.errors import BootcampCheckError, ImportSourceError
from campflow.sources import ImportSpec
from campflow.sources.authored import CLASS_OPTION, HASH_OPTION, source_sha256

IMPORT_COMMAND = "campflow import bootcamp FILE.py"


@dataclass(frozen=True)
class BootcampFile:
    """A bootcamp source as the checks see it.

    Attributes:
        target: what the user named (``warehouse.py:Warehouse``, ``calculator``).
        path: the file's absolute path (None for a built-in).
        class_name: the Bootcamp subclass to build.
        name: the bootcamp name the class declares (the file's stem where the file did not import).
        source: the module text the sandbox runs.
        import_error: why the file did not import in the sandbox (None when it did); the contract's
            ``imports`` check then reports it with its traceback.
    """

    target: str
    path: Path | None
    class_name: str
    name: str
    source: str
    import_error: str | None = None

    @property
    def sha256(self) -> str:
        """The source hash the import records."""
        return source_sha256(self.source)


@dataclass
class CheckReport:
    """The verdicts of ``campflow bootcamps check`` on one file or built-in."""

    file: BootcampFile
    contract: ContractReport

    @property
    def passed(self) -> bool:
        """Whether every check ran and held."""
        return self.contract.accepted

    @property
    def verdicts(self) -> list[Verdict]:
        """Every verdict, in check order."""
        return self.contract.verdicts

    def summary(self) -> str:
        """One line: all held, or how many failed and the first."""
        ran = [v for v in self.verdicts if v.passed is not None]
        failed = [v for v in self.verdicts if v.passed is False]
        served = self.contract.info.get("served_seeds")
        seeds = f" ({served} seed{'s' * (served != 1)} per level: a served bootcamp starts a server each episode; -n sets more)"
        seeds = seeds if served else ""
        if self.passed:
            return f"{self.file.name}: all {len(ran)} checks hold{seeds}"
        return f"{self.file.name}: {len(failed)} of {len(ran)} checks failed{seeds}; first: {failed[0].line()}"


@dataclass(frozen=True)
class DefinedClass:
    """A class a bootcamp file defines, as the sandbox found it.

    Attributes:
        name: the name the file binds it to.
        bootcamp: whether it is a Bootcamp subclass (directly or through any other class).
        declares: the ``name`` it carries as a Bootcamp subclass, its own or inherited (None: none).
    """

    name: str
    bootcamp: bool
    declares: str | None


def discover_classes(source: str, limits: SandboxConfig) -> list[DefinedClass] | str:
    """The classes the module ``source`` defines, in definition order, found by importing it in a sandboxed
    process; or why it did not import (the exception's line, or how the process ended)."""
    run = run_confined(source, {"discover": True, "sha256": source_sha256(source)}, limits)
    found = next((e for e in run.events if "classes" in e), None)
    if found is None:
        return f"the sandboxed process {run.ended or 'said nothing of its classes'}"
    if found["classes"] is None:
        return str(found.get("error") or "it raised on import")
    return [DefinedClass(c["name"], bool(c["bootcamp"]), c.get("declares")) for c in found["classes"]]


def read_bootcamp_file(target: str, *, limits: SandboxConfig | None = None) -> BootcampFile:
    """``FILE.py``, ``FILE.py:Class`` or a built-in name: read, parsed, and its classes found in the sandbox.

    Args:
        target: what the user named.
        limits: the sandbox the file's classes are found in (default: the configuration's ``author.sandbox``).

    Raises:
        ImportSourceError: a missing or unreadable file, a syntax error, no Bootcamp subclass or several
            (without ``:Class``), a ``:Class`` the file does not define or that is not a Bootcamp
            subclass, a class that declares no ``name``; one line each.
    """
    if target in registry.BUILTIN and not Path(target).exists():
        cls = registry.BUILTIN[target].partition(":")[2]
        return BootcampFile(target, None, cls, target, f"# the built-in bootcamp {registry.BUILTIN[target]}\n")
    file_part, wanted = target, None
    if ":" in target and not Path(target).exists():
        file_part, _, wanted = target.rpartition(":")
    path = Path(file_part).expanduser().absolute()
    if not path.is_file():
        why = "is a folder" if path.is_dir() else "does not exist"
        names = "" if file_part.endswith(".py") else f" (or a built-in name: {', '.join(registry.BUILTIN)})"
        raise ImportSourceError(
            f"bootcamp file {file_part} {why}; expected a Python file defining a Bootcamp subclass{names}"
        )
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ImportSourceError(f"bootcamp file {file_part} is not UTF-8 text; expected Python source") from None
    except OSError as exc:
        raise ImportSourceError(f"bootcamp file {file_part} cannot be read: {exc.strerror or exc}") from None
    try:
        ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ImportSourceError(
            f"{file_part}: syntax error at line {exc.lineno}: {exc.msg} ({(exc.text or '').strip()[:80]})"
        ) from None
    classes = discover_classes(source, limits or load_config().author.sandbox)
    if isinstance(classes, str):  # the contract's imports check reports it, with the traceback
        return BootcampFile(target, path, wanted or "", _stem_name(path), source, import_error=classes)
    return BootcampFile(target, path, *_choose(file_part, classes, wanted), source)


def _choose(file_part: str, classes: list[DefinedClass], wanted: str | None) -> tuple[str, str]:
    """The class the file means and the name it declares; see :func:`read_bootcamp_file` for the refusals."""
    bootcamps = {c.name: c for c in classes if c.bootcamp}
    if wanted is not None:
        if wanted not in {c.name for c in classes}:
            found = ", ".join(c.name for c in classes) or "none"
            raise ImportSourceError(f"{file_part} defines no class {wanted!r}; its classes: {found}")
        if wanted not in bootcamps:
            raise ImportSourceError(
                f"{file_part}:{wanted} is not a Bootcamp subclass; expected class {wanted}(Bootcamp[...]) "
                "from campflow.bootcamps.base, or a subclass of one"
            )
        chosen = bootcamps[wanted]
    elif len(bootcamps) == 1:
        chosen = next(iter(bootcamps.values()))
    elif not bootcamps:
        raise ImportSourceError(
            f"{file_part} defines no Bootcamp subclass; expected a class deriving from campflow.bootcamps.base.Bootcamp"
        )
    else:
        raise ImportSourceError(
            f"{file_part} defines {len(bootcamps)} Bootcamp subclasses ({', '.join(bootcamps)}); "
            f"name the one to use: {file_part}:{list(bootcamps)[-1]}"
        )
    if not chosen.declares:
        raise ImportSourceError(f'{file_part}:{chosen.name} declares no name; give the class name = "..." (lowercase)')
    return chosen.name, chosen.declares


def _stem_name(path: Path) -> str:
    """A bootcamp name from the file's name, for the report on a file that did not import."""
    return "".join(c if c.isalnum() else "_" for c in path.stem.lower()) or "bootcamp"


def defines_bootcamp(path: Path, class_name: str, *, limits: SandboxConfig | None = None) -> bool:
    """Whether the Python file ``path`` defines ``class_name`` as a Bootcamp subclass (asked of the class,
    imported in the sandbox; False where the file cannot be read, parsed or imported)."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    if not any(isinstance(n, ast.ClassDef) and n.name == class_name for n in ast.walk(tree)):
        return False  # no such class statement: no sandbox needed to say no
    classes = discover_classes(source, limits or load_config().author.sandbox)
    return not isinstance(classes, str) and any(c.name == class_name and c.bootcamp for c in classes)


def check_bootcamp(target: str, *, cfg: CampflowConfig | None = None, instances: int | None = None) -> CheckReport:
    """Run every check on the bootcamp file (or built-in) ``target`` in the sandbox; see the module docstring.

    Args:
        target: ``FILE.py``, ``FILE.py:Class`` or a built-in bootcamp name.
        cfg: the configuration (``author.sandbox``: the sandbox's limits; ``author.instances``).
        instances: seeds per level (default ``cfg.author.instances``).

    Raises:
        ImportSourceError: the file cannot be read as one bootcamp (see :func:`read_bootcamp_file`).
    """
    cfg = cfg or load_config()
    return _check(read_bootcamp_file(target, limits=cfg.author.sandbox), cfg, instances)


def _check(file: BootcampFile, cfg: CampflowConfig, instances: int | None) -> CheckReport:
    report = run_contract(
        file.source,
        name=file.name,
        examples=[],
        instances=instances or cfg.author.instances,
        limits=cfg.author.sandbox,
        grounding=True,
        class_name=file.class_name or None,
        builtin=file.path is None,
        served_instances=instances or SERVED_INSTANCES,
        origin=file.path,
    )
    add_hacker_verdicts(report, lambda: _build(file), cfg.integrity.hacker)
    shown = file.path.name if file.path is not None else file.target
    for v in report.verdicts:  # the sandbox's name for the module is the user's file
        v.reason = v.reason.replace(MODULE_FILE, shown)
        v.evidence = {k: x.replace(MODULE_FILE, shown) if isinstance(x, str) else x for k, x in v.evidence.items()}
    return CheckReport(file, report)


def import_own_bootcamp(
    target: str,
    *,
    cfg: CampflowConfig,
    name: str | None = None,
    replace: bool = False,
    instances: int | None = None,
) -> tuple[ImportSpec, CheckReport]:
    """Check the bootcamp file ``target`` and, when every check holds, record it in the workspace.

    Args:
        target: ``FILE.py`` or ``FILE.py:Class``.
        cfg: the configuration (``workspace``; ``author.sandbox`` and ``author.instances`` for the checks).
        name: the bootcamp's name (default: the ``name`` its class declares).
        replace: replace an earlier import of this name (an edited file is imported again so).
        instances: seeds per level the checks use (default ``cfg.author.instances``).

    Returns:
        The spec on record and the check report.

    Raises:
        ImportSourceError: the file cannot be read as one bootcamp, the name is taken, or ``target`` is a
            built-in name.
        BootcampCheckError: a check failed (``.report`` holds every verdict); nothing was written.
    """
    from campflow.sources import register_import
    from campflow.storage.imports import check_name_free, record
    from campflow.storage.workspace import Workspace

    file = read_bootcamp_file(target, limits=cfg.author.sandbox)
    if file.path is None:
        raise ImportSourceError(f"{target} is a built-in bootcamp; import bootcamp takes a file: {IMPORT_COMMAND}")
    if file.import_error is not None:  # refused with the contract's verdicts, its traceback among them
        report = _check(file, cfg, instances)
        if report.passed:  # it imported in the contract's process but not in the first: not one module
            raise ImportSourceError(f"{file.path.name} did not import in the sandbox once: {file.import_error}")
        raise BootcampCheckError(f"refused {file.path.name}: {report.summary()}", report)
    options: dict[str, object] = {HASH_OPTION: file.sha256, CLASS_OPTION: file.class_name}
    if name is not None:
        options["as"] = True
    spec = _spec(name or file.name, str(file.path), options)
    ws = Workspace.from_config(cfg)
    if ws.db_path.exists():  # a refused import must not create the store
        ws.load_imports()
        check_name_free(spec.name, ws.store, replace=replace)
    else:
        builtin = next((e for e in registry.entries() if e.name == spec.name and e.origin != "imported"), None)
        if builtin is not None:
            raise ImportSourceError(
                f"the name {spec.name!r} belongs to a {builtin.origin} bootcamp; choose another with --as"
            )
    report = _check(file, cfg, instances)
    if not report.passed:
        raise BootcampCheckError(f"refused {file.path.name}: {report.summary()}", report)
    from campflow.sources.authored import build_own

    spec = spec.model_copy(update={"version": build_own(spec).version})
    record(ws.store, spec)
    if report.contract.probes:  # the adversarial pass's episodes, with their transcripts
        from campflow.storage.probes import record_probes

        record_probes(ws.store, report.contract.probes, subject=spec.name, source="import")
    register_import(spec, replace=True)
    return spec, report


def _build(file: BootcampFile) -> Bootcamp:
    """The bootcamp of ``file`` in this process, as an import of it will build it."""
    if file.path is None:
        return registry.make(file.name)
    from campflow.sources.authored import build_own

    options: dict[str, object] = {HASH_OPTION: file.sha256, CLASS_OPTION: file.class_name}
    return build_own(_spec(file.name, str(file.path), options))


def _spec(name: str, source: str, options: dict[str, object]) -> ImportSpec:
    from pydantic import ValidationError

    from campflow.bootcamps.base import format_validation_error

    try:
        return ImportSpec(name=name, adapter="bootcamp", source=source, options=options)
    except ValidationError as exc:
        raise ImportSourceError(format_validation_error(exc)) from None
