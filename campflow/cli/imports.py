"""``campflow import reasoning-gym | gymnasium | function-calling | class | mcp | verifiers`` and ``campflow imports``.

Each import command is a thin call of :func:`campflow.storage.imports.import_bootcamp`:
the bootcamp is built and smoke-tested, recorded in the workspace's store and from then on listed by
``campflow bootcamps list`` and usable by every command and flow, by name.

``--set key=value`` sets a knob of the source (a reasoning-gym config field, an environment
keyword argument, a constructor argument); values are read as YAML. ``--config`` is the campflow YAML
config, as in every other command. ``--no-process-check`` vets the source
in this process (faster; no hash-seed check, no time limit per level); see
:mod:`campflow.sources.vetting` for what every import checks.
"""

from __future__ import annotations

from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, JsonOption, config_with, console, print_rows

import_app = typer.Typer(help="Import tasks other people wrote as bootcamps.", no_args_is_help=True)
app.add_typer(import_app, name="import")

KnobsOption = typer.Option([], "--set", "-s", help="a source knob as key=value (repeatable), e.g. max_terms=4")
NameOption = typer.Option(None, "--as", "--name", help="bootcamp name (default: the adapter prefix and source name)")
ReplaceOption = typer.Option(False, "--replace", help="import again over an earlier import of this name")
ProcessCheckOption = typer.Option(
    True,
    "--process-check/--no-process-check",
    help="vet in two fresh processes (hash seeds 1 and 2, each level under "
    "--level-seconds); off: in this process, faster, no hash-seed check",
)
LevelSecondsOption = typer.Option(
    30.0, "--level-seconds", min=1.0, help="a level whose probe instances take longer to generate is dropped"
)


@import_app.command("reasoning-gym")
def import_reasoning_gym(
    dataset: str = typer.Argument(..., help="procedural dataset name, e.g. basic_arithmetic"),
    knobs: list[str] = KnobsOption,
    name: str | None = NameOption,
    replace: bool = ReplaceOption,
    config_file: Path | None = ConfigOption,
    db: Path | None = DbOption,
    process_check: bool = ProcessCheckOption,
    level_seconds: float = LevelSecondsOption,
) -> None:
    """A reasoning-gym dataset as a single-turn bootcamp with a submit(answer) tool."""
    _import("reasoning-gym", dataset, knobs, name, replace, config_file, db, process_check, level_seconds)


@import_app.command("gymnasium")
def import_gymnasium(
    env_id: str = typer.Argument(..., help="environment id with discrete actions, e.g. FrozenLake-v1"),
    knobs: list[str] = KnobsOption,
    name: str | None = NameOption,
    replace: bool = ReplaceOption,
    config_file: Path | None = ConfigOption,
    db: Path | None = DbOption,
    process_check: bool = ProcessCheckOption,
    level_seconds: float = LevelSecondsOption,
) -> None:
    """A Gymnasium environment as a multi-turn bootcamp with a step(action) tool."""
    _import("gymnasium", env_id, knobs, name, replace, config_file, db, process_check, level_seconds)


@import_app.command("function-calling")
def import_function_calling(
    path: Path = typer.Argument(..., help="a JSONL file, or a folder written by datasets' save_to_disk"),
    split: str | None = typer.Option(None, "--split", help="split of a saved DatasetDict (default: train)"),
    name: str | None = NameOption,
    replace: bool = ReplaceOption,
    config_file: Path | None = ConfigOption,
    db: Path | None = DbOption,
    process_check: bool = ProcessCheckOption,
    level_seconds: float = LevelSecondsOption,
) -> None:
    """Rows with messages, tools and expected calls as a bootcamp scored by call matching."""
    _import(
        "function-calling",
        str(path.resolve()),
        [f"split={split}"] if split else [],
        name,
        replace,
        config_file,
        db,
        process_check,
        level_seconds,
    )


@import_app.command("class")
def import_class(
    source: str = typer.Argument(..., help="package.module:Class, package.module.Class or path/file.py:Class"),
    knobs: list[str] = KnobsOption,
    name: str | None = NameOption,
    replace: bool = ReplaceOption,
    levels_from: Path | None = typer.Option(
        None,
        "--levels-from",
        help="difficulty levels: an InternBootcamp config file, a JSON list of "
        "constructor arguments (examples/pipelines/*_configs/*.json)",
    ),
    config_file: Path | None = ConfigOption,
    db: Path | None = DbOption,
    process_check: bool = ProcessCheckOption,
    level_seconds: float = LevelSecondsOption,
) -> None:
    """An InternBootcamp-style class (case_generator, prompt_func, verify_score) as a bootcamp."""
    module, sep, cls = source.rpartition(":")
    if sep and module.endswith(".py"):  # a file path must survive a change of working directory
        source = f"{Path(module).resolve()}:{cls}"
        from campflow.authoring.bootcamp_file import defines_bootcamp
        from campflow.errors import ImportSourceError

        if defines_bootcamp(Path(module), cls):  # refused before any store is made
            raise ImportSourceError(
                f"{cls} in {module} is a campflow Bootcamp, not an InternBootcamp-style class; import it with "
                f"`campflow import bootcamp {module}:{cls}`"
            )
    levels = None
    if levels_from is not None:  # the file's content goes on record, not its path
        from campflow.sources.class_sources import read_levels_file

        levels = read_levels_file(levels_from)
    _import(
        "internbootcamp", source, knobs, name, replace, config_file, db, process_check, level_seconds, levels=levels
    )


