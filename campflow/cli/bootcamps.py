"""``campflow bootcamps list | show | sample``."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import typer
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel

from campflow.bootcamps.messages import content_text
from campflow.cli import app
from campflow.cli.common import ConfigOption, DbOption, JsonOption, config_with, console, print_rows
from campflow.cli.display import print_table

bootcamps_app = typer.Typer(help="List, explain and sample the bootcamps.", no_args_is_help=True)
app.add_typer(bootcamps_app, name="bootcamps")


@bootcamps_app.command("list")
def list_command(as_json: bool = JsonOption, config: Path | None = ConfigOption, db: Path | None = DbOption) -> None:
    """Every registered bootcamp (built-in and imported) with its modality, levels and summary."""
    from campflow.errors import CampflowError
    from campflow.storage.workspace import Workspace

    ws = Workspace.from_config(config_with(config, db))
    rows = []
    for entry in ws.entries():
        try:
            b = ws.bootcamp(entry.name)
        except CampflowError as exc:  # an imported source that went away must not hide the others
            rows.append((entry.name, "", "", entry.origin, f"unavailable: {exc}"))
            continue
        summary = (type(b).__doc__ or "").strip().splitlines()[0] if type(b).__doc__ else ""
        rows.append((b.name, b.modality, ",".join(str(lv) for lv in sorted(b.levels)), entry.origin, summary))
    print_rows(
        ["name", "modality", "levels", "origin", "summary"],
        rows,
        as_json=as_json,
        title="bootcamps",
        below=("summary",),
    )


@bootcamps_app.command("show")
def show_command(
    name: str = typer.Argument(..., help="bootcamp name"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Explain a bootcamp: what it asks, its levels, params and tools."""
    from campflow.storage.workspace import Workspace

    d = Workspace.from_config(config_with(config, db)).bootcamp(name).describe()
    console.print(Panel(Markdown(d["description"]), title=f"{d['name']} v{d['version']} ({d['modality']})"))
    levels = d["levels"]
    keys = [k for k in dict.fromkeys(k for p in levels.values() for k in p) if k != "level"]
    print_table(
        console,
        ["param", *[f"level {lvl}" for lvl in levels]],
        [(k, *[escape(str(p.get(k))) for p in levels.values()]) for k in keys],
        title="levels",
    )
    props = d["params_schema"].get("properties", {})
    print_table(
        console,
        ["param", "type", "bounds", "description"],
        [(k, v.get("type", ""), _bounds(v), v.get("description", "")) for k, v in props.items()],
        title="params (what synthesis may vary)",
    )
    print_table(
        console,
        ["tool", "ends episode", "arguments", "description"],
        [
            (
                t["name"],
                "yes" if t["final"] else "",
                ", ".join(t["parameters"].get("properties", {})),
                t["description"],
            )
            for t in d["tools"]
        ],
        title="tools",
    )


@bootcamps_app.command("sample")
def sample_command(
    name: str = typer.Argument(..., help="bootcamp name"),
    seed: int = typer.Option(0, "--seed", "-s", help="instance seed"),
    level: int | None = typer.Option(None, "--level", "-l", help="difficulty level (default: the lowest)"),
    out: Path | None = typer.Option(None, "--out", "-o", help="vision bootcamps: write the first image here"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Show one instance: its prompt, its tools and a grounded demonstration (the teacher's transcript)."""
    from campflow.agents.oracle import DemonstratorPolicy
    from campflow.rollout.engine import EpisodeSpec, run_episode
    from campflow.storage.workspace import Workspace

    bootcamp = Workspace.from_config(config_with(config, db)).bootcamp(name)
    instance = bootcamp.generate(level, seed)
    console.print(f"[bold]{name}[/] level {instance.level}, seed {seed}, instance id {instance.id}")
    for schema in bootcamp.tool_schemas(instance):
        fn = schema["function"]
        console.print(
            f"[cyan]tool[/] {escape(fn['name'])}: {escape(fn['description'])}  "
            f"[dim]{escape(json.dumps(fn['parameters'].get('properties', {})))}[/]",
            soft_wrap=True,
        )
    episode = asyncio.run(run_episode(EpisodeSpec(bootcamp, instance), DemonstratorPolicy()))
    first_image = None
    for msg in episode.transcript:
        text, image = _render(msg)
        first_image = first_image or image
        console.print(Panel(escape(text or ""), title=msg["role"], title_align="left"))
    console.print(f"demonstration: {episode.termination}, reward {episode.reward}, {episode.turns} turn(s)")
    if out is not None:
        if first_image is None:
            raise typer.BadParameter(f"{name} produced no image to write (is it a text bootcamp?)", param_hint="--out")
        out.write_bytes(first_image)
        console.print(f"wrote {out} ({len(first_image)} bytes)")


def _render(msg: dict) -> tuple[str, bytes | None]:
    """A message as text, and the first image it carries (PNG bytes), if any."""
    content, image = msg.get("content"), None
    urls = [p["image_url"]["url"] for p in content if p.get("type") == "image_url"] if isinstance(content, list) else []
    if urls:
        image = base64.b64decode(urls[0].split(",", 1)[1])
    content = content_text(content)
    for call in msg.get("tool_calls") or []:
        content = f"{content}\n-> {call['function']['name']}({call['function']['arguments']})".strip()
    return content or "", image


def _bounds(prop: dict) -> str:
    lo = prop.get("minimum", prop.get("minLength"))
    hi = prop.get("maximum", prop.get("maxLength"))
    if "enum" in prop:
        return escape("|".join(map(str, prop["enum"])))
    if "pattern" in prop:
        return escape(prop["pattern"])
    return f"{lo}..{hi}" if lo is not None or hi is not None else ""
