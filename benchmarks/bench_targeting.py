"""Does targeting pay? Failure-targeted variants vs uniform train instances, at equal budget, from one checkpoint.

The loop's claim is that training on variants aimed at a model's failures helps more than training on
more of the same. This ablation tests it on the project's own steps, nothing reimplemented:

0. a starting checkpoint that already solves part of the tasks: the candidate of the last completed
   cycle of ``--from-workspace DIR``, or (default) one cycle of ``campflow improve`` run here first;
1. the start model on the eval split; its failures mined and clustered, variants synthesized for the
   clusters (the configured synthesizer, calibrated on the start model) with held-out probes
   (``--probes`` per accepted variant, split ``probe``, never trained on): the *targeted clusters*;
2. arm A: the grounded demonstrator on ``--k`` train instances per bootcamp, ``--share`` of them
   variant instances (from the targeted variants' own seeds, probes skipped) and the rest drawn
   uniformly at the curriculum's train levels, as a cycle of the loop mixes them (``synthesis.share``;
   ``--share 1``: variants only); arm B: the demonstrator on as many train instances per bootcamp,
   all drawn uniformly at the same levels from other seeds; both checked against
   the eval split and the probes, filtered alike into SFT datasets, the larger cut to the smaller per
   bootcamp (rows chosen by episode id) so both have the same rows per bootcamp;
3. SFT of both from the start checkpoint with the same config and steps;
4. start, A and B on the targeted clusters' probes and on the whole eval split.

Pass rates carry binomial standard errors. A - B is compared pair by pair (same instance, same sample):
the counts of pairs A solves and B does not and the reverse, and the standard error of the paired
differences; the independent-binomial error sqrt(se_A² + se_B²) is shown beside it. The last line:
``GOAL targeted: A-B = x ± se (> 2 se: yes/no); overall: A-B = y ± se (not worse: yes/no)``, with the
paired error; "not worse" means A-B >= -2 se (no drop the noise cannot explain). Fixed seeds throughout.

Run (full size, the lead's): python benchmarks/bench_targeting.py --workspace /tmp/bench-targeting
     (configs/default.yaml: one cycle ~15 min, then two SFT runs of training.sft.max_steps ~8 min each
     and four evaluations: ~35-40 min on 2 idle cores; ~20-25 min with --from-workspace)
Flags: --workspace DIR (where the starting cycle runs; default a temp dir) | --from-workspace DIR (use
     the last completed cycle there; the ablation's runs, variants, probes, datasets and two checkpoints
     are added to that store, no cycle is recorded and the promoted model does not change) | --config |
     --k N (instances per bootcamp per arm; default training.collect_n) | --share F (arm A's variant
     share; default synthesis.share) | --probes N (default 8) |
     --sft-steps N (both arms; default training.sft.max_steps) | --eval-n N | --seed N |
     for the starting cycle only: --collect-n, --start-sft-steps, --rl-steps, --tiny-model (smoke runs).
Smoke: python benchmarks/bench_targeting.py --tiny-model --eval-n 6 --collect-n 12 --start-sft-steps 20
     --rl-steps 1 --k 8 --probes 2 --sft-steps 10
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from campflow.config import CampflowConfig
    from campflow.storage.promotion import Paired
    from campflow.storage.store import Store

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent
TINY = {
    "training.tiny.hidden_size": 64,
    "training.tiny.intermediate_size": 128,
    "training.tiny.layers": 2,
    "training.tiny.heads": 2,
    "training.tiny.kv_heads": 1,
    "training.tiny.vocab_size": 600,
    "training.tiny.corpus_per_level": 6,
    "training.rl.instances_per_bootcamp": 2,
    "training.rl.max_completion_length": 32,
}
ARMS = ("A", "B")


@dataclass
class Arm:
    """One arm of the ablation: what it was trained on and where its results are."""

    name: str
    collect_run: str
    instances: dict[str, int]  # bootcamp -> instances collected
    targeted: dict[str, int] = field(default_factory=dict)  # bootcamp -> of them variant instances
    dataset: str = ""
    rows: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    cut: int = 0  # rows cut to match the other arm
    model: str = ""
    eval_run: str = ""
    probe_run: str = ""


@dataclass
class Ablation:
    """The ablation's ids, for the report."""

    tag: str
    start_model: str
    start_eval: str
    start_probes: str
    synthesis: dict
    variants: list[str]
    probes: list[str]
    levels: dict[str, list[int]]
    arms: dict[str, Arm]
    seconds: dict[str, float]


