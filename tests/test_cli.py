"""The command line as a user meets it: fast help, readable one-line errors, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import run_cli

HEAVY = ("torch", "transformers", "trl", "prefect", "datasets", "openai", "sklearn")


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A workspace with one small noisy-oracle evaluation in it (runs the evaluate flow once)."""
    ws = tmp_path_factory.mktemp("cli")
    result = run_cli(
        "eval", "--policy", "noisy", "-n", "6", "--bootcamps", "calculator,maze", "--run-id", "cli-run", cwd=ws
    )
    assert result.returncode == 0, result.stderr
    return ws


@pytest.mark.parametrize("argv", [["--help"], ["sql", "select 1"]])
def test_help_and_sql_import_no_heavy_library(argv, tmp_path) -> None:
    code = (
        "import sys\nfrom campflow.cli import main\n"
        f"sys.argv = ['campflow', *{argv!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    heavy = [ln for ln in out.stdout.splitlines() if ln.startswith("HEAVY=")][-1]
    assert heavy == "HEAVY=", out.stdout + out.stderr


def test_eval_prints_pass_rates_and_records_the_run(evaluated) -> None:
    out = run_cli("runs", cwd=evaluated)
    assert out.returncode == 0 and "cli-run" in out.stdout and "completed" in out.stdout
    rows = json.loads(
        run_cli(
            "sql", "SELECT bootcamp, episodes FROM pass_rates ORDER BY bootcamp", "-f", "json", cwd=evaluated
        ).stdout
    )
    assert rows == [{"bootcamp": "calculator", "episodes": 6}, {"bootcamp": "maze", "episodes": 6}]


def test_sql_drop_table_fails_read_only_and_the_table_is_intact(evaluated) -> None:
    out = run_cli("sql", "DROP TABLE episodes", cwd=evaluated)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "read-only" in out.stderr and "Traceback" not in out.stderr
    assert run_cli("sql", "SELECT count(*) AS n FROM episodes", "-f", "csv", cwd=evaluated).stdout.split() == [
        "n",
        "12",
    ]


def test_sql_syntax_error_is_duckdbs_message_on_one_line_with_exit_code_2(evaluated) -> None:
    out = run_cli("sql", "SELEC 1", cwd=evaluated)
    assert out.returncode == 2 and out.stderr.startswith("error: Parser Error")
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_sql_before_any_store_exists_says_so(tmp_path) -> None:
    out = run_cli("sql", "select 1", cwd=tmp_path)
    assert out.returncode != 0 and "no store at" in out.stderr and "Traceback" not in out.stderr


def test_invalid_config_value_is_one_line_naming_key_value_and_expectation(tmp_path) -> None:
    (tmp_path / "bad.yaml").write_text("rollout:\n  concurrency: -3\n")
    out = run_cli("eval", "--config", "bad.yaml", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "error: bad.yaml: rollout.concurrency = -3: Input should be greater than or equal to 1"
    )


def test_unknown_bootcamp_lists_the_known_ones(tmp_path) -> None:
    out = run_cli("eval", "--bootcamps", "calculator,chess", cwd=tmp_path)
    assert out.returncode == 2 and "unknown bootcamp 'chess'" in out.stderr and "calculator" in out.stderr


def test_bootcamps_list_show_and_sample(tmp_path) -> None:
    listed = run_cli("bootcamps", "list", cwd=tmp_path)
    assert listed.returncode == 0
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if len(line.split()) == 4}  # table rows
    for name in ("calculator", "maze", "filesystem", "sql", "shop", "calendar", "wordle"):
        assert "text" in rows[name]
    for name in ("gridworld", "chart", "gui"):
        assert "vision" in rows[name] and "1,2,3,4" in rows[name]
    shown = run_cli("bootcamps", "show", "maze", cwd=tmp_path)
    assert shown.returncode == 0 and "view_radius" in shown.stdout and "submit" in shown.stdout
    sample = run_cli("bootcamps", "sample", "calculator", "--seed", "3", "--level", "2", cwd=tmp_path)
    assert sample.returncode == 0 and "demonstration: solved" in sample.stdout and "calculate" in sample.stdout


def test_no_two_modules_register_a_command_under_one_name() -> None:
    """A second ``@app.command()`` of the same name silently replaces the first (``export`` once lost
    ``--merge`` and the hf/verl formats that way)."""
    import importlib

    from campflow.cli import COMMAND_MODULES, app

    for name in COMMAND_MODULES:
        importlib.import_module(f"campflow.cli.{name}")
    names = [c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
