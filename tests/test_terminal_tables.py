"""Tables fit the terminal: in 80 columns, piped or interactive, no word a user reads is split across lines.

A table that fits (its cells wrapping at spaces where they must) stays a table; one too wide becomes
``key: value`` lines. The commands run as a user runs them: a subprocess, its output piped (not a terminal)
and ``COLUMNS=80``.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import train_instances
from campflow.cli.display import print_table
from campflow.config import load_config
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage import cycles
from campflow.storage.store import Store
from tests.conftest import run_cli

RULE = {"─"}


def _shown(value: object) -> str:
    """A value as a table cell shows it (floats to four places)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def assert_whole_words(out: str, names: Iterable[str], values: Iterable[object], width: int = 80) -> None:
    """Every line of ``out`` fits ``width`` and every word on it is a whole word of a column name (bare or
    as ``name:``) or of a value: a word split across lines leaves fragments that are neither."""
    known = {w for n in names for w in (n, f"{n}:")}
    known |= {_unquoted(w) for v in values if v is not None for w in _shown(v).split()}
    for line in out.splitlines():
        assert len(line) <= width, f"{len(line)} columns: {line!r}\n{out}"
        for word in line.split():
            assert set(word) <= RULE or _unquoted(word) in known, f"{word!r} is no whole word of a value:\n{out}"


def _unquoted(word: str) -> str:
    """A word without quotes: a value read back from JSON has its dict keys quoted as strings."""
    return word.replace("'", "").replace('"', "")


def _record_cycles(store: Store) -> list[str]:
    """Two cycles with real-length ids: one decided and completed, one still running."""
    done = cycles.start(store, cycles.new_cycle_id())
    done.base_model_id = "base-1a27c03ab3"
    cycles.save_step(store, done, "re-evaluate", done=["evaluate", "re-evaluate"])
    cycles.decide(
        store,
        done,
        candidate="sft-a704374cb9",
        metric="pass_rate",
        before=0.41666,
        after=0.83333,
        promoted=False,
        reason="pass_rate 41.7% -> 83.3% (+41.7 ± 17.8 points), but calculator level 4 100.0% -> 0.0% "
        "(-100.0 ± 0.0 points) fell by more than improve.max_regression = 5%",
    )
    cycles.finish(store, done)
    running = cycles.start(store, cycles.new_cycle_id())
    running.base_model_id = "sft-a704374cb9"
    cycles.save_step(store, running, "evaluate")
    return [done.cycle_id, running.cycle_id]