def _seed(*parts: object) -> int:
    return int(hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:12], 16)


def _rows(store: Store, dataset_id: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """A dataset's episode ids per bootcamp, and what its filter dropped."""
    import datasets

    r = store.query("SELECT path, filter FROM datasets WHERE dataset_id = ?", [dataset_id])[0]
    ds = datasets.load_from_disk(store.stored_path(r["path"])).select_columns(["episode_id", "bootcamp"])
    out: dict[str, list[str]] = {}
    for row in ds:
        out.setdefault(row["bootcamp"], []).append(row["episode_id"])
    return {b: sorted(v) for b, v in out.items()}, json.loads(r["filter"] or "{}").get("dropped", {})


def run_ablation(cfg: CampflowConfig, start_model: str, k: int, seed: int, share: float) -> Ablation:
    """Run the ablation as a Prefect flow (steps 1-4 of the module docstring), returning an :class:`Ablation`."""
    from prefect import flow

    from campflow.bootcamps.splits import assert_not_held_out, train_instances
    from campflow.errors import CampflowError
    from campflow.flows.collect import collect_flow, variant_instances
    from campflow.flows.evaluate import evaluate_flow
    from campflow.flows.runners import task_runner
    from campflow.flows.teachers import teacher_config
    from campflow.serving import CheckpointServers
    from campflow.storage.workspace import Workspace
    from campflow.synthesis.curriculum import train_levels
    from campflow.tasks.synthesis import mine_failures_task, synthesize_task
    from campflow.tasks.training import build_dataset_task, sft_task
    from campflow.training import checkpoints

    @flow(name="bench-targeting", log_prints=False, validate_parameters=False)
    def ablation() -> Ablation:
        ws = Workspace.from_config(cfg)
        store = ws.store
        runner = task_runner(cfg.rollout)
        servers = CheckpointServers(cfg)
        seconds: dict[str, float] = {}
        clock = [time.perf_counter()]

        def lap(stage: str) -> None:
            now = time.perf_counter()
            seconds[stage] = now - clock[0]
            clock[0] = now
            print(f"   {stage}: {seconds[stage]:.0f} s", flush=True)

        try:
            start = checkpoints.get(store, start_model)
            # everything the arms' instances and the start's evaluation depend on: a rerun reuses its runs
            synthesis_cfg, eval_cfg = cfg.synthesis.model_dump(mode="json"), cfg.eval.model_dump(mode="json")
            levels = {b: train_levels(store, b, cfg.training.levels) for b in cfg.training.bootcamps}
            tag = f"tgt-{_seed(start.model_id, k, seed, share, synthesis_cfg, eval_cfg, levels):012x}"
            start_eval = f"{tag}-eval-start"
            evaluate_flow.with_options(task_runner=runner)(servers.config(start.path), start_eval)
            servers.check()
            lap("evaluate start")
            mine_failures_task(cfg, start_eval)
            calibrating = servers.config(start.path).policy if cfg.synthesis.calibration_samples else None
            synthesis = synthesize_task(cfg, start_eval, calibrating, {b: max(lv) for b, lv in levels.items()})
            # the variants aimed at this run's clusters (a proposal an earlier cycle already decided keeps
            # that cycle's cluster: it was targeted, and trained on, then)
            variants = [
                r["variant_id"]
                for r in store.query(
                    "SELECT v.variant_id FROM variants v JOIN clusters c USING (cluster_id) "
                    "WHERE c.run_id = ? AND v.status = 'accepted' ORDER BY v.variant_id",
                    [start_eval],
                )
            ]
            probes = [
                r["instance_id"]
                for r in store.query(
                    "SELECT instance_id FROM instances WHERE split = 'probe' AND variant_id IN (SELECT unnest(?)) "
                    "ORDER BY instance_id",
                    [variants],
                )
            ]
            lap("mine + synthesize")
            if not variants:
                raise CampflowError(
                    f"no accepted variant for the start model's failures (synthesis: {json.dumps(synthesis)}); "
                    "nothing to target"
                )
            held_out = store.probe_ids()
            picked = {
                b: variant_instances(ws, b, round(share * k), variants, skip=held_out) for b in cfg.training.bootcamps
            }
            # arm A's rest, and arm B, uniform at the same levels from seeds of their own
            mixed = {
                b.name: train_instances(
                    b, k - len(picked[b.name]), seed=_seed("uniform-a", tag, b.name), levels=levels[b.name]
                )
                for b in ws.bootcamps(cfg.training.bootcamps)
            }
            uniform = {
                b.name: train_instances(b, k, seed=_seed("uniform", tag, b.name), levels=levels[b.name])
                for b in ws.bootcamps(cfg.training.bootcamps)
            }
            a_ids = [i.id for v in picked.values() for _, i in v] + [i.id for v in mixed.values() for i in v]
            b_ids = [i.id for v in uniform.values() for i in v]
            for what, ids in (("arm A", a_ids), ("arm B", b_ids)):
                assert_not_held_out(ids, store.eval_ids(), held_out, what=f"{what}'s teacher collection")
            if set(a_ids) & set(b_ids):
                raise CampflowError(f"the arms share train instance {min(set(a_ids) & set(b_ids))}")
            for pairs in picked.values():
                for vid, inst in pairs:
                    store.write_instances([inst], split="train", origin="synthesized", variant_id=vid)
            for made in [*mixed.values(), *uniform.values()]:
                store.write_instances(made, split="train")
            arms = {
                "A": Arm(
                    "A",
                    f"{tag}-collect-a",
                    {b: len(picked[b]) + len(mixed[b]) for b in picked if picked[b] or mixed[b]},
                    {b: len(v) for b, v in picked.items()},
                ),
                "B": Arm("B", f"{tag}-collect-b", {b: len(v) for b, v in uniform.items() if v}),
            }
            teacher = teacher_config(cfg, servers, start.path, "oracle")  # the grounded demonstrator
            for arm, ids in zip(arms.values(), (a_ids, b_ids), strict=True):
                collect_flow.with_options(task_runner=runner)(teacher, arm.collect_run, only_ids=ids)
            lap("collect (demonstrator)")
            kept = {}
            for arm in arms.values():
                arm.dataset = build_dataset_task(cfg, [arm.collect_run], str(start.path))
                kept[arm.name], arm.dropped = _rows(store, arm.dataset)
            for name in ARMS:  # cut each bootcamp to the smaller arm's rows, deterministically by episode id
                other = kept["B" if name == "A" else "A"]
                chosen = {b: ids[: len(other.get(b, []))] for b, ids in kept[name].items()}
                arm = arms[name]
                arm.cut = sum(len(kept[name][b]) - len(c) for b, c in chosen.items())
                if arm.cut:
                    flat = [e for ids in chosen.values() for e in ids]
                    arm.dataset = build_dataset_task(cfg, [arm.collect_run], str(start.path), flat)
            for arm in arms.values():
                arm.rows = {b: len(v) for b, v in _rows(store, arm.dataset)[0].items()}
            if arms["A"].rows != arms["B"].rows:
                raise CampflowError(f"the arms' datasets differ after the cut: A {arms['A'].rows}, B {arms['B'].rows}")
            lap("datasets")
            for arm in arms.values():
                arm.model = sft_task(cfg, start.model_id, arm.dataset)
                lap(f"SFT arm {arm.name}")
            start_probes = f"{tag}-probes-start"
            for model_id, probe_run in [(start.model_id, start_probes)] + [
                (a.model, f"{tag}-probes-{a.model}") for a in arms.values()
            ]:
                collect_flow.with_options(task_runner=runner)(
                    servers.config(checkpoints.get(store, model_id).path),
                    probe_run,
                    only_ids=probes,
                    kind="probe",
                    samples=cfg.eval.samples,
                )
                servers.check()
            for arm in arms.values():
                arm.probe_run, arm.eval_run = f"{tag}-probes-{arm.model}", f"{tag}-eval-{arm.model}"
                evaluate_flow.with_options(task_runner=runner)(
                    servers.config(checkpoints.get(store, arm.model).path), arm.eval_run
                )
                servers.check()
            lap("probes + evaluate arms")
        finally:
            servers.close()
        return Ablation(
            tag, start.model_id, start_eval, start_probes, synthesis, variants, probes, levels, arms, seconds
        )

    return ablation()


def _rate(p: float, n: int) -> str:
    from campflow.storage.promotion import binomial_se

    return f"{p:6.1%} ± {binomial_se(p, n):5.1%}"


def _diff(pair: Paired) -> str:
    return (
        f"A-B {100 * pair.delta:+5.1f} ± {100 * pair.se:4.1f} points paired (± {100 * pair.se_independent:4.1f} "
        f"independent); A only {pair.a_only}, B only {pair.b_only}, n={pair.n}"
    )


def report(store: Store, result: Ablation) -> None:
    """Print every figure of the ablation, ending in the GOAL line."""
    from campflow.storage.promotion import compare, paired

    a, b = result.arms["A"], result.arms["B"]
    s = result.synthesis
    print(f"\n== targeting ablation {result.tag}: start {result.start_model}, train levels {result.levels}")
    print(
        f"   synthesis: {s.get('clusters')} clusters, {s.get('proposed')} proposed, {s.get('accepted')} accepted, "
        f"rejected {s.get('rejected')}, already recorded {s.get('already_recorded')}; "
        f"targeted: {len(result.variants)} variants, {len(result.probes)} probes"
    )
    share = {bc: f"{n} targeted" for bc, n in a.targeted.items()}
    for arm, label in ((a, f"targeted variants and uniform, {share}"), (b, "uniform train instances")):
        levels = {
            r["level"]: r["n"]
            for r in store.query(
                "SELECT level, count(*) AS n FROM episodes WHERE run_id = ? GROUP BY 1 ORDER BY 1", [arm.collect_run]
            )
        }
        print(
            f"   arm {arm.name} ({label}): {arm.instances} instances collected, levels {levels}; dataset {arm.dataset} "
            f"{sum(arm.rows.values())} rows {arm.rows} (filter dropped {arm.dropped or 'none'}, cut {arm.cut}); "
            f"SFT -> {arm.model}"
        )
    cluster_of: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    for r in store.query(
        "SELECT i.instance_id, v.cluster_id, v.bootcamp, c.label FROM instances i JOIN variants v USING (variant_id) "
        "LEFT JOIN clusters c USING (cluster_id) WHERE i.instance_id IN (SELECT unnest(?)) ORDER BY 2, 1",
        [result.probes],
    ):
        cluster_of.setdefault(r["cluster_id"], []).append(r["instance_id"])
        labels[r["cluster_id"]] = f"{r['bootcamp']}: {(r['label'] or '')[:48]}"
    print("\n   targeted clusters' probes: start | arm A | arm B")
    targeted = None
    for cid, ids in [*sorted(cluster_of.items()), (None, result.probes)]:
        ab = paired(store, a.probe_run, b.probe_run, ids)
        st = paired(store, result.start_probes, a.probe_run, ids)
        name = labels[cid] if cid else "all targeted clusters"
        print(f"   {name:<58} {_rate(st.p_a, st.n)} | {_rate(ab.p_a, ab.n)} | {_rate(ab.p_b, ab.n)}  {_diff(ab)}")
        targeted = ab
    print("\n   eval split: start | arm A | arm B")
    start_of = {c.scope: c for c in compare(store, result.start_eval, a.eval_run)}
    if "all" in start_of and not start_of["all"].p_before:
        print("   (the start solves none of the eval split: both arms train from a model that has learned nothing yet)")
    for c in compare(store, b.eval_run, a.eval_run):
        st = start_of.get(c.scope)
        start = _rate(st.p_before, st.n_before) if st else "     -        "
        print(
            f"   {c.scope:<22} {start} | {_rate(c.p_after, c.n_after)} | {_rate(c.p_before, c.n_before)}  "
            f"A-B {100 * c.delta:+5.1f} ± {100 * c.se:4.1f} points independent (n={c.n_after})"
        )
    overall = paired(store, a.eval_run, b.eval_run)
    print(f"   {'all, paired':<22} {_diff(overall)}")
    print("   stage seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in result.seconds.items()))
    print(
        f"RATIO targeting: targeted probes A {targeted.p_a:.1%} vs B {targeted.p_b:.1%} (n={targeted.n}); "
        f"eval split A {overall.p_a:.1%} vs B {overall.p_b:.1%} (n={overall.n})"
    )
    t_yes = "yes" if targeted.delta > 2 * targeted.se else "no"
    o_yes = "yes" if overall.delta >= -2 * overall.se else "no"
    print(
        f"GOAL targeted: A-B = {100 * targeted.delta:+.1f} ± {100 * targeted.se:.1f} points (> 2 se: {t_yes}); "
        f"overall: A-B = {100 * overall.delta:+.1f} ± {100 * overall.se:.1f} points (not worse: {o_yes})"
    )


def _start_from(store: Store, cycle_id: str | None = None) -> tuple[str, str]:
    """The candidate of the cycle ``cycle_id`` (default: the last completed one), and that cycle's id."""
    rows = store.query(
        "SELECT cycle_id, candidate_model_id AS model FROM cycles WHERE status = 'completed' "
        "AND candidate_model_id IS NOT NULL AND (? IS NULL OR cycle_id = ?) ORDER BY finished_at DESC LIMIT 1",
        [cycle_id, cycle_id],
    )
    if not rows:
        raise SystemExit(f"no completed cycle in the store at {store.path}; run `campflow improve` there first")
    return rows[0]["model"], rows[0]["cycle_id"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--workspace", type=Path, default=None, help="where the starting cycle runs (a temp dir)")
    where.add_argument("--from-workspace", type=Path, default=None, help="start from its last completed cycle")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "default.yaml")
    ap.add_argument("--k", type=int, default=None, help="train instances per bootcamp per arm (training.collect_n)")
    ap.add_argument("--share", type=float, default=None, help="arm A's share of variant instances (synthesis.share)")
    ap.add_argument("--probes", type=int, default=8, help="held-out probes per accepted variant")
    ap.add_argument("--sft-steps", type=int, default=None, help="SFT steps of each arm (training.sft.max_steps)")
    ap.add_argument("--eval-n", type=int, default=None, help="eval instances per bootcamp")
    ap.add_argument("--seed", type=int, default=0, help="seed of the uniform draw (synthesis.seed stays the config's)")
    ap.add_argument("--collect-n", type=int, default=None, help="starting cycle: train instances per bootcamp")
    ap.add_argument("--start-sft-steps", type=int, default=None, help="starting cycle: SFT steps")
    ap.add_argument("--rl-steps", type=int, default=None, help="starting cycle: RL steps")
    ap.add_argument("--tiny-model", action="store_true", help="starting cycle: a much smaller model (smoke runs)")
    args = ap.parse_args()
    for flag in ("k", "probes", "sft_steps", "eval_n"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            sys.exit(f"--{flag.replace('_', '-')} = {value}: expected a positive number")
    if args.share is not None and not 0 < args.share <= 1:
        sys.exit(f"--share = {args.share}: expected a fraction in (0, 1]")
    if args.from_workspace is not None and not (args.from_workspace / "campflow.duckdb").exists():
        sys.exit(f"--from-workspace {args.from_workspace}: no campflow.duckdb there (a workspace where improve ran)")

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    import datasets

    datasets.disable_progress_bars()

    from campflow.config import load_config
    from campflow.errors import CampflowError
    from campflow.flows.improve import improve
    from campflow.storage.workspace import Workspace

    ws = args.from_workspace or args.workspace or Path(tempfile.mkdtemp(prefix="bench-targeting-"))
    overrides = {"workspace.path": str(ws), "improve.reports_dir": str(ws / "reports"), "eval.n": args.eval_n}
    started = time.perf_counter()
    ran = None
    if args.from_workspace is None:
        start_cfg = load_config(
            args.config,
            {
                **overrides,
                **(TINY if args.tiny_model else {}),
                "training.collect_n": args.collect_n,
                "training.sft.max_steps": args.start_sft_steps,
                "training.rl.max_steps": args.rl_steps,
            },
            env={},
        )
        print(f"-- starting cycle in {ws}", flush=True)
        ran = improve(start_cfg, cycle_id=f"tgt-start-{int(time.time())}", cycles_n=1).cycle_id
        print(f"   starting cycle: {time.perf_counter() - started:.0f} s", flush=True)
    store = Workspace.from_config(load_config(args.config, overrides, env={})).store
    start_model, cycle_id = _start_from(store, ran)
    cycle = store.query("SELECT promoted, decision FROM cycles WHERE cycle_id = ?", [cycle_id])[0]
    print(
        f"-- start: {start_model}, candidate of cycle {cycle_id} (promoted: {cycle['promoted']}; {cycle['decision']})"
    )
    cfg = load_config(
        args.config,
        {**overrides, "training.sft.max_steps": args.sft_steps, "synthesis.probes_per_variant": args.probes},
        env={},
    )
    cfg.eval.bootcamps = Workspace.from_config(cfg).names(cfg.eval.bootcamps)
    cfg.training.bootcamps = list(cfg.eval.bootcamps)  # train on what is evaluated, as improve does
    try:
        share = cfg.synthesis.share if args.share is None else args.share
        result = run_ablation(cfg, start_model, args.k or cfg.training.collect_n, args.seed, share)
    except CampflowError as exc:
        sys.exit(f"bench_targeting: {exc}")
    print(f"\nworkspace {ws}; {time.perf_counter() - started:.0f} s in all")
    report(store, result)


if __name__ == "__main__":
    main()
