"""Which recipe teaches the tiny model most for the same labels and compute: six arms, several seeds, paired.

The protocol, fixed before any run (issue 40, item 5); only the budgets are options, the same for every arm:

- Bootcamps calculator and maze, levels 1 and 2 (as ``make run``); the embedded base model of
  ``configs/default.yaml``, built once and shared by every arm and seed.
- Per seed s, fresh train-split instances (never an eval-split or validation id; checked): ``demos-1`` and
  ``demos-2``, N each per bootcamp, played by the grounded demonstrator; ``corrections`` and ``self``
  instances, N each per bootcamp, for arms (c) and (d).
- A **validation split**: ``--val-n`` train-side instances per bootcamp (one fixed seed for every seed),
  recorded as held-out probes, so no dataset builder can take one (each checks). It picks the winner; the
  eval split (``--eval-n`` per bootcamp, the fixed ``make run`` split) is only reported.
- The arms; every SFT stage is S steps (``--sft-steps``) at the config's settings, seed s:
  (a) SFT on ``demos-1`` from the base (today's recipe, half of ``make run``'s demonstrations);
  (b) (a), then a second SFT stage on ``demos-1`` + ``demos-2``: twice the demonstrations, 2S steps;
  (c) (a), then a second stage on ``demos-1`` + on-policy corrections: (a) plays the ``corrections``
      instances greedily, the demonstrator labels every state it reaches (after the first disagreement the
      demonstrator acts: DAgger), and the labels are cut to exactly the number of demonstrator actions in
      ``demos-2`` per bootcamp, so (b) and (c) have the same demonstrator labels and the same steps;
  (d) expert iteration: (a), then a second stage on ``demos-1`` + (a)'s own passes (best of 4 samples at
      ``training.self_temperature`` on the ``self`` instances): the model's labels, not the demonstrator's;
  (e) (a), then GRPO on (a)'s learnable band (``--rl-steps``), the recipe declared here, not tuned:
      TRL's ``dapo`` loss, clip-higher ``epsilon_high`` 0.28, groups of equal rewards dropped, the band
      balanced by level and divergence kind;
  (f) (c), then the same GRPO on (c)'s band.
- Every arm's checkpoint plays the eval split greedily (pass@1), eight samples at temperature 1.0
  (pass@8: an instance counts when any sample passes), and the validation split greedily.
- Per arm, the mean over seeds; against (a) and against (b), the paired difference per seed (same seed, same
  base, same ``demos-1``) with a 95% t interval (n - 1 degrees of freedom).
- The winner is the arm with the highest mean validation pass@1; RL is worth its place by default only if (e)
  beats (b) on the eval split with the interval above zero.
- **Tie rule, added 2026-12-07 after two runs in which (b) and (d) led by turns inside the noise (+0.3 and
  -2.0 points), and declared before the third run (seeds 5-9)**: the leader's lead counts only where it is
  shown. The contenders are the leader and every arm the leader does not beat on validation with the paired
  interval above zero; of them, the one whose training costs least wins (the mean over seeds of the seconds
  of every stage on its way from the base, its sampling included: (a) a; (b) a + b; (c) a + c; (d) a + d;
  (e) a + e; (f) a + c + f). The cycle's default is that winner.

Each seed runs in a process of its own (its own workspace and Prefect home), ``--parallel`` at a time at
one thread each. Per seed a JSON file is written in ``--out``; ``--report-only`` prints the table again
from them. Prints a markdown table, the paired differences and ``RESULT`` lines (the winner, its paired margin
on validation over the runner-up, RL against (b)).

A seed cut short resumes: every step it finished (instances drawn, checkpoints trained, arms measured) is kept
in ``seed-N/progress.json`` as it finishes, and the same command with the same ``--out`` and budgets goes on from
there (the evaluation runs themselves resume episode by episode); other budgets are refused.

Run: python benchmarks/bench_learning.py [--seeds 0 1 2 3 4] [--parallel 2] [--n 300] [--sft-steps 250]
     [--rl-steps 40] [--eval-n 40] [--val-n 40] [--out DIR] [--report-only]
(the time is printed. Measured, on an otherwise idle 2-core machine: the five seeds at --parallel 5 --n 120
--sft-steps 200 --rl-steps 20 --eval-n 16 --val-n 20 took 107 min in one run, 95-105 min a seed at one thread,
five processes sharing the two cores (126 min for seeds 5-9 with a CI run beside the last 50 minutes); at --n 200
--eval-n 30 --val-n 30 a seed took 54-65 min, two side by side, about half of it measuring the six arms (3,600
episodes, most of them pass@8's samples): five seeds ~3 h that way. The defaults take longer still: give it a
machine of its own)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "default.yaml"
BOOTCAMPS = ["calculator", "maze"]
LEVELS = [1, 2]
ARMS = {
    "a": "SFT on demonstrations",
    "b": "SFT on twice the demonstrations",
    "c": "SFT + on-policy corrections",
    "d": "expert iteration (own passes)",
    "e": "(a) + GRPO",
    "f": "(c) + GRPO",
}
VALIDATION_SEED = 424_242  # one validation split for every seed
SELF_SAMPLES = 4
BUDGETS = ("n", "sft_steps", "rl_steps", "eval_n", "val_n")
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def budgets_of(args: argparse.Namespace) -> dict[str, int]:
    return {k: getattr(args, k) for k in BUDGETS}


def check_budgets(seed: int, kept: Path, args: argparse.Namespace) -> None:
    """Refuse a seed file or progress file written with other budgets (the first runs' files named none)."""
    recorded = json.loads(kept.read_text()).get("budgets") if kept.exists() else None
    if recorded is not None and recorded != budgets_of(args):
        raise SystemExit(f"seed {seed}: {kept} was run with budgets {recorded}, not {budgets_of(args)}: "
                         "give the same budgets, or another --out")  # fmt: skip


# -- one seed, in a process of its own ------------------------------------------------------------------------


class Seed:
    """Everything one seed's arms share: the config, the store, the held-out ids, the instances drawn."""

    def __init__(self, seed: int, args: argparse.Namespace) -> None:
        from campflow.config import load_config
        from campflow.hardware import resolve_hardware
        from campflow.storage.workspace import Workspace

        self.seed, self.args = seed, args
        self.cfg = load_config(
            CONFIG,
            overrides={
                "workspace.path": "campflow-data",
                "eval.bootcamps": BOOTCAMPS,
                "eval.levels": LEVELS,
                "eval.n": args.eval_n,
                "training.bootcamps": BOOTCAMPS,
                "training.levels": LEVELS,
                "training.sft.max_steps": args.sft_steps,
                "training.sft.seed": seed,
                "training.rl.max_steps": args.rl_steps,
                "training.rl.seed": seed,
                "training.rl.loss_type": "dapo",
                "training.rl.epsilon_high": 0.28,
                "training.rl.drop_equal_groups": True,
                "training.rl.band_balance": True,
            },
        )
        self.ws = Workspace.from_config(self.cfg)
        self.store = self.ws.store
        self.hardware = resolve_hardware(
            self.cfg.training.device, self.cfg.training.precision, cpu_threads=self.cfg.training.cpu_threads
        )
        self.base = self.store.scalar("SELECT model_id FROM checkpoints WHERE kind = 'base' ORDER BY created_at")
        self.progress_file = Path("progress.json")  # the seed's own folder (the parent's cwd for it)
        self.progress: dict[str, Any] = {"budgets": budgets_of(args), "steps": {}, "seconds": {}, "counts": {}}
        if self.progress_file.exists():  # the parent checked its budgets
            self.progress = json.loads(self.progress_file.read_text())
            self.progress["resumed"] = self.progress.get("resumed", 0) + 1
        self.seconds: dict[str, float] = self.progress["seconds"]
        self.counts: dict[str, Any] = self.progress["counts"]

    def save(self) -> None:
        """Write the progress so far (whole file, then renamed: a kill never leaves half of it)."""
        tmp = self.progress_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.progress, indent=1))
        tmp.replace(self.progress_file)

    def step(self, key: str, fn: Any) -> Any:
        """``fn()``'s value (JSON), computed once: a resumed seed takes it from its progress file."""
        steps = self.progress["steps"]
        if key not in steps:
            started = time.perf_counter()
            steps[key] = fn()
            self.seconds[key] = time.perf_counter() - started
            self.save()
        return steps[key]

    def model(self, arm: str, train: Any) -> Any:
        """Arm ``arm``'s checkpoint: ``train()``'s, or the one a resumed seed recorded."""
        from campflow.training import checkpoints

        return checkpoints.get(self.store, self.step(arm, lambda: train().model_id))

    # instances -----------------------------------------------------------------------------------------------

    def held_out(self) -> set[str]:
        return self.store.eval_ids() | self.store.probe_ids()

    def fresh(self, tag: int, n: int) -> list[Any]:
        """``n`` train instances per bootcamp from seed ``tag``, skipping every held-out or already drawn id."""
        from campflow.bootcamps import registry
        from campflow.bootcamps.splits import train_instances

        taken = self.held_out() | {r["instance_id"] for r in self.store.query("SELECT instance_id FROM instances")}
        out = []
        for name in BOOTCAMPS:
            drawn = train_instances(registry.make(name), 3 * n, seed=tag, levels=LEVELS)
            out += [i for i in drawn if i.id not in taken][:n]
        return out

    def record(self, instances: list[Any], split: str = "train") -> list[str]:
        self.store.write_instances(instances, split=split)
        return [i.id for i in instances]

    def validation(self) -> list[str]:
        from campflow.bootcamps import registry
        from campflow.bootcamps.splits import train_instances

        made = []
        for name in BOOTCAMPS:
            drawn = train_instances(registry.make(name), 2 * self.args.val_n, seed=VALIDATION_SEED, levels=LEVELS)
            made += [i for i in drawn if i.id not in self.store.eval_ids()][: self.args.val_n]
        return self.record(made, split="probe")  # held out like a variant's probes: no dataset may take one

    # steps ---------------------------------------------------------------------------------------------------

    def policy_cfg(self, path: str | None, temperature: float = 0.0, kind: str = "local") -> Any:
        cfg = self.cfg.model_copy(deep=True)
        cfg.policy.kind, cfg.policy.model, cfg.policy.temperature = kind, path, temperature
        return cfg

    def collect(self, run_id: str, ids: list[str], cfg: Any, samples: int = 1, kind: str = "collect") -> None:
        from campflow.flows.collect import collect_flow

        collect_flow(cfg, run_id, only_ids=ids, kind=kind, samples=samples)

    def labels(self, run_id: str) -> dict[str, int]:
        """The demonstrator's actions in the solved episodes of ``run_id``, per bootcamp."""
        rows = self.store.query(
            "SELECT bootcamp, sum(turns)::INTEGER AS n FROM episodes WHERE run_id = ? AND success GROUP BY bootcamp",
            [run_id],
        )
        return {r["bootcamp"]: int(r["n"]) for r in rows}

    def dataset(self, runs: list[str]) -> str:
        from campflow.training.filtering import build_sft_dataset

        return build_sft_dataset(self.store, self.ws.path, runs, self.cfg.training.filter).dataset_id

    def sft(self, start: str, dataset_id: str) -> Any:
        from campflow.training.sft import train_sft

        return train_sft(
            self.store, self.ws.path, start, dataset_id, self.cfg.training.sft, hardware=self.hardware
        ).checkpoint

    def corrections(self, model: Any, ids: list[str], target: dict[str, int]) -> str:
        """``model`` plays ``ids`` greedily, the demonstrator labels its states; the labels are cut to ``target``
        per bootcamp (in instance, sample and turn order) and written as run ``corrections``; its dataset."""
        import asyncio

        from transformers import AutoTokenizer

        from campflow.agents.factory import build_policy
        from campflow.flows.collect import recorded_instances
        from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episodes
        from campflow.training.corrections import CorrectingPolicy, build_corrected_dataset, write_corrections

        run_id = "corrections"
        if self.store.scalar("SELECT count(*) FROM episodes WHERE run_id = ?", [run_id]):
            raise SystemExit(
                f"seed {self.seed}: run {run_id!r} was cut after its episodes were written and before (c) was "
                "trained; it cannot resume: remove this seed's folder and its progress to run it again"
            )
        cfg = self.policy_cfg(str(model.path))
        policy = CorrectingPolicy(build_policy(cfg.policy), "demonstrator")
        instances = recorded_instances(self.ws, ids)
        specs = [EpisodeSpec(self.ws.bootcamp(i.bootcamp), i) for i in instances]
        self.store.start_run(run_id, "corrections", cfg.model_dump(mode="json"), policy.model_id)

        async def play() -> list[Any]:
            try:
                return await run_episodes(
                    specs, policy, RolloutSettings.from_config(cfg.rollout), run_id=run_id, concurrency=64
                )
            finally:
                await policy.model.aclose()

        episodes = asyncio.run(play())
        self.store.write_episodes(episodes)
        bootcamp_of = {i.id: i.bootcamp for i in instances}
        kept, per = [], dict.fromkeys(BOOTCAMPS, 0)
        for c in sorted(policy.corrections, key=lambda c: (c.instance_id, c.sample, c.turn)):
            b = bootcamp_of[c.instance_id]
            if per[b] < target.get(b, 0):
                kept.append(c)
                per[b] += 1
        write_corrections(self.store, run_id, kept)
        self.store.finish_run(run_id, "completed", {"episodes": len(episodes), "corrections": len(kept)})
        self.counts["corrections"] = {
            "labels": per,
            "played": len(policy.corrections),
            "agreed": sum(c.agreed for c in kept),
        }
        tokenizer = AutoTokenizer.from_pretrained(str(model.path))
        return build_corrected_dataset(
            self.store, self.ws.path, ["demos-1"], [run_id], self.cfg.training.filter, tokenizer
        ).dataset_id

    def rl(self, start: Any, label: str) -> Any:
        """GRPO from ``start`` on its learnable band; ``start`` itself when the band is empty."""
        from campflow.flows import band
        from campflow.flows.runners import task_runner
        from campflow.training.rl import train_rl

        found = band.find_band(
            self.cfg, task_runner(self.cfg.rollout), start.path, f"{label}-band", dict.fromkeys(BOOTCAMPS, LEVELS)
        )
        self.counts[f"{label}_band"] = len(found.prompts)
        if not found.prompts:
            return start
        rows = self.store.query(
            "SELECT bootcamp, params, seed FROM instances WHERE instance_id IN (SELECT unnest(?)) ORDER BY instance_id",
            [found.prompts],
        )
        instances = [self.ws.bootcamp(r["bootcamp"]).generate(json.loads(r["params"]), int(r["seed"])) for r in rows]
        return train_rl(
            self.store, self.ws.path, start.model_id, BOOTCAMPS, self.cfg.training.rl, LEVELS,
            hardware=self.hardware, instances=instances,
        ).checkpoint  # fmt: skip

    # measuring -----------------------------------------------------------------------------------------------

    def rates(self, run_id: str) -> dict[str, Any]:
        """Per bootcamp and level, and overall: pass@1 (mean success) and pass@k (any sample of an instance)."""
        rows = self.store.query(
            "SELECT bootcamp, level, avg(s1) AS p1, avg(sk) AS pk, count(*) AS n FROM ("
            "  SELECT bootcamp, level, instance_id, avg(success::INTEGER) AS s1, max(success::INTEGER) AS sk"
            "  FROM episodes WHERE run_id = ? GROUP BY ALL) GROUP BY ALL ORDER BY ALL",
            [run_id],
        )
        out: dict[str, Any] = {f"{r['bootcamp']}/L{r['level']}": [float(r["p1"]), float(r["pk"])] for r in rows}
        overall = self.store.query(
            "SELECT avg(s1) AS p1, avg(sk) AS pk FROM (SELECT instance_id, avg(success::INTEGER) AS s1, "
            "max(success::INTEGER) AS sk FROM episodes WHERE run_id = ? GROUP BY instance_id)",
            [run_id],
        )[0]
        out["overall"] = [float(overall["p1"]), float(overall["pk"])]
        return out

    def measure(self, arm: str, model: Any, val_ids: list[str]) -> dict[str, Any]:
        from campflow.flows.evaluate import evaluate_flow

        path = str(model.path)
        evaluate_flow(self.policy_cfg(path), f"{arm}-eval")
        sampled = self.policy_cfg(path, temperature=1.0)
        sampled.eval.samples = 8
        evaluate_flow(sampled, f"{arm}-eval8")
        self.collect(f"{arm}-val", val_ids, self.policy_cfg(path), kind="probe")
        return {
            "model": model.model_id,
            "pass1": self.rates(f"{arm}-eval"),
            "pass8": {k: v[1] for k, v in self.rates(f"{arm}-eval8").items()},
            "val": self.rates(f"{arm}-val"),
        }

    def assert_nothing_held_out_trained(self) -> None:
        """No dataset, correction or RL prompt of this seed holds an eval or validation instance."""
        held = self.held_out()
        used = {
            r["instance_id"]
            for r in self.store.query(
                "SELECT instance_id FROM episodes WHERE run_id IN ('demos-1', 'demos-2', 'self', 'corrections') "
                "UNION SELECT instance_id FROM corrections"
            )
        }
        leaked = used & held
        if leaked:
            raise SystemExit(f"seed {self.seed}: {len(leaked)} held-out instances in training data, e.g. {min(leaked)}")