@import_app.command("mcp")
def import_mcp(
    tasks: Path = typer.Option(..., "--tasks", help="the task file: JSONL rows of prompt, reference and checks"),
    name: str = typer.Option(..., "--name", "--as", help="bootcamp name"),
    server: str | None = typer.Option(
        None, "--server", help='a stdio server command; {workdir} and {seed} are filled, e.g. "CMD --db {workdir}/db"'
    ),
    url: str | None = typer.Option(None, "--url", help="a streamable HTTP server (needs --reset-tool)"),
    reset_tool: str | None = typer.Option(None, "--reset-tool", help="URL servers: the tool that resets the state"),
    reset_args: str = typer.Option("{}", "--reset-args", help="its arguments as JSON"),
    call_timeout: float = typer.Option(30.0, "--call-timeout", min=0.1, help="seconds for one tool call"),
    start_timeout: float = typer.Option(30.0, "--start-timeout", min=0.1, help="seconds for the server to start"),
    replace: bool = ReplaceOption,
    config_file: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """An MCP server and a task file as a bootcamp: every task vetted on fresh servers (docs/mcp.md)."""
    import json

    from pydantic import ValidationError

    from campflow.bootcamps.base import format_validation_error
    from campflow.errors import ImportSourceError
    from campflow.extras import require
    from campflow.mcp.server import ServerSpec
    from campflow.mcp.tasks import read_tasks
    from campflow.storage.imports import import_mcp_tasks
    from campflow.storage.workspace import Workspace

    require("mcp")
    if (server is None) == (url is None):
        raise ImportSourceError("give exactly one of --server (a command) and --url")
    if url is not None and reset_tool is None:
        raise ImportSourceError(
            f"--url {url} needs --reset-tool: the tool that gives each episode a fresh state on a shared server"
        )
    try:
        reset = {"tool": reset_tool, "arguments": json.loads(reset_args)} if reset_tool else None
        spec = (
            ServerSpec.from_command(server, call_timeout=call_timeout, start_timeout=start_timeout)
            if server is not None
            else ServerSpec(url=url, reset=reset, call_timeout=call_timeout, start_timeout=start_timeout)
        )
    except ValueError as exc:
        detail = format_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        raise ImportSourceError(f"mcp server: {detail}") from None
    rows = read_tasks(tasks)
    ws = Workspace.from_config(config_with(config_file, db))
    ws.load_imports()
    recorded, bootcamp = import_mcp_tasks(
        name, spec, rows, ws.store, replace=replace, say=lambda note: console.print(f"note: {note}", markup=False)
    )
    kept = len(recorded.options["tasks"])
    tools = ", ".join(t["name"] for t in recorded.options["tools"])
    console.print(
        f"imported [bold]{recorded.name}[/] (MCP {spec.describe()}): {kept} of {len(rows)} tasks kept, levels "
        f"{','.join(str(lv) for lv in sorted(bootcamp.levels))}; tools {tools}; doing nothing scores at most "
        f"{recorded.options['wrong_answer_bound']:g}"
    )
    console.print(f"try: campflow eval --bootcamps {recorded.name} --policy oracle -n 4", markup=False)


@import_app.command("verifiers")
def import_verifiers(
    source: str = typer.Argument(
        ..., help="an installed verifiers environment module, or a file.py with load_environment"
    ),
    name: str | None = NameOption,
    kwargs: str = typer.Option("{}", "--kwargs", help="load_environment's keyword arguments as a JSON object"),
    level_key: str | None = typer.Option(None, "--level-key", help="the rows' info key holding a level (1, 2, ...)"),
    python: str | None = typer.Option(
        None, "--python", help="the Python with verifiers installed (default: .venv-verifiers, `make verifiers`)"
    ),
    replace: bool = ReplaceOption,
    config_file: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """A verifiers environment as a bootcamp: its rows, protocol and rubric, vetted (docs/importing-and-authoring.md)."""
    import json

    from campflow.errors import ImportSourceError
    from campflow.sources import ImportSpec, default_name
    from campflow.sources.verifiers_vetting import vet_environment
    from campflow.storage.imports import check_name_free, import_bootcamp
    from campflow.storage.workspace import Workspace

    try:
        arguments = json.loads(kwargs)
    except ValueError as exc:
        raise ImportSourceError(f"--kwargs {kwargs!r} is not JSON ({exc})") from None
    if not isinstance(arguments, dict):
        raise ImportSourceError(f"--kwargs {kwargs!r}: expected a JSON object of keyword arguments")
    if source.endswith(".py"):  # a file path must survive a change of working directory
        if not Path(source).is_file():
            raise ImportSourceError(f"{source}: no such file")
        source = str(Path(source).resolve())
    cfg = config_with(config_file, db)
    ws = Workspace.from_config(cfg)
    ws.load_imports()
    chosen = name or default_name("verifiers", source)
    check_name_free(chosen, ws.store, replace=replace)  # refused before the environment starts
    say = lambda note: console.print(f"note: {note}", markup=False)  # noqa: E731
    options = vet_environment(source, arguments, python=python, level_key=level_key, say=say)
    spec = ImportSpec(name=chosen, adapter="verifiers", source=source, options=options)
    spec, bootcamp = import_bootcamp(
        spec, ws.store, replace=replace, cross_process=False, say=say, hacker=cfg.integrity.hacker
    )
    described = options["description"]
    tools = ", ".join(t.name for t in bootcamp.tools(bootcamp.generate(None, 0)))
    console.print(
        f"imported [bold]{spec.name}[/] (verifiers {described['class']}, {described['protocol']}): "
        f"levels {','.join(str(lv) for lv in sorted(bootcamp.levels))}; tools {tools}; "
        f"oracle {'the reference answer as ' + repr(options['answer_format']) if options['oracle'] else 'none'}"
    )
    console.print(f"try: campflow eval --bootcamps {spec.name} --policy oracle -n 4", markup=False)


@app.command("imports")
def imports_command(
    remove: str | None = typer.Option(None, "--remove", help="forget the import of this name"),
    as_json: bool = JsonOption,
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """List the imported bootcamps recorded in the store (or remove one)."""
    from campflow.storage.imports import forget, recorded_rows
    from campflow.storage.workspace import Workspace

    store = Workspace.from_config(config_with(config, db)).store
    if remove is not None:
        if not forget(store, remove):
            from campflow.errors import UnknownBootcampError

            raise UnknownBootcampError(f"no imported bootcamp named {remove!r}")
        console.print(f"removed {remove}")
        return
    rows = [
        (r["name"], r["adapter"], r["source"], r["version"], r["options"], f"{r['created_at']:%Y-%m-%d %H:%M}")
        for r in recorded_rows(store)
    ]
    columns = ["name", "adapter", "source", "version", "options", "imported"]
    print_rows(columns, rows, as_json=as_json, title="imports", below=("options",))


def _import(
    adapter: str,
    source: str,
    pairs: list[str],
    name: str | None,
    replace: bool,
    config_file: Path | None,
    db: Path | None,
    process_check: bool = True,
    level_seconds: float = 30.0,
    levels: list[dict] | None = None,
) -> None:
    from pydantic import ValidationError

    from campflow.bootcamps.base import format_validation_error
    from campflow.errors import ImportSourceError
    from campflow.sources import ImportSpec, default_name, parse_options
    from campflow.storage.imports import import_bootcamp
    from campflow.storage.workspace import Workspace

    cfg = config_with(config_file, db)
    options = parse_options(pairs)
    if levels is not None:
        from campflow.sources.class_bootcamps import LEVELS_OPTION

        options[LEVELS_OPTION] = levels
    try:
        spec = ImportSpec(name=name or default_name(adapter, source), adapter=adapter, source=source, options=options)
    except ValidationError as exc:
        raise ImportSourceError(format_validation_error(exc)) from None
    ws = Workspace.from_config(cfg)
    ws.load_imports()
    spec, bootcamp = import_bootcamp(
        spec,
        ws.store,
        replace=replace,
        cross_process=process_check,
        level_seconds=level_seconds,
        say=lambda note: console.print(f"note: {note}", markup=False),
        hacker=cfg.integrity.hacker,
    )
    instance = bootcamp.generate(None, 0)
    tools = ", ".join(t.name for t in bootcamp.tools(instance))
    console.print(
        f"imported [bold]{spec.name}[/] ({adapter} {source}) version {spec.version}: "
        f"levels {','.join(str(lv) for lv in sorted(bootcamp.levels))}; tools {tools}"
    )
    console.print(
        f"try: campflow bootcamps sample {spec.name}   or   campflow eval --bootcamps {spec.name} --policy oracle -n 6"
    )
