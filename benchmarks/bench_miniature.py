"""The miniature, per level: base -> SFT on grounded demonstrations -> RL on the learnable band.

Fixed seeds; calculator and maze at ``--levels`` (default 1 and 2). Builds the embedded tiny model and
evaluates it on the held-out eval split, collects the grounded demonstrator's episodes on train-split
instances, filters them into an SFT dataset, fine-tunes, evaluates again, then finds the SFT model's
learnable band (train instances where its pass@k is strictly between 0 and 1, ``training.rl.band_samples``
samples each), runs GRPO on the band minus a held-out share, and plays that held-out share with the SFT
and the RL checkpoint, the same number of samples each. Every rate comes with its binomial standard
error; the RL line says whether RL beat SFT on the held-out band by more than two of them, and the line
after it plays both checkpoints on up to 120 of RL's own prompts: what RL fitted, beside what carried over.

Goals (issue 15): base ~0 -> SFT >= 80% on level 1 of both bootcamps -> RL above SFT on the band.

Run: python benchmarks/bench_miniature.py [--workspace DIR] [--collect-n 1500] [--sft-steps N]
     [--rl-steps 30] [--rl-lr LR] [--rl-prompts-per-step N] [--rl-generations N] [--rl-instances N]
     [--band-holdout F] [--eval-n 40] [--levels 1 2] [--set KEY=VALUE ...]
(SFT settings default to configs/default.yaml's; ~15-25 minutes on 2 idle cores)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, default=None)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "default.yaml")
    ap.add_argument("--collect-n", type=int, default=None, help="train instances per bootcamp (default: config's)")
    ap.add_argument("--sft-steps", type=int, default=None)
    ap.add_argument("--rl-steps", type=int, default=30)
    ap.add_argument("--rl-lr", type=float, default=None, help="GRPO learning rate (default: the config's)")
    ap.add_argument(
        "--rl-instances", type=int, default=None, help="train instances per bootcamp calibrated for the band (config's)"
    )
    ap.add_argument("--rl-prompts-per-step", type=int, default=None, help="band prompts a GRPO step (config's)")
    ap.add_argument("--rl-generations", type=int, default=None, help="rollouts per prompt in a GRPO step (config's)")
    ap.add_argument(
        "--band-holdout", type=float, default=None, help="share of the band held out of RL to measure it on (config's)"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config value, dotted key and YAML value (repeatable), e.g. training.rl.beta=0.04",
    )
    ap.add_argument("--eval-n", type=int, default=40, help="eval instances per bootcamp (split over the levels)")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    for flag in ("collect_n", "sft_steps", "rl_instances", "rl_prompts_per_step", "eval_n"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise SystemExit(f"--{flag.replace('_', '-')} = {value}: expected a positive number")
    if args.rl_generations is not None and args.rl_generations < 2:
        raise SystemExit(f"--rl-generations = {args.rl_generations}: expected at least 2 (GRPO compares a group)")
    if args.band_holdout is not None and not 0 < args.band_holdout < 1:
        raise SystemExit(f"--band-holdout = {args.band_holdout}: expected a share strictly between 0 and 1")
    if args.rl_steps < 0 or (args.rl_lr is not None and args.rl_lr <= 0):
        raise SystemExit(f"--rl-steps {args.rl_steps} / --rl-lr {args.rl_lr}: expected steps >= 0 and a positive rate")

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    import datasets

    datasets.disable_progress_bars()

    from campflow.config import load_config
    from campflow.errors import ConfigError
    from campflow.flows import band
    from campflow.flows.collect import collect, recorded_instances
    from campflow.flows.evaluate import evaluate
    from campflow.flows.runners import task_runner
    from campflow.storage.promotion import binomial_se, compare, paired
    from campflow.storage.workspace import Workspace
    from campflow.training.base import ensure_base
    from campflow.training.filtering import build_sft_dataset
    from campflow.training.rl import train_rl
    from campflow.training.sft import train_sft

    ws = args.workspace or Path(tempfile.mkdtemp(prefix="miniature-"))
    overrides: dict[str, object] = {
        "workspace.path": str(ws),
        "training.levels": args.levels,
        "training.rl.max_steps": max(1, args.rl_steps),
        "eval.levels": args.levels,
        "eval.n": args.eval_n,
    }
    if args.collect_n is not None:
        overrides["training.collect_n"] = args.collect_n
    if args.sft_steps is not None:
        overrides["training.sft.max_steps"] = args.sft_steps
    if args.rl_lr is not None:
        overrides["training.rl.learning_rate"] = args.rl_lr
    if args.rl_instances is not None:
        overrides["training.rl.instances_per_bootcamp"] = args.rl_instances
    if args.rl_prompts_per_step is not None:
        overrides["training.rl.prompts_per_step"] = args.rl_prompts_per_step
    if args.rl_generations is not None:
        overrides["training.rl.num_generations"] = args.rl_generations
    if args.band_holdout is not None:
        overrides["training.rl.band_holdout"] = args.band_holdout
    import yaml

    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE, e.g. training.rl.beta=0.04")
        try:
            overrides[key] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise SystemExit(f"--set {item!r}: the value is not YAML: {str(exc).splitlines()[0]}") from None
    try:
        cfg = load_config(args.config, overrides, env={})
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None
    cfg.training.bootcamps = list(cfg.eval.bootcamps)
    store = Workspace.from_config(cfg).store
    runner = task_runner(cfg.rollout)
    times: dict[str, float] = {}
    started = time.perf_counter()

    def stage(name: str):
        class _Timer:
            def __enter__(self):
                self.t0 = time.perf_counter()
                print(f"-- {name}", flush=True)

            def __exit__(self, *exc):
                times[name] = time.perf_counter() - self.t0
                print(f"   {name}: {times[name]:.0f}s", flush=True)

        return _Timer()

    def evaluate_model(label: str, path: Path) -> str:
        c = cfg.model_copy(deep=True)
        c.policy.kind, c.policy.model = "local", str(path)
        return evaluate(c, run_id=f"eval-{label}").run_id

    with stage("build base"):
        base = ensure_base(store, cfg)
    with stage("evaluate base"):
        base_run = evaluate_model("base", base.path)
    with stage("collect demonstrations"):
        c = cfg.model_copy(deep=True)
        c.policy.kind = "demonstrator"
        teacher = collect(c, run_id="miniature-teacher")
    with stage("dataset"):
        build = build_sft_dataset(store, ws, [teacher.run_id], cfg.training.filter)
    with stage("SFT"):
        sft = train_sft(store, ws, base.model_id, build.dataset_id, cfg.training.sft)
    with stage("evaluate SFT"):
        sft_run = evaluate_model("sft", sft.checkpoint.path)
    levels = {b: list(args.levels) for b in cfg.training.bootcamps}
    rl_line = "RL: skipped (--rl-steps 0)"
    if args.rl_steps:
        with stage("band"):
            found = band.find_band(cfg, runner, sft.checkpoint.path, "miniature-band", levels)
        if not found.prompts:
            rl_line = f"RL: no learnable band among {found.calibrated} calibrated train instances"
        else:
            with stage("RL"):
                prompts = recorded_instances(Workspace.from_config(cfg), found.prompts)
                rl = train_rl(
                    store, ws, sft.checkpoint.model_id, cfg.training.bootcamps, cfg.training.rl, instances=prompts
                )
            with stage("RL effect"):
                n = len(found.holdout) * cfg.training.rl.band_samples
                # run ids name the model and the held-out set: a rerun resumes only the same measurement
                held = f"{len(found.holdout)}of{found.run_id}"
                sft_band, rl_band = f"band-{sft.checkpoint.model_id}-{held}", f"band-{rl.checkpoint.model_id}-{held}"
                p_sft = band.measure(cfg, runner, sft.checkpoint.path, sft_band, found.holdout)
                p_rl = band.measure(cfg, runner, rl.checkpoint.path, rl_band, found.holdout)
                # beside it, RL's own prompts (up to 120 of them): what RL fitted, apart from what generalized
                seen = found.prompts[:: max(1, len(found.prompts) // 120)][:120]
                fitted = f"{len(seen)}of{found.run_id}-prompts"
                sft_seen, rl_seen = (
                    f"seen-{sft.checkpoint.model_id}-{fitted}",
                    f"seen-{rl.checkpoint.model_id}-{fitted}",
                )
                band.measure(cfg, runner, sft.checkpoint.path, sft_seen, seen)
                band.measure(cfg, runner, rl.checkpoint.path, rl_seen, seen)
            # the judge is the independent binomial SE: for the same instances it is the larger of the two
            se = (binomial_se(p_sft, n) ** 2 + binomial_se(p_rl, n) ** 2) ** 0.5
            pairs, on_seen = paired(store, rl_band, sft_band), paired(store, rl_seen, sft_seen)
            rl_line = (
                f"RL on the held-out band ({len(found.holdout)} instances x {cfg.training.rl.band_samples} samples; "
                f"band {len(found.prompts) + len(found.holdout)} of {found.calibrated}): SFT {p_sft:.1%} -> "
                f"RL {p_rl:.1%} ({100 * (p_rl - p_sft):+.1f} ± {100 * se:.1f} points; "
                f"beyond 2 SE: {'yes' if p_rl - p_sft > 2 * se else 'no'}; paired by instance and sample: "
                f"{100 * pairs.delta:+.1f} ± {100 * pairs.se:.1f}, RL alone passes {pairs.a_only}, SFT alone {pairs.b_only}); "
                f"training reward, first -> last fifth of the steps: {_fifths(rl.metrics.get('reward_curve') or [])} "
                f"in {rl.metrics.get('steps')} steps\n"
                f"RL on {len(seen)} of its own prompts x {cfg.training.rl.band_samples} samples (what it fitted): "
                f"SFT {on_seen.p_b:.1%} -> RL {on_seen.p_a:.1%} ({100 * on_seen.delta:+.1f} ± {100 * on_seen.se:.1f} paired)"
            )
    total = time.perf_counter() - started

    print(f"\nworkspace {ws}; dataset {build.rows} rows; SFT final loss {sft.metrics.get('final_loss')}")
    print("eval split, base -> SFT (binomial standard errors):")
    for comparison in compare(store, base_run, sft_run):
        print(f"  {comparison.says()}  (n={comparison.n_after})")
    print(rl_line)
    level1 = {c.bootcamp: c.p_after for c in compare(store, base_run, sft_run) if c.level == min(args.levels)}
    print("stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
    print(
        f"GOAL SFT >= 80% on level {min(args.levels)} of every bootcamp: "
        + ", ".join(f"{b} {p:.1%}" for b, p in sorted(level1.items()))
        + f" -> {'yes' if level1 and min(level1.values()) >= 0.8 else 'no'}"
    )
    print(f"RATIO miniature wall time {total / 60:.1f} min")


def _fifths(curve: list) -> str:
    """The mean reward of the first and of the last fifth of a reward curve ``[(step, reward), ...]``."""
    rewards = [r for _, r in curve]
    k = max(1, len(rewards) // 5)
    return f"{sum(rewards[:k]) / k:.3f} -> {sum(rewards[-k:]) / k:.3f}" if rewards else "-"


if __name__ == "__main__":
    main()
