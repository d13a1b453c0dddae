"""The package as declared: its version on the command line, extras that name themselves when missing,
and one table of extras that agrees with pyproject.toml."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from campflow.extras import EXTRA_OF_MODULE, MissingExtraError, missing_extra, require
from campflow.storage.query import QueryResult
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_prints_the_installed_distributions_version() -> None:
    out = run_cli("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"campflow {importlib.metadata.version('campflow')}"


def test_shell_completion_completes_a_command_name() -> None:
    env = {"COMP_WORDS": "campflow boot", "COMP_CWORD": "1", "_CAMPFLOW_COMPLETE": "complete_bash"}
    out = run_cli(env=env)
    assert out.returncode == 0 and out.stdout.split() == ["bootcamps"], out.stdout + out.stderr
    # the script `--install-completion` writes (typer's `--show-completion` takes the shell as a value before
    # 0.29 and detects it after: click's own variable asks for it the same way on every version)
    script = run_cli(env={"_CAMPFLOW_COMPLETE": "source_bash"})
    assert script.returncode == 0 and "_campflow_completion" in script.stdout


def _without(modules: tuple[str, ...], argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run the command line in a fresh interpreter where ``modules`` cannot be imported, as in an
    install without their extra."""
    code = (
        "import sys\n"
        f"for name in {modules!r}:\n    sys.modules[name] = None\n"
        "from campflow.cli import main\n"
        f"sys.argv = ['campflow', *{argv!r}]\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_a_training_command_without_the_train_extra_names_it_in_one_line(tmp_path: Path) -> None:
    out = _without(("torch", "transformers", "trl", "datasets", "peft", "accelerate"), ["train", "base"], tmp_path)
    assert out.returncode == MissingExtraError.exit_code
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "pip install 'campflow[train]'" in out.stderr, out.stderr


def test_an_import_without_the_imports_extra_names_it(tmp_path: Path) -> None:
    out = _without(("reasoning_gym",), ["import", "reasoning-gym", "gcd"], tmp_path)
    assert out.returncode == MissingExtraError.exit_code, out.stderr
    assert out.stderr.count("\n") == 1 and "pip install 'campflow[imports]'" in out.stderr, out.stderr


def test_a_module_no_extra_provides_is_not_disguised() -> None:
    assert missing_extra(ModuleNotFoundError("No module named 'nosuch'", name="nosuch")) is None
    error = missing_extra(ModuleNotFoundError("No module named 'trl.trainer'", name="trl.trainer"))
    assert isinstance(error, MissingExtraError) and "campflow[train]" in str(error)


def _distributions(module: str) -> set[str]:
    """The installed distributions that provide top-level ``module``, by canonical name."""
    return {canonicalize_name(d) for d in importlib.metadata.packages_distributions().get(module, [])}


@pytest.mark.parametrize("module", sorted(EXTRA_OF_MODULE))
def test_each_extra_module_is_a_requirement_of_the_extra_named_for_it(module: str) -> None:
    extra = EXTRA_OF_MODULE[module]
    declared = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["optional-dependencies"][extra]}
    distributions = _distributions(module)
    assert distributions & declared, f"{module} (from {distributions}) is not a requirement of extra '{extra}'"


def test_the_core_requires_no_library_of_an_extra() -> None:
    core = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    for module in EXTRA_OF_MODULE:
        distributions = _distributions(module)
        assert not distributions & core, f"{module} is in the core dependencies"


def test_the_makefile_installs_every_extra() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    install = next(line for line in (ROOT / "Makefile").read_text().splitlines() if " -e '.[" in line)
    named = set(install.split("[", 1)[1].split("]", 1)[0].split(","))
    if "all" in named:  # campflow[all] names the others
        named |= set().union(*(Requirement(r).extras for r in extras["all"]))
    assert set(extras) <= named, f"not installed by make install: {set(extras) - named}"


def test_query_results_become_a_dataframe_with_their_columns() -> None:
    frame = QueryResult(["bootcamp", "episodes"], [("calculator", 6), ("maze", 4)]).to_pandas()
    assert list(frame.columns) == ["bootcamp", "episodes"]
    assert frame["episodes"].sum() == 10 and frame.iloc[1]["bootcamp"] == "maze"


def test_the_package_ships_its_license_and_type_marker() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "campflow" / "py.typed").exists()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["campflow"]


def test_require_names_the_extra_of_a_missing_library_and_passes_an_installed_one(monkeypatch) -> None:
    require("train")  # installed here
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None if name == "trl" else object())
    with pytest.raises(MissingExtraError, match=r"trl is not installed\): pip install 'campflow\[train\]'"):
        require("train")
    with pytest.raises(KeyError):
        require("nosuch")
