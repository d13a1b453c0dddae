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

The file is read here only as text (:mod:`ast`): whether it parses, which classes derive from
``Bootcamp`` and the ``name`` each declares. Its code runs only in the sandbox until it is imported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from campflow.authoring.checks import MODULE_FILE
from campflow.authoring.contract_run import ContractReport, Verdict, add_hacker_verdicts, run_contract
from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp
from campflow.config import CampflowConfig, load_config
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
        name: the bootcamp name the class declares.
        source: the module text the sandbox runs.
    """

    target: str
    path: Path | None
    class_name: str
    name: str
    source: str

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
        if self.passed:
            return f"{self.file.name}: all {len(ran)} checks hold"
        return f"{self.file.name}: {len(failed)} of {len(ran)} checks failed; first: {failed[0].line()}"


def read_bootcamp_file(target: str) -> BootcampFile:
    """``FILE.py``, ``FILE.py:Class`` or a built-in name, read and validated as text.

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
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ImportSourceError(
            f"{file_part}: syntax error at line {exc.lineno}: {exc.msg} ({(exc.text or '').strip()[:80]})"
        ) from None
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    bootcamps = _bootcamp_classes(classes)
    if wanted is not None:
        if wanted not in classes:
            found = ", ".join(classes) or "none"
            raise ImportSourceError(f"{file_part} defines no class {wanted!r}; its classes: {found}")
        if wanted not in bootcamps:
            raise ImportSourceError(
                f"{file_part}:{wanted} is not a Bootcamp subclass; expected class {wanted}(Bootcamp[...]) "
                "from campflow.bootcamps.base"
            )
        chosen = wanted
    elif len(bootcamps) == 1:
        chosen = bootcamps[0]
    elif not bootcamps:
        raise ImportSourceError(
            f"{file_part} defines no Bootcamp subclass; expected a class deriving from campflow.bootcamps.base.Bootcamp"
        )
    else:
        raise ImportSourceError(
            f"{file_part} defines {len(bootcamps)} Bootcamp subclasses ({', '.join(bootcamps)}); "
            f"name the one to use: {file_part}:{bootcamps[-1]}"
        )
    name = _declared_name(chosen, classes)
    if name is None:
        raise ImportSourceError(f'{file_part}:{chosen} declares no name; give the class name = "..." (lowercase)')
    return BootcampFile(target, path, chosen, name, source)


def defines_bootcamp(path: Path, class_name: str) -> bool:
    """Whether the Python file ``path`` defines ``class_name`` as a Bootcamp subclass (read as text; False
    where it cannot be read or parsed)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    return class_name in _bootcamp_classes({n.name: n for n in tree.body if isinstance(n, ast.ClassDef)})


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
    file = read_bootcamp_file(target)
    report = run_contract(
        file.source,
        name=file.name,
        examples=[],
        instances=instances or cfg.author.instances,
        limits=cfg.author.sandbox,
        grounding=True,
        class_name=file.class_name,
        builtin=file.path is None,
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

    file = read_bootcamp_file(target)
    if file.path is None:
        raise ImportSourceError(f"{target} is a built-in bootcamp; import bootcamp takes a file: {IMPORT_COMMAND}")
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
    report = check_bootcamp(target, cfg=cfg, instances=instances)
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


def _base_names(node: ast.ClassDef) -> list[str]:
    out = []
    for base in node.bases:
        if isinstance(base, ast.Subscript):  # Bootcamp[Params, State]
            base = base.value
        if isinstance(base, ast.Name):
            out.append(base.id)
        elif isinstance(base, ast.Attribute):  # base.Bootcamp
            out.append(base.attr)
    return out


def _bootcamp_classes(classes: dict[str, ast.ClassDef]) -> list[str]:
    """The classes deriving from Bootcamp, directly or through another class of the file, in file order."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for cls, node in classes.items():
            if cls not in found and any(b == "Bootcamp" or b in found for b in _base_names(node)):
                found.add(cls)
                changed = True
    return [c for c in classes if c in found]


def _declared_name(cls: str, classes: dict[str, ast.ClassDef]) -> str | None:
    """The string literal ``name`` the class (or a base class in the file) assigns, if any."""
    node = classes.get(cls)
    if node is None:
        return None
    for stmt in node.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else target
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "name" and isinstance(value, ast.Constant):
            return value.value if isinstance(value.value, str) else None
    for base in _base_names(node):
        if base in classes and base != cls:
            found = _declared_name(base, classes)
            if found is not None:
                return found
    return None
