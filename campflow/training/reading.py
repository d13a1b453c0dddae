"""Reading pretraining: the embedded vision-language model learns to read its bootcamps' frames.

A real VLM was pretrained to describe images before anyone fine-tuned it for a task; the tiny Qwen3-VL
built here starts with a random vision tower, and SFT on image-mode episodes gives its image tokens
only an indirect signal (the next move). Measured before this step: the same tiny VLM reached 50% on
gridworld level 1 from the text map and 0% from the image after 400 SFT steps (62 minutes), the
vision tower never learning to read positions (``benchmarks/bench_vision.py``).

So the vision base is pretrained on reading: train-split instances of each vision bootcamp it is
built for, each shown as a frame of its state after a few of the oracle's actions (under the prompt's
caption), and as the answer what that frame shows: the bootcamp's
:meth:`~campflow.bootcamps.base.Bootcamp.caption` (gridworld: where you, the goal and the walls stand),
or else the same task's text-mode view. The loss is on the answer only, through the processor and
TRL's training template, as SFT renders it. Train-split seeds only, so no eval instance is seen;
deterministic for a seed.

Measured on gridworld level 1 (``benchmarks/bench_vision.py``): with a whole text view as the answer
the loss stalled on a plateau (300 steps of 8 placed the agent in none of 30 unseen frames; 1,000 steps
wrote none of 100 unseen maps exactly); the caption, from frames along the oracle's path, is learned in 1,000 steps (~4-5
minutes): the base then writes what 100 of 100 frames of unseen instances show, exactly. Reading alone
does not make the agent: SFT on silent demonstrations still ignored the frames (7.5%); with the
demonstrator saying what each frame shows before it acts (:class:`campflow.agents.oracle.DemonstratorPolicy`)
the same SFT reached 82.5%.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# most oracle actions played before a frame is read: a level-1 gridworld is solved in ~4-8 moves
MAX_WALK = 8

if TYPE_CHECKING:
    from campflow.threads import ThreadTuner


@dataclass(frozen=True)
class ReadingPretraining:
    """What reading pretraining did: steps, examples, the mean loss of its first and last steps, seconds."""

    steps: int
    examples: int
    first_loss: float
    final_loss: float
    seconds: float

    def metrics(self) -> dict[str, float | int]:
        """The figures a base checkpoint records."""
        return {
            "read_steps": self.steps,
            "read_examples": self.examples,
            "read_first_loss": round(self.first_loss, 4),
            "read_final_loss": round(self.final_loss, 4),
            "read_seconds": round(self.seconds, 1),
        }


def reading_rows(
    bootcamps: Sequence[str], per_bootcamp: int, seed: int, levels: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """SFT-style rows (``messages`` with image placeholders, ``images``) that ask what an image-mode frame
    shows, ``per_bootcamp`` train instances of each bootcamp in ``bootcamps`` that has an image and a
    text mode (the others are skipped), cycling over ``levels`` (those a bootcamp has; None or none of
    them: all of its levels).

    Each row's frame is the instance's state after a random number (0 to :data:`MAX_WALK`) of the
    oracle's actions, so where things stand varies from row to row; the answer is the bootcamp's
    :meth:`~campflow.bootcamps.base.Bootcamp.caption` of that state, or else the same task's text-mode
    view after the same actions. The frame is shown under the prompt's caption."""
    from campflow.agents.chat import template_messages
    from campflow.agents.vision import image_urls, pil_image
    from campflow.bootcamps import registry
    from campflow.bootcamps.messages import image_parts
    from campflow.bootcamps.splits import OBSERVATION, level_params, train_instances

    rows = []
    for name in bootcamps:
        bootcamp = registry.make(name)
        if not any(OBSERVATION in type(p).model_fields for p in bootcamp.levels.values()):
            continue
        chosen = [level for level in levels or () if level in bootcamp.levels] or None
        for image_mode in train_instances(bootcamp, per_bootcamp, seed=seed, levels=chosen, observation="image"):
            # the same task (its data) rendered in text mode: what a text-only model reads instead
            text_mode = dataclasses.replace(image_mode, params=level_params(bootcamp, image_mode.level, "text"))
            shown = _user(bootcamp.prompt(image_mode))
            caption = next(p["text"] for p in shown["content"] if p.get("type") == "text")
            frame, view = None, text_view(_user(bootcamp.prompt(text_mode))["content"])
            state, twin = bootcamp.new_state(image_mode), bootcamp.new_state(text_mode)
            for _ in range(random.Random(f"read:{seed}:{image_mode.id}").randint(0, MAX_WALK)):
                action = bootcamp.oracle(image_mode, state)
                if bootcamp.is_final(action.name):
                    break
                seen = bootcamp.apply(image_mode, state, action)
                frame, view = seen.image or frame, text_view(bootcamp.apply(text_mode, twin, action).text)
            if frame is not None:
                shown = {"role": "user", "content": image_parts(caption, frame)}
            answer = bootcamp.caption(image_mode, state) or view
            conversation = [shown, {"role": "assistant", "content": answer}]
            rows.append(
                {
                    "messages": template_messages(conversation, images=True),
                    "images": [pil_image(u) for u in image_urls([shown])],
                }
            )
    return rows


def text_view(text: str) -> str:
    """A text-mode observation without its caption: the view alone."""
    return text.split("\n\n", 1)[1] if "\n\n" in text else text


def _user(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in messages if m["role"] == "user")


def pretrain_reading(
    model: Any,
    processor: Any,
    rows: Sequence[dict[str, Any]],
    *,
    steps: int,
    batch: int,
    learning_rate: float,
    seed: int,
    tuner: ThreadTuner | None = None,
) -> ReadingPretraining:
    """Train ``model`` (a vision-language model, in place) for ``steps`` steps of ``batch`` rows drawn
    from ``rows`` (:func:`reading_rows`): AdamW at ``learning_rate``, 20 warmup steps, then constant; on
    a CPU ``tuner`` picks torch's threads per step."""
    from trl.chat_template_utils import get_training_chat_template

    from campflow.training.copying import train_steps
    from campflow.training.vision_sft import VisionToolsCollator

    template = get_training_chat_template(processor) or processor.chat_template
    collate = VisionToolsCollator(processor, template)
    rng = random.Random(f"read:{seed}")
    batches = (collate([rows[rng.randrange(len(rows))] for _ in range(batch)]) for _ in range(steps))
    first, final, seconds = train_steps(model, batches, learning_rate=learning_rate, tuner=tuner)
    return ReadingPretraining(steps, len(rows), first, final, seconds)


def reading_accuracy(model: Any, processor: Any, rows: Sequence[dict[str, Any]], batch: int = 16) -> float:
    """The share of ``rows`` (:func:`reading_rows`) whose whole answer is ``model``'s most likely next token at
    every answer position given the ones before: exactly what greedy decoding would write."""
    import torch
    from trl.chat_template_utils import get_training_chat_template

    from campflow.training.vision_sft import VisionToolsCollator

    collate = VisionToolsCollator(processor, get_training_chat_template(processor) or processor.chat_template)
    right = 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(rows), batch):
            inputs = collate(list(rows[start : start + batch]))
            labels = inputs.pop("labels")[:, 1:]
            guess = model(**inputs).logits[:, :-1].argmax(-1)
            scored = labels != -100
            right += sum(bool((guess[r][scored[r]] == labels[r][scored[r]]).all()) for r in range(len(labels)))
    return right / len(rows) if rows else 0.0
