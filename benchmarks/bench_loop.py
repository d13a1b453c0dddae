"""The loop, proved or not: three improvement cycles from the embedded base, each from the last promoted model.

Per cycle it prints the eval-split pass rate before and after (with binomial standard errors), the
per-instance outcomes (fixed / regressed / still failing / still passing), the probe pass rates of
each failure cluster's variants (starting model vs candidate, on held-out probes), RL's effect on
held-out band instances, the curriculum's next levels and the promotion decision with its reason.

Run: python benchmarks/bench_loop.py [--workspace DIR] [--cycles 3] [--config configs/default.yaml]
     [--eval-n N] [--collect-n N] [--sft-steps N] [--rl-steps N]
(the defaults are configs/default.yaml's, ~10-15 minutes a cycle on 2 cores; tiny flags give a smoke run)
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
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--eval-n", type=int, default=None, help="eval instances per bootcamp")
    ap.add_argument("--collect-n", type=int, default=None, help="train instances per bootcamp collected")
    ap.add_argument("--sft-steps", type=int, default=None)
    ap.add_argument("--rl-steps", type=int, default=None)
    ap.add_argument("--tiny-model", action="store_true", help="a much smaller embedded model (smoke runs)")
    ap.add_argument(
        "--report-only", action="store_true", help="print the completed cycles of --workspace (e.g. after a stop)"
    )
    args = ap.parse_args()

    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    import datasets

    datasets.disable_progress_bars()

    from campflow.config import load_config
    from campflow.flows.improve import improve
    from campflow.storage.workspace import Workspace

    ws = args.workspace or Path(tempfile.mkdtemp(prefix="bench-loop-"))
    overrides = {
        "workspace.path": str(ws),
        "improve.reports_dir": str(ws / "reports"),
        "eval.n": args.eval_n,
        "training.collect_n": args.collect_n,
        "training.sft.max_steps": args.sft_steps,
        "training.rl.max_steps": args.rl_steps,
    }
    if args.tiny_model:
        overrides.update(
            {
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
        )
    cfg = load_config(args.config, overrides, env={})
    if args.report_only:
        if args.workspace is None:
            raise SystemExit("error: --report-only reads the cycles of --workspace DIR; give one")
        store = Workspace.from_config(cfg).store
        done = [r["cycle_id"] for r in store.query(CYCLES + " WHERE status = 'completed' ORDER BY started_at")]
        print(f"{len(done)} completed cycle(s); workspace {ws}")
        for cycle_id in done:
            print_cycle(store, cycle_id)
        return
    started = time.perf_counter()
    last = improve(cfg, cycle_id=f"loop-{int(time.time())}", cycles_n=args.cycles)
    elapsed = time.perf_counter() - started
    store = Workspace.from_config(cfg).store
    print(f"\n{args.cycles} cycle(s) in {elapsed:.0f} s; workspace {ws}")
    for s in [*last.earlier, last]:
        print_cycle(store, s.cycle_id)


CYCLES = "SELECT cycle_id, base_model_id, candidate_model_id, promoted, decision FROM cycles"


def print_cycle(store, cycle_id: str) -> None:  # noqa: ANN001
    """One cycle's figures, read back from the store: eval before/after, outcomes, probes, RL, curriculum."""
    from campflow.storage.promotion import binomial_se, compare

    row = store.query(CYCLES + " WHERE cycle_id = ?", [cycle_id])[0]
    verdict = "promoted" if row["promoted"] else "not promoted"
    print(f"\n== {cycle_id}: {row['base_model_id']} -> {row['candidate_model_id']}: {verdict}")
    print(f"   decision: {row['decision']}")
    for c in compare(store, f"{cycle_id}-before", f"{cycle_id}-after"):
        print(
            f"   eval {c.scope:<22} {c.p_before:6.1%} ± {binomial_se(c.p_before, c.n_before):5.1%} -> "
            f"{c.p_after:6.1%} ± {binomial_se(c.p_after, c.n_after):5.1%}  ({100 * c.delta:+.1f} ± "
            f"{100 * c.se:.1f} points, n={c.n_after})"
        )
    for r in store.query(
        "SELECT bootcamp, sum(fixed) AS f, sum(regressed) AS r, sum(still_failing) AS sf, "
        "sum(still_passing) AS sp FROM cycle_outcome_counts WHERE cycle_id = ? GROUP BY 1 "
        "ORDER BY 1",
        [cycle_id],
    ):
        print(
            f"   outcomes {r['bootcamp']:<12} fixed {r['f']}, regressed {r['r']}, still failing {r['sf']}, "
            f"still passing {r['sp']}"
        )
    for r in store.query(
        "SELECT bootcamp, cluster_label, sum(probes) AS n, sum(pass_before * probes) / "
        "sum(probes) AS b, sum(pass_after * probes) / sum(probes) AS a FROM probe_outcomes "
        "WHERE cycle_id = ? GROUP BY bootcamp, cluster_id, cluster_label ORDER BY 1, 3 DESC",
        [cycle_id],
    ):
        print(
            f"   probes {r['bootcamp']}: {(r['cluster_label'] or '')[:50]:<50} {r['b']:6.1%} -> {r['a']:6.1%} "
            f"(n={r['n']}, SE of the difference {100 * (binomial_se(r['b'], r['n']) ** 2 + binomial_se(r['a'], r['n']) ** 2) ** 0.5:.1f} points)"
        )
    state = store.query(
        "SELECT state->>'$.rl_effect' AS rl, state->>'$.curriculum' AS cur FROM cycles WHERE cycle_id = ?",
        [cycle_id],
    )[0]
    print(f"   RL on held-out band instances: {state['rl'] or 'no RL (empty band or improve.rl off)'}")
    print(f"   curriculum, next levels: {state['cur']}")


if __name__ == "__main__":
    main()
