"""The same evaluation of a saved checkpoint in-process and through a launched server: episodes/s of each.

    python benchmarks/bench_serving.py [--server vllm|test] [--n 40]

``vllm`` (the default, needs ``make vllm``) launches PyPI's vLLM from .venv-vllm; ``test`` launches
campflow's own test server (``campflow.testing.serve_model``, the same transformers generation behind
HTTP: it measures the protocol's overhead, not a faster engine). Prints ``RATIO`` = launched / in-process.
The goal with vLLM on a GPU is >= 5x; on a 2-core CPU the tiny model is too small for vLLM to gain.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
COMMANDS = {
    "vllm": (
        f"{VLLM_PYTHON} -m vllm.entrypoints.openai.api_server --model {{path}} --port {{port}} "
        "--served-model-name {name} --dtype float32 --gpu-memory-utilization 0.1 "
        "--enable-auto-tool-choice --tool-call-parser hermes"
    ),
    "test": "{python} -m campflow.testing.serve_model {path} --port {port} --served-model-name {name}",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=sorted(COMMANDS), default="vllm")
    parser.add_argument("--n", type=int, default=40, help="eval instances per bootcamp")
    parser.add_argument("--checkpoint", type=Path, default=None, help="a model folder (default: a tiny one)")
    args = parser.parse_args()
    if args.server == "vllm" and not (REPO / ".venv-vllm" / ".installed").exists():
        print("no .venv-vllm: run `make vllm` first, or pass --server test")
        sys.exit(2)
    import os

    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    from campflow.config import TinyModelConfig, load_config
    from campflow.flows.evaluate import evaluate
    from campflow.storage.workspace import Workspace
    from campflow.training.tinymodel import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = Path(tmp) / "tiny"
            build_tiny_model(
                checkpoint,
                TinyModelConfig(
                    vocab_size=1000,
                    hidden_size=64,
                    intermediate_size=128,
                    layers=2,
                    heads=2,
                    kv_heads=1,
                    corpus_per_level=2,
                ),
                ["calculator", "maze"],
            )
        rates, outcomes, passed = {}, {}, {}
        for kind in ("inprocess", "launch"):
            cfg = load_config(
                None,
                {
                    "workspace.path": f"{tmp}/{kind}",
                    "policy.kind": "local",
                    "policy.model": str(checkpoint),
                    "policy.max_tokens": 32,
                    "eval.bootcamps": ["calculator", "maze"],
                    "eval.n": args.n,
                    "eval.levels": [1],
                    "rollout.concurrency": 32,
                    "rollout.workers": 1,
                    "rollout.max_turns": 4,
                    "serving.kind": kind,
                    "serving.command": COMMANDS[args.server],
                    "serving.startup_timeout": 900,
                },
                env={},
            )
            started = time.perf_counter()
            summary = evaluate(cfg, run_id=f"bench-{kind}")
            wall = time.perf_counter() - started  # includes starting (and stopping) the server
            t = summary.throughput
            rates[kind] = t["episodes_per_s"]
            store = Workspace.from_config(cfg).store
            rows = store.query(f"SELECT instance_id, success FROM episodes WHERE run_id = 'bench-{kind}'")
            outcomes[kind] = {r["instance_id"]: bool(r["success"]) for r in rows}
            passed[kind] = summary.pass_rates
            print(
                f"{kind:9s} {summary.ran} episodes: {t['episodes_per_s']:.2f} episodes/s during rollouts, "
                f"{t['tokens_per_s']:.0f} tokens/s, {t['latency_per_turn_s'] * 1000:.0f} ms/turn; "
                f"{wall:.1f}s with startup; terminations {summary.terminations}",
                flush=True,
            )
        both = outcomes["inprocess"].keys() & outcomes["launch"].keys()
        same = sum(outcomes["inprocess"][i] == outcomes["launch"][i] for i in both)
        for kind in passed:
            print(f"pass rates {kind:9s} " + ", ".join(f"{b} {r:.1%}" for b, r in sorted(passed[kind].items())))
        print(f"same outcome (solved or not) on {same}/{len(both)} instances, greedy decoding on both sides")
        print(f"RATIO serving({args.server}) / inprocess episodes/s = {rates['launch'] / rates['inprocess']:.2f}")


if __name__ == "__main__":
    main()
