"""Soak: N improvement cycles of a miniature configuration, killed at seeded random moments, resumed until done.

Each cycle runs as ``campflow improve --cycle-id soak-<i>`` in its own process group. A seeded plan
spreads K kills over the cycles; each kill waits for its target phase (evaluation, SFT, RL, the report,
or the moment right after a step's store write), waits a random fraction of a second more, and sends
SIGKILL or SIGTERM to the whole group, as a node failure or a service manager would. The cycle is then
continued with ``campflow improve --resume`` until it completes. After every kill and at the end it
checks: no episode duplicated (run, instance, sample) and none lost (every completed evaluation holds
the whole eval split), every cycle completed exactly once, every promoted checkpoint loads, lineage is
consistent (every parent is recorded, every candidate descends from its cycle's start), no process of
the run is left, and the workspace lock is free. Per cycle it prints the store's size, the latency of
the ``failure_summary``, ``cycle_outcomes`` and ``pass_rates`` views, and the disk the checkpoints take,
so growth per cycle is a number.

Run: python benchmarks/bench_soak.py [--cycles 10] [--kills 10] [--seed 0] [--workspace DIR]
(a cycle of the miniature configuration takes about a minute on 2 free cores; each kill adds a restart)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("evaluate", "sft", "rl", "report", "store-write")
VIEWS = ("failure_summary", "cycle_outcomes", "pass_rates")
TERM_GRACE_S = 60  # a SIGTERMed run that has not exited by then counts as hung (and is killed)


def miniature(ws: Path, seed: int) -> dict:
    """The loop at its smallest: calculator and maze levels 1-2, a 2-layer model, SFT long enough to save
    (and be killed) mid-run, two RL steps."""
    return {
        "workspace": {"path": str(ws)},
        "policy": {"kind": "local", "max_tokens": 24, "batch_size": 16, "cpu_threads": 1},
        "rollout": {"concurrency": 16, "workers": 1, "shard_size": 4},
        "eval": {"bootcamps": ["calculator", "maze"], "n": 6, "levels": [1, 2]},
        "synthesis": {
            "n_per_cluster": 2,
            "calibration_samples": 1,
            "band_min": 0.0,
            "max_clusters": 2,
            "instances_per_variant": 1,
        },
        "training": {
            "levels": [1, 2],
            "collect_n": 8,
            "cpu_threads": 1,
            "save_steps": 4,
            "tiny": {
                "corpus_per_level": 6,
                "vocab_size": 600,
                "hidden_size": 64,
                "intermediate_size": 128,
                "layers": 2,
                "heads": 2,
                "kv_heads": 1,
                "max_positions": 1024,
                "pretrain": {"steps": 0},
            },
            "sft": {"max_steps": 24, "batch_size": 4, "seed": seed},
            "rl": {
                "max_steps": 2,
                "num_generations": 2,
                "prompts_per_step": 1,
                "instances_per_bootcamp": 2,
                "max_completion_length": 32,
                "max_tool_calling_iterations": 2,
            },
        },
        "improve": {"reports_dir": str(ws / "reports")},
    }


@dataclass
class Kill:
    """One planned fault: in which cycle, at which phase, with which signal, after how long a wait."""

    cycle: int
    target: str
    signal: signal.Signals
    delay_s: float
    landed: str = ""  # the step the cycle was in when the signal went out
    saved_step: int | None = None  # aimed at SFT: the step of the resumable checkpoint saved before the kill
    exited_s: float | None = None  # seconds from the signal to the group's exit


def plan_kills(cycles: int, kills: int, rng: random.Random) -> list[Kill]:
    """``kills`` faults spread over ``cycles`` (seeded), ordered by cycle; every phase is aimed at once
    before any is aimed at twice, and the signals alternate, so a few kills already cover them all."""
    targets = [TARGETS[i % len(TARGETS)] for i in range(kills)]
    rng.shuffle(targets)
    first = rng.choice([signal.SIGKILL, signal.SIGTERM])
    second = signal.SIGTERM if first == signal.SIGKILL else signal.SIGKILL
    out = [
        Kill(rng.randrange(cycles), target, first if i % 2 == 0 else second, round(rng.uniform(0.0, 1.5), 2))
        for i, target in enumerate(targets)
    ]
    order = ("store-write", "evaluate", "sft", "rl", "report")  # a cycle's kills in the order it meets them
    return sorted(out, key=lambda k: (k.cycle, order.index(k.target)))


class Soak:
    """The run: the workspace, its config file and the checks."""

    def __init__(self, ws: Path, seed: int) -> None:
        self.ws = ws
        self.db = ws / "campflow.duckdb"
        self.config = ws.parent / f"{ws.name}.yaml"
        ws.mkdir(parents=True, exist_ok=True)
        self.config.write_text(yaml.safe_dump(miniature(ws, seed)))
        self.logs = ws.parent / f"{ws.name}-logs"
        self.logs.mkdir(exist_ok=True)
        self.runs = 0
        self.groups: set[int] = set()  # process groups of the runs started
        self.sft_resumes: list[str] = []
        self.failures: list[str] = []

    # -- running ------------------------------------------------------------------------------

    def start(self, *args: str) -> subprocess.Popen:
        """``campflow improve --config <miniature> ARGS`` in a process group of its own."""
        self.runs += 1
        exe = Path(sys.executable).parent / "campflow"
        log = open(self.logs / f"run-{self.runs:03d}.log", "w")  # noqa: SIM115 - closed with the process
        env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [str(exe), "improve", "--config", str(self.config), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.groups.add(proc.pid)
        return proc

    def pending_step(self, cycle_id: str) -> str | None:
        """The step cycle ``cycle_id`` is in (its first step not done), or None before it is recorded."""
        from campflow.errors import StoreError
        from campflow.flows.improve import STEPS
        from campflow.storage.query import run_sql

        if not self.db.exists():
            return None
        try:
            rows = run_sql(self.db, f"SELECT status, state FROM cycles WHERE cycle_id = '{cycle_id}'", wait_s=0.5).rows
        except StoreError:
            return None  # a write in progress: look again
        if not rows:
            return None
        if rows[0][0] == "completed":
            return "completed"
        done = json.loads(rows[0][1] or "{}").get("done", [])
        return next((s for s in STEPS if s not in done), "completed")

    def run_cycle(self, index: int, kills: list[Kill]) -> float:
        """Run cycle ``soak-<index>`` to completion through its planned kills; returns wall seconds."""
        cycle_id = f"soak-{index}"
        started = time.monotonic()
        args: tuple[str, ...] = ("--cycle-id", cycle_id)
        queue = list(kills)
        while True:
            proc = self.start(*args)
            kill = queue.pop(0) if queue else None
            if kill is not None:
                self.fire(proc, cycle_id, kill)
                self.check_after_kill(cycle_id, kill)
                if kill.exited_s is None:  # the run ended before the kill's moment came
                    if proc.returncode != 0:
                        self.failures.append(f"{cycle_id}: run {self.runs} exited {proc.returncode} (see {self.logs})")
                    if self.pending_step(cycle_id) == "completed":
                        self.check_sft_resumed(cycle_id, kills)
                        return time.monotonic() - started
                # resume once the cycle is recorded; a kill before that starts it again
                args = ("--resume", "--cycle-id", cycle_id) if self.pending_step(cycle_id) else ("--cycle-id", cycle_id)
                continue
            code = proc.wait()
            if code != 0:
                self.failures.append(f"{cycle_id}: run {self.runs} exited {code} (see {self.logs})")
            else:
                self.check_sft_resumed(cycle_id, kills)
            return time.monotonic() - started

    def fire(self, proc: subprocess.Popen, cycle_id: str, kill: Kill) -> None:
        """Wait for ``kill``'s phase, then signal the whole process group."""
        seen_done = None
        while proc.poll() is None:
            step = self.pending_step(cycle_id)
            phase = {"re-evaluate": "evaluate", "probe-before": "evaluate", "probe-after": "evaluate"}.get(step, step)
            if kill.target == "store-write":  # right after a step's state was written
                if seen_done is not None and step != seen_done:
                    break
                seen_done = step
            elif kill.target == "sft" and step == "sft":  # SFT is killed after it saved a resumable checkpoint
                kill.saved_step = self.saved_sft_step()
                if kill.saved_step:
                    break
            elif phase == kill.target or step in ("completed",) or _past(step, kill.target):
                break
            time.sleep(0.1)
        time.sleep(kill.delay_s)
        kill.landed = self.pending_step(cycle_id) or "before the cycle was recorded"
        if proc.poll() is not None:
            kill.landed = "after the run had exited"
            return
        sent = time.monotonic()
        os.killpg(proc.pid, kill.signal)
        try:
            proc.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            self.failures.append(f"{cycle_id}: run {self.runs} still running {TERM_GRACE_S}s after {kill.signal.name}")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kill.exited_s = round(time.monotonic() - sent, 1)
        _wait_group_gone(proc.pid)

    def saved_sft_step(self) -> int | None:
        """The step of the newest complete resumable checkpoint of an SFT run in progress, if any."""
        steps = [
            int(p.parent.name.split("-")[1])
            for p in (self.ws / "models").glob("sft-*.partial/trainer/checkpoint-*/trainer_state.json")
        ]
        return max(steps) if steps else None

    # -- checks -------------------------------------------------------------------------------

    def check_sft_resumed(self, cycle_id: str, kills: list[Kill]) -> None:
        """A cycle whose SFT was killed after a save trained on from that save, not from step 0."""
        saved = [k.saved_step for k in kills if k.saved_step and k.exited_s is not None and k.landed == "sft"]
        if not saved:
            return
        state = json.loads(self.sql(f"SELECT state FROM cycles WHERE cycle_id = '{cycle_id}'")[0][0])
        resumed = self.sql(
            f"SELECT json_extract(metrics, '$.resumed_from_step') FROM checkpoints WHERE model_id = '{state['sft_model']}'"
        )[0][0]
        if resumed in (None, "null") or int(resumed) < max(saved):
            self.failures.append(f"{cycle_id}: SFT killed after its save at step {max(saved)} resumed from {resumed}")
        else:
            self.sft_resumes.append(
                f"{cycle_id}: SFT killed after its save at step {max(saved)}, resumed from {resumed}"
            )

    def check_after_kill(self, cycle_id: str, kill: Kill) -> None:
        """What must hold after any kill: no process left, the lock free, no duplicated or lost episode."""
        from campflow.storage.lock import current_holder

        left = self.leftover_processes()
        if left:
            self.failures.append(f"{cycle_id}: processes left after {kill.signal.name}: {left}")
            for pid in left:
                os.kill(pid, signal.SIGKILL)
        if current_holder(self.db) is not None:
            self.failures.append(f"{cycle_id}: the workspace lock is held after {kill.signal.name}")
        self.check_episodes(f"after {kill.signal.name} in {kill.landed}")

    def leftover_processes(self) -> list[int]:
        """Processes whose command line names this soak's config (every ``campflow improve`` it started), or
        that belong to the process group of one of them, this process and its ancestors apart."""
        mine = _ancestors()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in mine:
                continue
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                group = os.getpgid(int(entry.name))
            except (OSError, ProcessLookupError):
                continue
            if str(self.config) in cmd or group in self.groups:
                found.append(int(entry.name))
        return found

    def sql(self, query: str) -> list[tuple]:
        from campflow.storage.query import run_sql

        return run_sql(self.db, query, wait_s=30).rows

    def check_episodes(self, when: str) -> None:
        """No (run, instance, sample) twice; every evaluation a cycle recorded as done holds the whole split."""
        if not self.db.exists():
            return
        dupes = self.sql(
            "SELECT count(*) FROM (SELECT run_id, instance_id, sample_index FROM episodes GROUP BY ALL HAVING count(*) > 1)"
        )[0][0]
        if dupes:
            self.failures.append(f"{when}: {dupes} duplicated episode keys")
        split = self.sql("SELECT count(*) FROM instances WHERE split = 'eval'")[0][0]
        for (state,) in self.sql("SELECT state FROM cycles"):
            state = json.loads(state or "{}")
            for step, key in (("evaluate", "eval_before"), ("re-evaluate", "eval_after")):
                if step in state.get("done", []):
                    run = state[key]
                    n = self.sql(f"SELECT count(DISTINCT instance_id) FROM episodes WHERE run_id = '{run}'")[0][0]
                    if n != split:
                        self.failures.append(f"{when}: {run} holds {n} of the {split} eval instances")

    def check_end(self, cycles: int) -> None:
        """Every cycle completed once, promoted checkpoints load, lineage consistent, nothing left running."""
        rows = self.sql("SELECT cycle_id, status FROM cycles ORDER BY cycle_id")
        expected = sorted(f"soak-{i}" for i in range(1, cycles + 1))
        if sorted(r[0] for r in rows) != expected or any(r[1] != "completed" for r in rows):
            self.failures.append(f"cycles recorded: {rows}; expected {expected}, each completed once")
        orphans = self.sql(
            "SELECT model_id FROM checkpoints WHERE parent_model_id IS NOT NULL "
            "AND parent_model_id NOT IN (SELECT model_id FROM checkpoints)"
        )
        if orphans:
            self.failures.append(f"checkpoints whose parent is not recorded: {orphans}")
        for cycle_id, base, candidate in self.sql("SELECT cycle_id, base_model_id, candidate_model_id FROM cycles"):
            chain = {
                r[0] for r in self.sql(f"SELECT ancestor_id FROM checkpoint_lineage WHERE model_id = '{candidate}'")
            }
            if base not in chain:
                self.failures.append(f"{cycle_id}: candidate {candidate} does not descend from its start {base}")
        from transformers import AutoModelForCausalLM

        for model_id, path in self.sql(
            "SELECT model_id, path FROM checkpoints WHERE model_id IN "
            "(SELECT candidate_model_id FROM cycles WHERE promoted)"
        ):
            try:
                AutoModelForCausalLM.from_pretrained(path)
            except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
                self.failures.append(f"promoted {model_id} does not load from {path}: {type(exc).__name__}: {exc}")
        left = self.leftover_processes()
        if left:
            self.failures.append(f"processes left at the end: {left}")
        from campflow.storage.lock import current_holder

        if current_holder(self.db) is not None:
            self.failures.append("the workspace lock is held at the end")
        self.check_episodes("at the end")

    # -- figures ------------------------------------------------------------------------------

    def figures(self) -> dict[str, float]:
        """Store size, view latencies (median of 5, ms) and checkpoint disk, between cycles."""
        import duckdb

        from campflow.training.pruning import folder_bytes

        out = {"store_mb": sum(p.stat().st_size for p in self.ws.glob("campflow.duckdb*") if p.is_file()) / 1e6}
        con = duckdb.connect(str(self.db), read_only=True)
        try:
            for view in VIEWS:
                times = []
                for _ in range(5):
                    t = time.perf_counter()
                    con.execute(f"SELECT * FROM {view}").fetchall()
                    times.append((time.perf_counter() - t) * 1000)
                out[f"{view}_ms"] = statistics.median(times)
        finally:
            con.close()
        out["checkpoints_mb"] = folder_bytes(self.ws / "models") / 1e6
        out["episodes"] = self.sql("SELECT count(*) FROM episodes")[0][0]
        return out


