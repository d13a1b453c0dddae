"""Can the tiny VLM read where things stand in a frame? Steps to learn it, by initial position table.

The embedded VLM's vision tower adds a position vector to each patch's pixels. transformers draws that
table from N(0, 0.02) while a patch's pixels embed at ~1, so a frame's places are ~50x fainter than its
contents; campflow builds the tiny VLM with a 2D sine-cosine table at the patches' scale instead
(``training.tiny_vl.vision_positions``). This benchmark trains the same tiny VLM from each initial table,
side by side, on one reading task: a gridworld level-1 frame (train-split instances, the agent walked to
random cells by the bootcamp's own `move`) in, ``you (x, y) goal (x, y)`` out, loss on the answer; every ``--every`` steps it
scores exact answers on frames of other instances (teacher-forced argmax over the whole answer, which is
what greedy decoding writes). No copy or reading pretraining, so only the table differs.

Run: python benchmarks/bench_reading.py [--steps 1000] [--every 250] [--batch 8] [--lr 1e-3] [--threads N]
(~8 minutes on 2 idle cores)
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DIRECTIONS = ("north", "south", "east", "west")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=250, help="steps between two scorings")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--train-instances", type=int, default=500)
    ap.add_argument("--test-instances", type=int, default=100)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = ap.parse_args()
    for flag in ("steps", "every", "batch", "train_instances", "test_instances"):
        if getattr(args, flag) < 1:
            raise SystemExit(f"--{flag.replace('_', '-')} = {getattr(args, flag)}: expected a positive number")
    if args.lr <= 0:
        raise SystemExit(f"--lr = {args.lr}: expected a positive learning rate")

    import warnings

    warnings.filterwarnings("ignore")
    import torch
    from transformers import Qwen3VLForConditionalGeneration
    from transformers.utils import logging as hf_logging
    from trl.chat_template_utils import get_training_chat_template

    from campflow.agents.chat import template_messages
    from campflow.agents.vision import image_urls, load_processor, pil_image
    from campflow.bootcamps import registry
    from campflow.bootcamps.base import Action
    from campflow.bootcamps.rendering import image_parts
    from campflow.bootcamps.splits import train_instances
    from campflow.config import TinyVisionModelConfig
    from campflow.errors import ToolError
    from campflow.training.copying import train_steps
    from campflow.training.tinyvlm import build_tiny_vlm
    from campflow.training.vision_sft import VisionToolsCollator

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    gridworld = registry.make("gridworld")
    instances = train_instances(
        gridworld, args.train_instances + args.test_instances, seed=7, levels=[1], observation="image"
    )

    def rows(chosen, rng: random.Random, per_instance: int) -> list[dict]:  # noqa: ANN001
        """Frames of ``chosen`` after random walks through the bootcamp's own tools, with their answers."""
        out = []
        for instance in chosen:
            goal = instance.data["goal"]
            for _ in range(per_instance):
                state = gridworld.new_state(instance)
                for _ in range(12):
                    try:
                        gridworld.apply(instance, state, Action("move", {"direction": rng.choice(DIRECTIONS)}))
                    except ToolError:
                        pass  # a wall: the walk stays where it is
                frame = gridworld.apply(instance, state, Action("look", {})).image
                user = {"role": "user", "content": image_parts("Where are you and the goal?", frame)}
                answer = f"you ({state.x}, {state.y}) goal ({goal[0]}, {goal[1]})"
                out.append(
                    {
                        "messages": template_messages([user, {"role": "assistant", "content": answer}], images=True),
                        "images": [pil_image(u) for u in image_urls([user])],
                    }
                )
        return out

    rng = random.Random(0)
    train = rows(instances[: args.train_instances], rng, 3)
    test = rows(instances[args.train_instances :], rng, 1)
    root = Path(tempfile.mkdtemp(prefix="bench-reading-"))
    curves: dict[str, list[tuple[int, float, float]]] = {}
    seconds: dict[str, float] = {}
    for table in ("normal", "sincos"):
        cfg = TinyVisionModelConfig(vision_positions=table, pretrain={"steps": 0})
        built = build_tiny_vlm(root / table, cfg, ["gridworld"])
        model = Qwen3VLForConditionalGeneration.from_pretrained(built.path)
        processor = load_processor(built.path)
        collate = VisionToolsCollator(processor, get_training_chat_template(processor) or processor.chat_template)

        draw, done, started = random.Random(1), 0, time.perf_counter()
        curves[table] = []
        while done < args.steps:
            chunk = min(args.every, args.steps - done)
            batches = (collate([train[draw.randrange(len(train))] for _ in range(args.batch)]) for _ in range(chunk))
            _, loss, _ = train_steps(model, batches, learning_rate=args.lr)
            done += chunk
            model.eval()
            curves[table].append((done, loss, exact(model, collate, test)))
            print(
                f"{table:6s} step {done:5d}  loss {loss:.3f}  held-out frames read exactly {curves[table][-1][2]:.1%}",
                flush=True,
            )
        seconds[table] = time.perf_counter() - started

    print(f"\ngridworld level 1, {len(train)} training frames, {len(test)} held-out frames of other instances")
    for table, curve in curves.items():
        reached = next((step for step, _, acc in curve if acc >= 0.9), None)
        print(
            f"{table:6s} final {curve[-1][2]:.1%}; 90% reached at step {reached or f'> {args.steps}'}; "
            f"{seconds[table]:.0f}s"
        )
    final = {t: c[-1][2] for t, c in curves.items()}
    print(
        f"RATIO reading accuracy after {args.steps} steps, sincos / normal table: {final['sincos']:.1%} / {final['normal']:.1%}"
    )


def exact(model, collate, chosen: list[dict]) -> float:  # noqa: ANN001
    """The share of ``chosen`` rows whose whole answer is the model's argmax at every answer token."""
    import torch

    right = 0
    with torch.no_grad():
        for i in range(0, len(chosen), 16):
            batch = collate(chosen[i : i + 16])
            labels = batch.pop("labels")[:, 1:]
            guess = model(**batch).logits[:, :-1].argmax(-1)
            scored = labels != -100
            right += sum(bool((guess[r][scored[r]] == labels[r][scored[r]]).all()) for r in range(len(labels)))
    return right / len(chosen)


if __name__ == "__main__":
    main()
