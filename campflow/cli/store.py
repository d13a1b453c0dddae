"""``campflow sql`` and ``campflow runs``: read-only looks into the store."""

from __future__ import annotations

import csv
import datetime as dt
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, JsonOption, config_with, console, print_rows
from campflow.cli.display import print_table
from campflow.errors import QueryError
from campflow.storage.query import run_sql


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command()
def sql(
    query: str = typer.Argument(..., help='SQL to run, e.g. "SELECT * FROM pass_rates"'),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="output format"),
    limit: int = typer.Option(0, "--limit", help="show at most this many rows (0: all)"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Run SQL on the store, read-only. Views: pass_rates, pass_rates_by_level, failure_summary."""
    if limit < 0:
        raise QueryError(f"--limit {limit}: expected 0 (all rows) or a positive number of rows")
    cfg = config_with(config, db)
    # run_sql has fetched the rows and closed the store before anything is printed
    result = run_sql(cfg.workspace.db_path, query, limit=limit or None)
    if fmt is Format.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows(result.rows)
    elif fmt is Format.json:
        rows = [dict(zip(result.columns, row)) for row in result.rows]
        print(json.dumps(rows, default=_json_default, ensure_ascii=False, indent=1))
    else:
        print_table(console, result.columns, result.rows)


@app.command()
def runs(
    limit: int = typer.Option(20, "--limit", help="most recent runs to show"),
    as_json: bool = JsonOption,
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """List recent runs with their status and headline numbers."""
    if limit < 1:
        raise QueryError(f"--limit {limit}: expected a positive number of runs")
    cfg = config_with(config, db)
    result = run_sql(
        cfg.workspace.db_path,
        "SELECT r.run_id, r.kind, r.model_id, r.status, strftime(r.started_at, '%Y-%m-%d %H:%M:%S') AS started, "
        "round(epoch(r.finished_at - r.started_at), 1) AS seconds, count(e.episode_id) AS episodes, "
        "round(avg(e.success::INTEGER), 3) AS pass_rate, "
        "round(any_value(r.summary->>'$.throughput.episodes_per_s')::DOUBLE, 2) AS ep_per_s, "
        "round(any_value(r.summary->>'$.throughput.tokens_per_s')::DOUBLE, 0) AS tok_per_s, "
        "round(1000 * any_value(r.summary->>'$.throughput.latency_per_turn_s')::DOUBLE, 0) AS ms_per_turn "
        "FROM runs r LEFT JOIN episodes e USING (run_id) "
        "GROUP BY r.run_id, r.kind, r.model_id, r.status, r.started_at, r.finished_at ORDER BY r.started_at DESC "
        f"LIMIT {int(limit)}",
    )
    if as_json:
        print_rows(result.columns, result.rows, as_json=True)
        return
    # 80 columns: the model and the throughput go under the table
    shown = ["run_id", "kind", "status", "started", "seconds", "episodes", "pass_rate", "model", "throughput"]
    rows = []
    for row in result.rows:
        r = dict(zip(result.columns, row))
        speed = (
            None
            if r["ep_per_s"] is None
            else f"{r['ep_per_s']} ep/s, {r['tok_per_s']:.0f} tok/s, {r['ms_per_turn']:.0f} ms/turn"
        )
        r["started"] = r["started"] and r["started"][5:16]  # MM-DD HH:MM: the year is in --json
        rows.append([*(r[c] for c in shown[:7]), r["model_id"], speed])
    print_rows(shown, rows, title="runs", below=("model", "throughput"))


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value)