def run_seed(seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Every arm of one seed (module docstring), going on from its progress file; the figures as a dict."""
    s = Seed(seed, args)
    val_ids = s.step("validation", s.validation)
    n = args.n
    demo_cfg = s.policy_cfg(None, kind="demonstrator")
    for run, k in (("demos-1", 1), ("demos-2", 2)):
        ids = s.step(f"{run}-ids", lambda k=k: s.record(s.fresh(1000 * k + seed, n)))
        s.step(run, lambda run=run, ids=ids: s.collect(run, ids, demo_cfg))
    s.counts["demo_labels"] = {"demos-1": s.labels("demos-1"), "demos-2": s.labels("demos-2")}
    models: dict[str, Any] = {}
    models["a"] = s.model("a", lambda: s.sft(s.base, s.dataset(["demos-1"])))
    models["b"] = s.model("b", lambda: s.sft(models["a"].model_id, s.dataset(["demos-1", "demos-2"])))
    correction_ids = s.step("corrections-ids", lambda: s.record(s.fresh(3000 + seed, n)))
    models["c"] = s.model(
        "c",
        lambda: s.sft(models["a"].model_id, s.corrections(models["a"], correction_ids, s.labels("demos-2"))),
    )
    self_ids = s.step("self-ids", lambda: s.record(s.fresh(4000 + seed, n)))

    def expert_iteration() -> Any:
        own = s.policy_cfg(str(models["a"].path), temperature=s.cfg.training.self_temperature)
        s.collect("self", self_ids, own, samples=SELF_SAMPLES)
        s.counts["self_passed_instances"] = s.store.scalar(
            "SELECT count(DISTINCT instance_id) FROM episodes WHERE run_id = 'self' AND success"
        )
        return s.sft(models["a"].model_id, s.dataset(["demos-1", "self"]))

    models["d"] = s.model("d", expert_iteration)
    models["e"] = s.model("e", lambda: s.rl(models["a"], "e"))
    models["f"] = s.model("f", lambda: s.rl(models["c"], "f"))
    s.assert_nothing_held_out_trained()
    arms = {arm: s.step(f"{arm}-measure", lambda arm=arm: s.measure(arm, models[arm], val_ids)) for arm in ARMS}
    datasets = {
        r["dataset_id"]: int(r["rows"]) for r in s.store.query("SELECT dataset_id, rows FROM datasets ORDER BY ALL")
    }
    figures = {"seed": seed, "arms": arms, "seconds": s.seconds, "counts": s.counts, "datasets": datasets}
    return {**figures, "resumed": s.progress.get("resumed", 0), "budgets": s.progress["budgets"]}


# -- the parent: base model, seeds side by side, the table -----------------------------------------------------


def build_base(root: Path, env: dict[str, str]) -> Path:
    """The embedded base model, once, in ``root/base/campflow-data``."""
    base = root / "base"
    if not (base / "campflow-data" / "campflow.duckdb").exists():
        base.mkdir(parents=True, exist_ok=True)
        code = (
            "from campflow.config import load_config; from campflow.storage.workspace import Workspace; "
            "from campflow.training.base import ensure_base; "
            f"cfg = load_config({str(CONFIG)!r}, overrides={{'workspace.path': 'campflow-data'}}); "
            "print(ensure_base(Workspace.from_config(cfg).store, cfg).model_id)"
        )
        subprocess.run([sys.executable, "-c", code], cwd=base, env=env, check=True)
    return base / "campflow-data"


def seed_process(seed: int, root: Path, base: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    result, work = root / f"seed-{seed}.json", root / f"seed-{seed}"
    for kept in (result, work / "progress.json"):
        check_budgets(seed, kept, args)
    if result.exists():
        return json.loads(result.read_text())
    if (work / "progress.json").exists():
        print(f"seed {seed}: going on from {work / 'progress.json'}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(base, work / "campflow-data")
    started = time.perf_counter()
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", str(seed), "--out", str(root)]
    argv += ["--n", str(args.n), "--sft-steps", str(args.sft_steps), "--rl-steps", str(args.rl_steps)]
    argv += ["--eval-n", str(args.eval_n), "--val-n", str(args.val_n)]
    with open(root / f"seed-{seed}.log", "a") as log:
        done = subprocess.run(argv, cwd=work, env={**env, "PREFECT_HOME": str(work / "prefect")}, stdout=log,
                              stderr=subprocess.STDOUT)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"seed {seed} failed (exit {done.returncode}); its log: {root / f'seed-{seed}.log'}")
    figures = json.loads(result.read_text())
    figures["wall_s"] = time.perf_counter() - started
    result.write_text(json.dumps(figures, indent=1))
    print(f"seed {seed} done in {figures['wall_s'] / 60:.1f} min", flush=True)
    return figures


def interval(diffs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t interval."""
    m = statistics.fmean(diffs)
    if len(diffs) < 2:
        return m, math.nan
    return m, T_975.get(len(diffs) - 1, 1.96) * statistics.stdev(diffs) / math.sqrt(len(diffs))


def above_zero(m: float, h: float) -> bool:
    """Whether the interval ``m ± h`` lies wholly above zero (an undefined one, from one seed, does not)."""
    return not math.isnan(h) and m - h > 0


LINEAGE = {"a": ["a"], "b": ["a", "b"], "c": ["a", "c"], "d": ["a", "d"], "e": ["a", "e"], "f": ["a", "c", "f"]}


def training_seconds(results: list[dict[str, Any]]) -> dict[str, float]:
    """Each arm's training cost: its stages' seconds from the base (module docstring), mean over the seeds
    that ran whole (a resumed seed timed only what ran after the cut); empty when none did."""
    whole = [r for r in results if not r.get("resumed")]
    if not whole:
        return {}
    return {arm: statistics.fmean(sum(r["seconds"][st] for st in LINEAGE[arm]) for r in whole) for arm in ARMS}


def default_by_tie_rule(leader: str, paired: Any, cost: dict[str, float]) -> str:
    """The tie rule (module docstring): of the leader and every arm it does not beat on validation with the
    paired interval above zero, the one whose training costs least."""
    contenders = [leader]
    for arm in ARMS:
        if arm != leader:
            m, h = paired(leader, arm, "val")
            if not above_zero(m, h):
                contenders.append(arm)
    pick = min(contenders, key=lambda a: cost[a])
    listed = ", ".join(f"({a}) {cost[a]:.0f} s" for a in sorted(contenders, key=lambda a: cost[a]))
    return f"({pick}) {ARMS[pick]}; contenders by training seconds a seed: {listed}"


def report(results: list[dict[str, Any]]) -> None:
    """The table, the paired differences and the RESULT lines."""
    seeds = [r["seed"] for r in results]
    cells = sorted({k for r in results for k in r["arms"]["a"]["pass1"] if k != "overall"})

    def mean(arm: str, what: str, key: str = "overall", i: int = 0) -> float:
        vals = []
        for r in results:
            v = r["arms"][arm][what][key]
            vals.append(v[i] if isinstance(v, list) else v)
        return statistics.fmean(vals)

    print(f"\n{len(seeds)} seeds ({', '.join(map(str, seeds))}); means over seeds\n")
    head = "| arm | validation pass@1 | eval pass@1 | eval pass@8 | " + " | ".join(f"{c} pass@1" for c in cells) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for arm, name in ARMS.items():
        per_cell = " | ".join(f"{mean(arm, 'pass1', c):.1%}" for c in cells)
        print(
            f"| ({arm}) {name} | {mean(arm, 'val'):.1%} | {mean(arm, 'pass1'):.1%} | {mean(arm, 'pass8'):.1%} | "
            f"{per_cell} |"
        )

    def paired(arm: str, ref: str, what: str) -> tuple[float, float]:
        """``arm`` minus ``ref`` per seed (same seed, same base, same demos-1), in points, with its interval."""
        return interval(
            [100 * (r["arms"][arm][what]["overall"][0] - r["arms"][ref][what]["overall"][0]) for r in results]
        )

    print("\nPaired differences, eval pass@1 (points, mean over seeds, 95% t interval):\n")
    print("| arm | vs (a) | vs (b) | validation vs (b) |")
    print("|---|---|---|---|")
    verdict: dict[str, tuple[float, float]] = {}
    for arm in ARMS:
        row = []
        for ref, what in (("a", "pass1"), ("b", "pass1"), ("b", "val")):
            m, h = paired(arm, ref, what)
            row.append(f"{m:+.1f} ± {h:.1f}")
            if (ref, what) == ("b", "pass1"):
                verdict[arm] = (m, h)
        print(f"| ({arm}) | " + " | ".join(row) + " |")
    best = max(mean(a, "val") for a in ARMS)
    winners = [a for a in ARMS if math.isclose(mean(a, "val"), best, abs_tol=1e-9)]
    names = " and ".join(f"({a}) {ARMS[a]}" for a in winners)
    tie = "a tie: " if len(winners) > 1 else ""
    print(f"\nRESULT winner by validation pass@1: {tie}{names} ({best:.1%})")
    if not tie:  # how far ahead: the paired margin over the runner-up, so a lead inside the noise reads as one
        runner = max((a for a in ARMS if a != winners[0]), key=lambda a: mean(a, "val"))
        m, h = paired(winners[0], runner, "val")
        apart = "its interval above zero" if above_zero(m, h) else "its interval covers zero"
        print(f"RESULT winner's margin over the runner-up ({runner}), validation pass@1: {m:+.1f} ± {h:.1f} "
              f"points, {apart}")  # fmt: skip
    cost = training_seconds(results)
    rule = default_by_tie_rule(winners[0], paired, cost) if cost else "none: no seed ran whole, so no costs"
    print(f"RESULT default by the tie rule: {rule}")
    m, h = verdict["e"]
    print(f"RESULT RL (e) vs twice the demonstrations (b), eval pass@1: {m:+.1f} ± {h:.1f} points: "
          f"{'RL earns its place' if above_zero(m, h) else 'RL does not beat (b): not on by default'}")  # fmt: skip
    resumed = [r["seed"] for r in results if r.get("resumed")]
    if resumed:  # their step times and wall time count only what ran after the resume
        print(f"\nseeds resumed after a cut: {', '.join(map(str, resumed))} (the times below leave them out)")
    seconds: dict[str, list[float]] = {}
    for r in results:
        if r.get("resumed"):
            continue
        for k, v in r["seconds"].items():
            seconds.setdefault(k, []).append(v)
    print("seconds per seed (mean): " + ", ".join(f"{k} {statistics.fmean(v):.0f}" for k, v in seconds.items()))
    walls = [r["wall_s"] for r in results if "wall_s" in r and not r.get("resumed")]
    if walls:
        print(f"seed wall time: {min(walls) / 60:.1f}-{max(walls) / 60:.1f} min")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--parallel", type=int, default=2, help="seeds at a time (one thread each when above 1)")
    ap.add_argument("--n", type=int, default=300, help="train instances per bootcamp in each drawn set")
    ap.add_argument("--sft-steps", type=int, default=250, help="steps of every SFT stage")
    ap.add_argument("--rl-steps", type=int, default=40)
    ap.add_argument("--eval-n", type=int, default=40, help="eval-split instances per bootcamp")
    ap.add_argument("--val-n", type=int, default=40, help="validation instances per bootcamp")
    ap.add_argument("--out", type=Path, default=None, help="where seeds keep their workspaces and figures")
    ap.add_argument("--report-only", action="store_true", help="print the table from --out's seed files")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    for name in ("n", "sft_steps", "rl_steps", "eval_n", "val_n", "parallel"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} {getattr(args, name)}: expected a positive number")
    if args.worker is not None:  # one seed, in the folder the parent made for it
        figures = run_seed(args.worker, args)
        (args.out / f"seed-{args.worker}.json").write_text(json.dumps(figures, indent=1))
        return
    root = (args.out or Path(tempfile.mkdtemp(prefix="bench-learning-"))).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        files = [(s, root / f"seed-{s}.json") for s in args.seeds if (root / f"seed-{s}.json").exists()]
        for s, f in files:
            check_budgets(s, f, args)
        found = [json.loads(f.read_text()) for _, f in files]
        if not found:
            raise SystemExit(f"--report-only: no seed-N.json in {root}")
        report(found)
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if args.parallel > 1:
        env["CAMPFLOW_CPU_THREADS"] = "1"  # the seeds share the cores evenly
    started = time.perf_counter()
    print(f"bench_learning in {root}: seeds {args.seeds}, {args.parallel} at a time", flush=True)
    base = build_base(root, env)
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda s: seed_process(s, root, base, args, env), args.seeds))
    report(results)
    print(f"whole benchmark: {(time.perf_counter() - started) / 60:.0f} min")


if __name__ == "__main__":
    main()
