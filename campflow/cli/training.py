"""``campflow collect``, ``campflow dataset``, ``campflow export`` and ``campflow train base|sft|rl``."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from campflow.cli import app
from campflow.cli.common import (
    ConfigOption,
    DbOption,
    bootcamp_names,
    config_with,
    console,
    resolve_local_model,
    when_stopped,
)
from campflow.cli.display import print_table
from campflow.cli.evaluate import quiet_prefect, refuse_all_infra_errors, run_progress

train_app = typer.Typer(help="Build the embedded model; fine-tune with SFT; train with RL.", no_args_is_help=True)
dataset_app = typer.Typer(help="Turn recorded episodes into training datasets.", no_args_is_help=True)
app.add_typer(train_app, name="train")
app.add_typer(dataset_app, name="dataset")


def quiet_training() -> None:
    """Keep library progress bars and deprecation chatter out of the live display."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="trl")
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _live():
    from contextlib import nullcontext

    from campflow import progress
    from campflow.cli.display import RichReporter
    from campflow.training.distributed import is_main_process

    if not is_main_process():  # under accelerate launch, one process shows progress
        return nullcontext(), progress.use(progress.Reporter())
    reporter = RichReporter(console)
    return reporter, progress.use(reporter)


@app.command()
def collect(
    policy: str | None = typer.Option(
        "demonstrator", "--policy", "-p", help="demonstrator (the grounded teacher) | oracle | noisy | openai | local"
    ),
    split: str = typer.Option("train", "--split", help="only 'train': teacher data never comes from eval"),
    model: str | None = typer.Option(None, "--model", "-m", help="endpoint model, or local path / checkpoint id"),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible base URL"),
    bootcamps: str | None = typer.Option(None, "--bootcamps", "-b", help="comma-separated names"),
    n: int | None = typer.Option(None, "-n", help="train instances per bootcamp"),
    samples: int | None = typer.Option(None, "--samples", "-k", help="episodes per instance (best-of-k)"),
    temperature: float | None = typer.Option(None, "--temperature", help="sampling temperature"),
    run_id: str | None = typer.Option(None, "--run-id", help="resume or name a run"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Gather teacher (or self-sampled best-of-k) episodes on train-split instances."""
    if split != "train":
        raise typer.BadParameter(
            f"split {split!r}: teacher data is collected on 'train' only; the eval split is never trained on",
            param_hint="--split",
        )
    names = bootcamp_names(bootcamps)
    cfg = config_with(
        config,
        db,
        **{
            "policy.kind": policy,
            "policy.model": model,
            "policy.base_url": base_url,
            "policy.temperature": temperature,
            "training.bootcamps": names,
            "training.collect_n": n,
            "training.collect_samples": samples,
        },
    )
    from campflow.storage.names import check_run_id

    if run_id is not None:
        check_run_id(run_id)  # fail fast, before Prefect starts
    from campflow.storage.workspace import Workspace

    # fail fast, before Prefect starts: an unknown name, or an imported file edited since its import
    Workspace.from_config(cfg).bootcamps(cfg.training.bootcamps)
    resolve_local_model(cfg)
    quiet_prefect()
    from campflow.flows.collect import collect as run_collect
    from campflow.flows.evaluate import new_run_id

    run_id = run_id or new_run_id("collect")
    when_stopped(lambda: run_progress(cfg.workspace.db_path, run_id, "collect"))
    reporter, installed = _live()
    with reporter, installed:
        summary = run_collect(cfg, run_id)
    console.print(f"[bold]run[/] {summary.run_id}  [bold]policy[/] {summary.model_id}")
    print_table(console, ["bootcamp", "pass_rate"], list(summary.pass_rates.items()))
    refuse_all_infra_errors(cfg.workspace.db_path, summary.run_id, summary.terminations, "collect")
    console.print(f"next: campflow dataset build --runs {summary.run_id}")


@dataset_app.command("build")
def dataset_build(
    runs: str = typer.Option(..., "--runs", help="comma-separated run ids whose episodes to use"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Filter episodes into an SFT dataset (TRL conversational format) and record it."""
    cfg = config_with(config, db)
    quiet_training()
    from campflow.storage.workspace import Workspace
    from campflow.training.filtering import build_sft_dataset

    ws = Workspace.from_config(cfg)
    build = build_sft_dataset(ws.store, ws.path, _split(runs), cfg.training.filter)
    console.print(
        f"[bold]dataset[/] {build.dataset_id}: {build.rows} rows at {build.path}"
        f"{' (already built)' if build.reused else ''}"
    )
    print_table(console, ["bootcamp", "rows"], sorted(build.per_bootcamp.items()))
    if build.dropped:
        print_table(console, ["dropped because", "episodes"], sorted(build.dropped.items()))


@app.command()
def export(
    fmt: str = typer.Option(
        "hf",
        "--format",
        "-f",
        help="hf (a datasets folder) | verl (RL parquet) | inspect (Inspect AI eval logs) | verifiers (bootcamps "
        "as a verifiers environment package)",
    ),
    runs: str | None = typer.Option(None, "--runs", help="comma-separated run ids"),
    bootcamps: str | None = typer.Option(
        None, "--bootcamps", "-b", help="verifiers: comma-separated bootcamps to export (train-split instances)"
    ),
    per_bootcamp: int = typer.Option(64, "--n", min=1, help="verifiers: train instances per bootcamp"),
    variants: bool = typer.Option(
        False, "--variants", help="verifiers: the accepted synthesized variants' train instances join the dataset"
    ),
    merge: str | None = typer.Option(
        None, "--merge", help="an adapter checkpoint (id or path): write it merged into its base as one model folder"
    ),
    out: Path = typer.Option(..., "--out", "-o", help="where to write"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Export filtered episodes (a Hugging Face dataset for TRL, or verl-style parquet for RL at scale), runs as
    Inspect AI eval logs for `inspect view --log-dir OUT` (one sample per episode), or an adapter checkpoint
    merged into its base (--merge)."""
    if fmt not in ("hf", "verl", "inspect", "verifiers"):
        raise typer.BadParameter(
            f"format {fmt!r}: expected 'hf', 'verl', 'inspect' or 'verifiers'", param_hint="--format"
        )
    if variants and fmt != "verifiers":
        raise typer.BadParameter("--variants goes with --format verifiers", param_hint="--variants")
    if fmt == "verifiers":
        if bootcamps is None or runs is not None or merge is not None:
            raise typer.BadParameter(
                "--format verifiers exports --bootcamps (not --runs or --merge)", param_hint="--bootcamps"
            )
        from campflow.envserve.verifiers_export import export_verifiers

        package = export_verifiers(
            config_with(config, db), bootcamp_names(bootcamps), out, per_bootcamp, variants=variants
        )
        rows = ", ".join(
            f"{name} {n}" + (f" ({package.variants.get(name, 0)} of variants)" if variants else "")
            for name, n in package.rows.items()
        )
        console.print(
            f"wrote {out}: module {package.module} (train instances: {rows}); episodes go to run {package.run_id}"
        )
        console.print(
            f"try: PYTHONPATH={out} vf-eval {package.module} -b URL -m MODEL (or pip install -e {out} where "
            "verifiers is)",
            markup=False,
        )
        return
    if (runs is None) == (merge is None):
        raise typer.BadParameter(
            "give exactly one of --runs (episodes to export) and --merge (an adapter checkpoint)",
            param_hint="--runs / --merge",
        )
    cfg = config_with(config, db)
    if fmt == "inspect":
        if merge is not None:
            raise typer.BadParameter("--merge writes a model, not Inspect logs", param_hint="--merge")
        from campflow.cli.view import export_inspect

        export_inspect(runs or "", out, cfg)
        return
    quiet_training()
    from campflow.storage.workspace import Workspace

    if merge is not None:
        from campflow.training.checkpoints import get
        from campflow.training.lora import merge_adapter

        ckpt = get(Workspace.from_config(cfg).store, merge)
        console.print(f"wrote {merge_adapter(ckpt.path, out)} ({ckpt.model_id} merged into its base)")
        return
    from campflow.training.filtering import build_sft_dataset, export_verl

    ws = Workspace.from_config(cfg)
    if fmt == "verl":
        build = export_verl(ws.store, _split(runs), cfg.training.filter, out)
    else:
        build = build_sft_dataset(ws.store, ws.path, _split(runs), cfg.training.filter)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(build.path, out)
    console.print(f"wrote {out} ({build.rows} rows, dataset {build.dataset_id})")


@train_app.command("base")
def train_base(
    bootcamps: str | None = typer.Option(None, "--bootcamps", "-b", help="bootcamps whose text trains the tokenizer"),
    vision: bool = typer.Option(
        False, "--vision", help="the tiny vision-language model (Qwen3-VL architecture, training.tiny_vl)"
    ),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Build the embedded tiny model (tokenizer + Qwen3-architecture weights), or with --vision the tiny
    vision-language model (Qwen3-VL), and register it as ``base``."""
    names = bootcamp_names(bootcamps)
    cfg = config_with(config, db, **{"training.bootcamps": names})
    quiet_training()
    from campflow.storage.workspace import Workspace
    from campflow.training.base import ensure_base, ensure_vision_base

    ckpt = (ensure_vision_base if vision else ensure_base)(Workspace.from_config(cfg).store, cfg)
    console.print(
        f"[bold]base[/] {ckpt.model_id} at {ckpt.path}: {ckpt.metrics.get('parameters'):,} parameters, "
        f"vocabulary {ckpt.metrics.get('vocab_size')}"
    )


@train_app.command("sft")
def train_sft_command(
    base: str = typer.Option(..., "--from", help="checkpoint id, its path, or a model folder to start from"),
    dataset: str = typer.Option(..., "--dataset", help="SFT dataset id (campflow dataset build)"),
    steps: int | None = typer.Option(None, "--steps", help="optimizer steps"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Supervised fine-tuning with TRL's SFTTrainer (assistant-only loss)."""
    cfg = config_with(config, db, **{"training.sft.max_steps": steps})
    quiet_training()
    from campflow.storage.workspace import Workspace
    from campflow.training.sft import train_sft

    reporter, installed = _live()
    with reporter, installed:
        ws = Workspace.from_config(cfg)
        result = train_sft(
            ws.store,
            ws.path,
            base,
            dataset,
            cfg.training.sft,
            hardware=_hardware(cfg),
            report_to=cfg.training.report_to,
            save_steps=cfg.training.save_steps,
        )
    _report(result)


@train_app.command("rl")
def train_rl_command(
    base: str = typer.Option(..., "--from", help="checkpoint id, its path, or a model folder to start from"),
    bootcamps: str | None = typer.Option(None, "--bootcamps", "-b", help="comma-separated bootcamps (environments)"),
    steps: int | None = typer.Option(None, "--steps", help="optimizer steps"),
    config: Path | None = ConfigOption,
    db: Path | None = DbOption,
) -> None:
    """Reinforcement learning with TRL's GRPOTrainer, each bootcamp an environment."""
    names = bootcamp_names(bootcamps)
    cfg = config_with(config, db, **{"training.bootcamps": names, "training.rl.max_steps": steps})
    quiet_training()
    from campflow.storage.workspace import Workspace
    from campflow.training.rl import train_rl

    reporter, installed = _live()
    with reporter, installed:
        ws = Workspace.from_config(cfg)
        result = train_rl(
            ws.store,
            ws.path,
            base,
            cfg.training.bootcamps,
            cfg.training.rl,
            cfg.training.levels,
            hardware=_hardware(cfg),
            report_to=cfg.training.report_to,
            save_steps=cfg.training.save_steps,
        )
    _report(result)


def _hardware(cfg):  # noqa: ANN001, ANN202
    from campflow.hardware import resolve_hardware

    return resolve_hardware(cfg.training.device, cfg.training.precision, cpu_threads=cfg.training.cpu_threads)


def _report(result) -> None:  # noqa: ANN001
    from campflow.training.distributed import is_main_process

    if not is_main_process():  # under accelerate launch, one process reports (and recorded the checkpoint)
        return
    ckpt = result.checkpoint
    shown = {k: v for k, v in result.metrics.items() if not k.endswith("_curve")}
    console.print(
        f"[bold]{ckpt.kind}[/] {ckpt.model_id} (from {ckpt.parent_model_id}) at {ckpt.path}"
        f"{' (already trained)' if result.reused else ''}"
    )
    print_table(console, list(shown), [tuple(shown.values())])
    console.print(f"evaluate it: campflow eval --policy local --model {ckpt.model_id}")


def _split(runs: str) -> list[str]:
    return [r.strip() for r in runs.split(",") if r.strip()]