def _past(step: str | None, target: str) -> bool:
    """Whether the cycle has gone past ``target``'s steps (a fast phase missed between two looks)."""
    from campflow.flows.improve import STEPS

    last = {"evaluate": "re-evaluate", "sft": "sft", "rl": "rl", "report": "report"}.get(target)
    if step is None or last is None or step == "completed":
        return step == "completed"
    return STEPS.index(step) > STEPS.index(last)


def _ancestors() -> set[int]:
    """This process and its ancestors (the shell or ``timeout`` that started the benchmark)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _wait_group_gone(pgid: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workspace", type=Path, default=None, help="an empty folder (default: a fresh temporary one)")
    args = ap.parse_args()
    if args.cycles < 1 or args.kills < 0:
        raise SystemExit(f"error: --cycles {args.cycles} --kills {args.kills}: expected at least 1 cycle, 0+ kills")
    ws = args.workspace or Path(tempfile.mkdtemp(prefix="bench-soak-")) / "ws"
    if ws.exists() and any(ws.iterdir()):
        raise SystemExit(f"error: --workspace {ws} is not empty; the soak starts from an empty workspace")

    soak = Soak(ws, args.seed)
    kills = plan_kills(args.cycles, args.kills, random.Random(args.seed))
    rows = []
    began = time.monotonic()
    for i in range(1, args.cycles + 1):
        mine = [k for k in kills if k.cycle == i - 1]
        seconds = soak.run_cycle(i, mine)
        rows.append({"cycle": i, "seconds": seconds, "kills": mine, **soak.figures()})
        print(f"cycle {i} done in {seconds:.0f}s ({len(mine)} kill(s))", flush=True)
    soak.check_end(args.cycles)

    print(
        f"\nsoak: {args.cycles} cycles, {args.kills} kills (seed {args.seed}), {soak.runs} runs, "
        f"{(time.monotonic() - began) / 60:.1f} min; workspace {ws}"
    )
    print("\nkills:")
    for k in kills:
        exited = f"exited {k.exited_s}s later" if k.exited_s is not None else "no signal sent"
        print(f"  cycle {k.cycle + 1}: {k.signal.name:7s} aimed at {k.target:11s} landed in {k.landed:14s} {exited}")
    for line in soak.sft_resumes:
        print(f"  {line}")
    head = (
        f"{'cycle':>5} {'s':>5} {'kills':>5} {'episodes':>8} {'store MB':>8} "
        + " ".join(f"{v + ' ms':>18}" for v in VIEWS)
        + f" {'checkpoints MB':>14}"
    )
    print("\n" + head)
    for r in rows:
        print(
            f"{r['cycle']:>5} {r['seconds']:>5.0f} {len(r['kills']):>5} {r['episodes']:>8} {r['store_mb']:>8.2f} "
            + " ".join(f"{r[v + '_ms']:>18.2f}" for v in VIEWS)
            + f" {r['checkpoints_mb']:>14.2f}"
        )
    if len(rows) > 1:
        span = len(rows) - 1
        growth = {k: (rows[-1][k] - rows[0][k]) / span for k in ("store_mb", "checkpoints_mb", "episodes")}
        print(
            f"\ngrowth per cycle: store {growth['store_mb']:+.2f} MB, checkpoints {growth['checkpoints_mb']:+.2f} MB, "
            f"episodes {growth['episodes']:+.0f}"
        )
    if soak.failures:
        print("\nFAILED checks:")
        for f in soak.failures:
            print(f"  - {f}")
        raise SystemExit(1)
    print(
        "\nevery check held: no duplicated or lost episode, every cycle completed once, promoted checkpoints "
        "load, lineage consistent, no process left, the workspace lock free"
    )


if __name__ == "__main__":
    main()
