"""``campflow bootcamps check FILE.py[:Class]`` and ``campflow import bootcamp FILE.py[:Class]``: your own tasks in.

Thin calls of :func:`campflow.authoring.bootcamp_file.check_bootcamp` and
:func:`~campflow.authoring.bootcamp_file.import_own_bootcamp`. Each check is printed with its verdict and,
for a failure, its evidence (level, seed, the step played last, the traceback's tail). ``check`` exits
0 only when every check holds; ``import bootcamp`` records nothing unless they all do.
"""

from __future__ import annotations

from pathlib import Path

import typer

from campflow.cli.bootcamps import bootcamps_app
from campflow.cli.common import ConfigOption, DbOption, config_with, console
from campflow.cli.imports import import_app

TargetArgument = typer.Argument(..., help="your bootcamp file, FILE.py or FILE.py:Class (check: or a built-in name)")
InstancesOption = typer.Option(
    None, "--instances", "-n", min=1, help="seeds per level the checks use (default: author.instances)"
)
EVIDENCE = ("level", "seed", "step", "instance", "stderr", "traceback")


@bootcamps_app.command("check")
def check_command(
    target: str = TargetArgument,
    instances: int | None = InstancesOption,
    config: Path | None = ConfigOption,
) -> None:
    """Run the contract and the demonstrator's grounding on a bootcamp file, in the sandbox."""
    from campflow.authoring.bootcamp_file import check_bootcamp

    report = check_bootcamp(target, cfg=config_with(config), instances=instances)
    print_verdicts(report)
    console.print(report.summary(), markup=False, soft_wrap=True)
    if not report.passed:
        raise typer.Exit(1)


@import_app.command("bootcamp")
def import_bootcamp_command(
    target: str = TargetArgument,
    name: str | None = typer.Option(None, "--as", "--name", help="bootcamp name (default: the class's name)"),
    replace: bool = typer.Option(False, "--replace", help="import again over an earlier import of this name"),
    instances: int | None = InstancesOption,
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Your own Bootcamp subclass, after every check of `campflow bootcamps check` holds."""
    from campflow.authoring.bootcamp_file import import_own_bootcamp
    from campflow.errors import BootcampCheckError

    cfg = config_with(config, db)
    try:
        spec, report = import_own_bootcamp(target, cfg=cfg, name=name, replace=replace, instances=instances)
    except BootcampCheckError as exc:
        print_verdicts(exc.report)  # type: ignore[arg-type]
        raise
    ran = sum(v.passed is not None for v in report.verdicts)
    console.print(
        f"imported {spec.name} (bootcamp {spec.source}) version {spec.version}: all {ran} checks hold",
        markup=False,
        soft_wrap=True,
    )
    console.print(
        f"try: campflow eval --bootcamps {spec.name} --policy oracle -n 6 --workspace {cfg.workspace.path}",
        markup=False,
        soft_wrap=True,
    )


def print_verdicts(report: object) -> None:
    """One line per check (``ok``, ``FAIL``, ``--`` for not run) and, under a failure, its evidence."""
    for v in report.verdicts:  # type: ignore[attr-defined]
        mark = "ok  " if v.passed else ("FAIL" if v.passed is False else "--  ")
        where = v.check + (f" level {v.level}" if v.level is not None else "")
        console.print(f"{mark} {where}" + ("" if v.passed else f": {v.reason}"), markup=False, soft_wrap=True)
        if v.passed is False:
            for key in EVIDENCE:
                if key in v.evidence and key != "level":
                    lines = str(v.evidence[key]).strip().splitlines()
                    shown = lines[-6:] if key in ("traceback", "stderr") else lines[:1]
                    for line in shown:
                        console.print(f"       {key}: {line[:400]}", markup=False, soft_wrap=True)
