"""``campflow author TASK.md``: an LLM writes a bootcamp, the contract judges it in a sandbox.

A thin call of :func:`campflow.authoring.author.author_bootcamp`; ``--model`` and ``--base-url`` set
``author.llm`` as ``campflow synthesize`` sets ``synthesis.llm``. An accepted bootcamp is recorded like
an import (``campflow imports``, ``campflow bootcamps list``); every verdict is in the store
(``campflow sql "SELECT * FROM author_rounds"``).
"""

from __future__ import annotations

from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, config_with, console


@app.command("author")
def author_command(
    task: Path = typer.Argument(..., help="the task description (Markdown)"),
    examples: Path | None = typer.Option(None, "--examples", "-e", help="JSONL of examples: input, answer"),
    name: str | None = typer.Option(None, "--name", "--as", help="bootcamp name (default: au-<task file stem>)"),
    rounds: int | None = typer.Option(None, "--rounds", min=0, max=20, help="repair rounds after the first module"),
    model: str | None = typer.Option(None, "--model", "-m", help="the endpoint's model name"),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible base URL"),
    replace: bool = typer.Option(False, "--replace", help="replace an earlier bootcamp of this name"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Have an LLM write a bootcamp for a task; keep it only if it passes the contract in a sandbox."""
    from campflow.authoring.author import author_bootcamp
    from campflow.errors import CampflowError

    cfg = config_with(config, db, **{"author.llm.model": model, "author.llm.base_url": base_url})
    result = author_bootcamp(
        task,
        cfg=cfg,
        examples=examples,
        name=name,
        rounds=rounds,
        replace=replace,
        say=lambda line: console.print(line, markup=False, highlight=False),
    )
    if not result.accepted:
        for reason in result.reasons[1:]:
            console.print(f"  {reason}", markup=False, highlight=False)
        raise CampflowError(
            f"{result.name} rejected after {len(result.rounds)} round(s): {result.reasons[0]} "
            f'(attempt {result.attempt_id}; its verdicts: campflow sql "SELECT * FROM author_verdicts '
            f"WHERE attempt_id = '{result.attempt_id}'\")"
        )
    info, spec = result.info, result.spec
    assert spec is not None
    console.print(
        f"accepted [bold]{spec.name}[/] ({info.get('class')}, version {spec.version}) after "
        f"{len(result.rounds)} round(s): levels {','.join(map(str, info.get('levels', [])))}; "
        f"tools {', '.join(info.get('tools', []))}"
    )
    console.print(f"module: {spec.source}", markup=False, highlight=False)
    console.print(
        f"try: campflow bootcamps sample {spec.name}   or   campflow eval --bootcamps {spec.name} --policy oracle -n 6",
        markup=False,
        highlight=False,
    )
