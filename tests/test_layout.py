"""The house's rules, checked on the tree: where a bootcamp lives, and who may open a store or load imports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp
from campflow.bootcamps.calculator import Calculator
from tests.conftest import REPO

BOOTCAMPS = REPO / "campflow" / "bootcamps"
PACKAGES = sorted(p.name for p in BOOTCAMPS.iterdir() if p.is_dir() and p.name != "__pycache__")
SHARED = sorted(p.stem for p in BOOTCAMPS.glob("*.py") if p.stem != "__init__")


def _sources(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (REPO / root).rglob("*.py") if "__pycache__" not in p.parts)


def test_every_package_in_bootcamps_is_a_built_in_bootcamp_of_that_name() -> None:
    assert PACKAGES == sorted(registry.BUILTIN), "a folder under bootcamps/ is one bootcamp"


@pytest.mark.parametrize("name", PACKAGES)
def test_a_bootcamp_package_holds_its_class_in_bootcamp_py_and_exports_it(name: str) -> None:
    module, _, attr = registry.BUILTIN[name].partition(":")
    assert module == f"campflow.bootcamps.{name}", "the registry names the package, not a module inside it"
    cls = getattr(importlib.import_module(module), attr)
    assert issubclass(cls, Bootcamp) and cls.__module__ == f"campflow.bootcamps.{name}.bootcamp"
    assert cls.name == name and importlib.import_module(module).__all__ == [attr]


@pytest.mark.parametrize("name", PACKAGES)
def test_a_bootcamps_helper_modules_are_imported_by_that_bootcamp_alone(name: str) -> None:
    helpers = sorted(p.stem for p in (BOOTCAMPS / name).glob("*.py") if p.stem not in ("__init__", "bootcamp"))
    for helper in helpers:
        pattern = re.compile(rf"campflow\.bootcamps\.{name}\.{helper}\b")
        users = [
            p.relative_to(REPO)
            for p in _sources("campflow", "benchmarks")
            if (BOOTCAMPS / name) not in p.parents and pattern.search(p.read_text())
        ]
        assert users == [], f"{name}/{helper}.py is used outside its bootcamp; move what they share up a level"


@pytest.mark.parametrize("module", SHARED)
def test_modules_directly_in_bootcamps_define_no_bootcamp(module: str) -> None:
    mod = importlib.import_module(f"campflow.bootcamps.{module}")
    defined = [
        v
        for v in vars(mod).values()
        if isinstance(v, type) and issubclass(v, Bootcamp) and v.__module__ == mod.__name__ and v is not Bootcamp
    ]
    assert defined == [], f"bootcamps/{module}.py defines a bootcamp; it belongs in a package of its own"


class _Pictured(Calculator):
    """Calculator problems seen as pictures: only its class attributes are read here."""

    name = "pictured"
    modality = "vision"


def test_the_registry_reads_each_modality_from_the_class_without_building_it() -> None:
    registry.register("pictured", _Pictured)
    try:
        entry = next(e for e in registry.entries() if e.name == "pictured")
        assert entry.modality == "vision" and "pictured" not in registry._CACHE, "read, not built"
    finally:
        registry.unregister("pictured")
    vision = sorted(e.name for e in registry.entries() if e.origin == "builtin" and e.modality == "vision")
    assert vision == ["chart", "gridworld", "gui"]
    assert all(e.modality == type(registry.make(e.name)).modality for e in registry.entries() if e.origin == "builtin")


def test_only_the_workspace_loads_recorded_imports() -> None:
    calls = {
        p.relative_to(REPO).as_posix(): [line for line in p.read_text().splitlines() if "register_recorded(" in line]
        for p in _sources("campflow", "benchmarks")
    }
    calls = {path: lines for path, lines in calls.items() if lines}
    assert set(calls) == {"campflow/storage/imports.py", "campflow/storage/workspace.py"}
    assert [line.strip().split("(")[0] for line in calls["campflow/storage/imports.py"]] == ["def register_recorded"]


def test_only_the_workspace_and_the_store_module_build_a_store() -> None:
    builds = re.compile(r"(?<![\w.])Store\(")
    where = sorted(
        p.relative_to(REPO).as_posix() for p in _sources("campflow", "benchmarks") if builds.search(p.read_text())
    )
    assert set(where) <= {"campflow/storage/store.py", "campflow/storage/workspace.py"}, (
        "open the workspace (campflow.storage.workspace.Workspace) instead: it carries the store and the "
        "resolver that finds imported bootcamps"
    )


def test_contributings_layout_names_every_package_of_campflow() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text()
    block = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^  (\w+)/ ", block, re.MULTILINE))
    packages = {p.name for p in (REPO / "campflow").iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert listed == packages, "CONTRIBUTING.md's layout names each folder of campflow/ that holds code"
