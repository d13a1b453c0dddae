"""Torch threads on a small CPU: SFT steps and batched generation with 1 and 2 intra-op threads, alone
and beside a competing process.

The embedded model is tiny, so its matmuls are small and torch's intra-op threads spend much of a
step waiting for each other; when another process holds a core, a thread that spins for its partner
loses its time slice and a step can take many times longer. This measures what campflow should set
(``hardware.cpu_threads``): each cell is the mean seconds of one SFT step (forward, backward, AdamW
on a batch of the bootcamps' demonstrations) and of one generation batch (32 prompts, 32 new tokens),
for threads in {1, 2, ...cores, auto (the tuner)} x competitor in {none, spin (one busy Python process), torch (a
process multiplying matrices on every core)}. The competitor runs in its own process group and is
killed after each cell; both sides of every ratio are measured in this one run.

Run: python benchmarks/bench_threads.py [--steps 60] [--gen-batches 30] [--batch 8]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# each competitor stops by itself once this benchmark is gone (its parent changes)
COMPETITORS = {
    "none": None,
    "spin": "while os.getppid() == PARENT:\n    for _ in range(200_000): pass",
    "torch": (
        "import torch\ntorch.set_num_threads(os.cpu_count() or 1)\na = torch.randn(256, 256)\n"
        "while os.getppid() == PARENT: a = torch.tanh(a @ a)"
    ),
}


def competitor(kind: str) -> subprocess.Popen | None:
    """Start the competing process ``kind`` (None for none)."""
    code = COMPETITORS[kind]
    if code is None:
        return None
    prelude = f"import os\nPARENT = {os.getpid()}\n"
    proc = subprocess.Popen([sys.executable, "-c", prelude + code], start_new_session=True)
    time.sleep(1.0)  # let it reach its loop (torch's import takes a moment)
    return proc


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60, help="timed SFT steps per cell")
    ap.add_argument("--gen-batches", type=int, default=30, help="timed generation batches per cell")
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally that stops a competitor

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from campflow.config import load_config
    from campflow.storage.workspace import Workspace
    from campflow.threads import ThreadTuner
    from campflow.training.base import ensure_base
    from campflow.training.tinymodel import corpus

    ws = Path(tempfile.mkdtemp())
    cfg = load_config(None, {"workspace.path": str(ws)}, env={})
    base = ensure_base(Workspace.from_config(cfg).store, cfg)
    tokenizer = AutoTokenizer.from_pretrained(base.path, padding_side="left")
    texts = list(corpus(["calculator", "maze"], 16, seed=1))
    enc = [tokenizer(t)["input_ids"][:320] for t in texts]
    width = max(len(e) for e in enc)
    pad = tokenizer.pad_token_id
    rows = torch.tensor([[pad] * (width - len(e)) + e for e in enc])
    mask = (rows != pad).long()
    half = [e[: len(e) // 2] for e in enc[:32]]
    pw = max(len(e) for e in half)
    prompts = (
        torch.tensor([[pad] * (pw - len(e)) + e for e in half]),
        torch.tensor([[0] * (pw - len(e)) + [1] * len(e) for e in half]),
    )
    cores = os.cpu_count() or 1
    threads: list[int | str] = [*sorted({1, 2, cores}), "auto"]

    def sft_step(model, opt, i: int) -> None:  # noqa: ANN001
        sl = slice((i * args.batch) % (len(rows) - args.batch), None)
        ids, m = rows[sl][: args.batch], mask[sl][: args.batch]
        out = model(input_ids=ids, attention_mask=m, labels=ids.masked_fill(m == 0, -100))
        out.loss.backward()
        opt.step()
        opt.zero_grad()

    def generate(model) -> None:  # noqa: ANN001
        with torch.inference_mode():
            model.generate(
                input_ids=prompts[0],
                attention_mask=prompts[1],
                max_new_tokens=32,
                min_new_tokens=32,
                do_sample=False,
                pad_token_id=pad,
            )

    results: dict[tuple[str, int | str], tuple[float, float]] = {}
    print(f"cores {cores}; SFT batch {args.batch} x {width} tokens; generation 32 x {prompts[0].shape[1]} + 32")
    print(f"{'competitor':>10} {'threads':>7} {'sft s/step':>11} {'gen s/batch':>12}")
    for kind in COMPETITORS:
        for n in threads:
            tuner = ThreadTuner(None if n == "auto" else int(n))
            gen_tuner = ThreadTuner(None if n == "auto" else int(n))
            model = AutoModelForCausalLM.from_pretrained(base.path, dtype=torch.float32)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            proc = competitor(kind)
            try:
                with tuner.unit():
                    sft_step(model, opt, 0)  # warm-up
                sft = []
                for i in range(args.steps):
                    t = time.perf_counter()
                    with tuner.unit():
                        sft_step(model, opt, i + 1)
                    sft.append(time.perf_counter() - t)
                model.eval()
                with gen_tuner.unit():
                    generate(model)
                gen = []
                for _ in range(args.gen_batches):
                    t = time.perf_counter()
                    with gen_tuner.unit():
                        generate(model)
                    gen.append(time.perf_counter() - t)
            finally:
                stop(proc)
            results[kind, n] = statistics.mean(sft), statistics.mean(gen)
            print(
                f"{kind:>10} {n:>7} {results[kind, n][0]:>11.3f} {results[kind, n][1]:>12.3f}"
                f"  (ended on {tuner.current} / {gen_tuner.current})",
                flush=True,
            )
    for kind in COMPETITORS:
        for n in threads:
            if n == 1:
                continue
            s1, g1 = results[kind, 1]
            sn, gn = results[kind, n]
            print(f"RATIO {kind}: 1 thread over {n} threads, time: sft {s1 / sn:.2f}, generation {g1 / gn:.2f}")
        best_s = min(results[kind, n][0] for n in threads if n != "auto")
        best_g = min(results[kind, n][1] for n in threads if n != "auto")
        auto_s, auto_g = results[kind, "auto"]
        print(
            f"RATIO {kind}: auto over the best fixed count, time: sft {auto_s / best_s:.2f}, generation {auto_g / best_g:.2f}"
        )
    for n in threads:
        s0, g0 = results["none", n]
        for kind in ("spin", "torch"):
            s, g = results[kind, n]
            print(f"RATIO slowdown beside {kind} at {n} thread(s): sft {s / s0:.2f}x, generation {g / g0:.2f}x")


if __name__ == "__main__":
    main()