def test_campflow_cycles_in_80_piped_columns_splits_no_word(tmp_path: Path) -> None:
    db = str(tmp_path / "ws" / "campflow.duckdb")
    ids = _record_cycles(Store(Path(db)))
    listed = run_cli("cycles", "--json", "--db", db)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {r["cycle_id"] for r in rows} == set(ids)

    shown = run_cli("cycles", "--db", db, env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert_whole_words(out, ["cycles", *rows[0]], [v for r in rows for v in r.values()])
    words = out.split()
    assert "completed" in words and "running" in words
    assert all(words.count(cycle_id) == 1 for cycle_id in ids)  # each cycle's id whole, once: its label
    decision = next(r["decision"] for r in rows if r["decision"])
    assert " ".join(decision.split()) in " ".join(words)


def _sft_inputs(ws: Path) -> tuple[str, str]:
    """A tiny base model and an SFT dataset of four oracle episodes; returns their ids."""
    from campflow.training.base import ensure_base
    from campflow.training.filtering import build_sft_dataset

    tiny = {"vocab_size": 600, "hidden_size": 32, "intermediate_size": 64, "layers": 1, "heads": 2, "kv_heads": 1}
    overrides = {f"training.tiny.{k}": v for k, v in tiny.items()}
    overrides |= {"training.tiny.corpus_per_level": 4, "training.tiny.pretrain.steps": 2}
    cfg = load_config(None, {"workspace.path": str(ws), "training.bootcamps": ["calculator"], **overrides}, env={})
    store = Store(cfg.workspace.db_path)
    bootcamp = registry.make("calculator")
    instances = train_instances(bootcamp, 4)
    store.write_instances(instances, split="train")
    store.start_run("teacher", "collect", {}, "oracle")
    specs = [EpisodeSpec(bootcamp, i) for i in instances]
    store.write_episodes(asyncio.run(run_episodes(specs, OraclePolicy(), run_id="teacher")))
    store.finish_run("teacher", "completed", {})
    build = build_sft_dataset(store, ws, ["teacher"], cfg.training.filter)
    return ensure_base(store, cfg).model_id, build.dataset_id


def test_campflow_train_sft_summary_in_80_piped_columns_splits_no_word(tmp_path_factory) -> None:
    ws = tmp_path_factory.mktemp("sft")  # a short path: the checkpoint's line holds it
    base, dataset = _sft_inputs(ws)
    done = run_cli(
        "train", "sft", "--from", base, "--dataset", dataset, "--steps", "1", "-w", str(ws), env={"COLUMNS": "80"}
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), out
    sft = re.search(r"^sft (sft-\S+) \(from", out, re.M).group(1)
    # the checkpoint's line (which may wrap before its path), the summary, then the next command
    summary = out[out.index("\n", out.index(str(ws / "models" / sft))) + 1 : out.index("evaluate it:")]
    metrics = Store(ws / "campflow.duckdb").query("SELECT metrics FROM checkpoints WHERE model_id = ?", [sft])
    shown = {k: v for k, v in json.loads(metrics[0]["metrics"]).items() if not k.endswith("_curve")}
    assert len(shown) > 6  # more figures than 80 columns hold side by side
    assert_whole_words(summary, shown, shown.values())
    said = {line.split(":", 1)[0] for line in summary.splitlines() if line.strip()}
    assert said == {k for k, v in shown.items() if v not in (None, "")}  # one `key: value` line each


def _console(width: int, *, terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, force_terminal=terminal, color_system=None, log_path=False), out


PARAMS = (
    ["param", "type", "bounds", "description"],
    [
        ("digits", "integer", "1..9", "how many digits each operand of the expression has, at most"),
        ("ops", "integer", "1..4", "how many operators the expression holds between its operands"),
    ],
)


def test_a_narrow_interactive_terminal_gets_the_same_whole_words() -> None:
    for width in (80, 60, 44, 30, 20):
        for terminal in (True, False):
            console, out = _console(width, terminal=terminal)
            print_table(console, *PARAMS, title="params")
            print_table(console, ["bootcamp", "rows"], [("calculator", 4)])
            text = out.getvalue()
            names = ["params", *PARAMS[0], "bootcamp", "rows"]
            assert_whole_words(text, names, [v for r in PARAMS[1] for v in r] + ["calculator", 4], width)
            for _, _, _, description in PARAMS[1]:
                assert " ".join(description.split()) in " ".join(text.split()), text


def test_a_table_that_fits_stays_a_table_and_wraps_its_cells_at_spaces() -> None:
    console, out = _console(60, terminal=True)
    print_table(console, *PARAMS, title="params")
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if line.split()[:1] == ["param"])
    assert header.split() == PARAMS[0]  # a table: one header line
    digits = next(i for i, line in enumerate(lines) if line.split()[:1] == ["digits"])
    assert lines[digits].split()[:3] == ["digits", "integer", "1..9"]
    assert lines[digits + 1].startswith(" " * header.index("description"))  # the description wraps in its column


def test_many_rows_that_fit_stay_a_table_one_line_per_row() -> None:
    console, out = _console(80, terminal=False)
    rows = [(f"bootcamp-{i}", i / 7) for i in range(40)]
    print_table(console, ["bootcamp", "pass_rate"], rows)
    lines = [line.split() for line in out.getvalue().splitlines() if line.strip()]
    assert lines[0] == ["bootcamp", "pass_rate"] and set(lines[1][0]) <= RULE
    assert lines[2:] == [[name, f"{rate:.4g}"] for name, rate in rows]


def test_a_table_too_wide_becomes_key_value_lines_labelled_by_the_first_cell() -> None:
    console, out = _console(40, terminal=False)
    columns = ["cycle_id", "status", "step", "promoted", "decision"]
    rows = [
        ("cycle-20261130-034012-1a2b", "completed", "re-evaluate", True, "better on every bootcamp"),
        ("cycle-20261201-101500-9f9f", "running", "evaluate", None, None),
    ]
    print_table(console, columns, rows, title="cycles", below=("decision",))
    assert out.getvalue().splitlines() == [
        "cycles",
        "cycle_id: cycle-20261130-034012-1a2b",
        "  status: completed",
        "  step: re-evaluate",
        "  promoted: True",
        "  decision: better on every bootcamp",
        "cycle_id: cycle-20261201-101500-9f9f",
        "  status: running",
        "  step: evaluate",
    ]


def test_a_long_value_wraps_at_spaces_under_its_key_and_a_longer_word_stays_whole() -> None:
    console, out = _console(40, terminal=False)
    path = "/a/folder/whose/name/is/longer/than/forty/columns/model"
    print_table(console, ["checkpoint", "path", "note"], [("sft-1", path, "one two three four five six seven eight")])
    lines = out.getvalue().splitlines()
    assert path in [line.strip() for line in lines]  # on a line of its own, whole
    note = next(i for i, line in enumerate(lines) if line.startswith("note:"))
    assert lines[note] == "note: one two three four five six seven"
    assert lines[note + 1] == "    eight"
