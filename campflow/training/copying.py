"""Copy pretraining: the embedded models' stand-in for the pretraining every real model has had.

A freshly initialized transformer cannot copy. Tool use is mostly copying: the operands of a story
into ``calculate``, the tool's reply into ``submit``, a cell seen by ``look`` into a move. A real base
model learned that long before fine-tuning (induction heads form early in language-model
pretraining); the tiny model built here has not, and SFT's few supervised tokens per episode (a tool
call is ~15 of a ~300-token episode) teach it slowly. Measured with 400 steps (~75 s on one core),
same SFT after it: on calculator level 1 alone (1,000 demonstrations, 800 steps of 16) the SFT loss
is 0.043 at step 100 and 0.005 at step 260, against 0.33 and 0.097 without (both end at 100%
greedy); on calculator and maze levels 1-2 (300 + 300, length-grouped batches of 16) it ends at 0.064
against 0.23, calculator 25% against 7.5%.

The task: a random string of vocabulary tokens (half of them digits), a separator, the same string
again; the loss is on the repeat only. No bootcamp text is involved, so nothing of an eval instance
can leak into the base. Deterministic for a seed (its own generator; weights as the thread count
computes them).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from campflow.threads import ThreadTuner

SEPARATOR = "<|im_start|>"


@dataclass(frozen=True)
class CopyPretraining:
    """What copy pretraining did: steps, the mean loss of its first and of its last steps, seconds."""

    steps: int
    first_loss: float
    final_loss: float
    seconds: float

    def metrics(self) -> dict[str, float | int]:
        """The figures a base checkpoint records."""
        return {
            "copy_steps": self.steps,
            "copy_first_loss": round(self.first_loss, 4),
            "copy_final_loss": round(self.final_loss, 4),
            "copy_seconds": round(self.seconds, 1),
        }


def copy_batch(tokenizer: Any, generator: Any, *, batch: int, length: int, digit_share: float = 0.5) -> Any:
    """One batch of copy sequences (``input_ids`` and ``labels``, the prefix masked) of a random
    length between 4 and ``length`` tokens, drawn with ``generator``."""
    import torch

    excluded = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    pool = torch.tensor([i for i in range(len(tokenizer)) if i not in excluded])
    digits = torch.tensor(tokenizer.convert_tokens_to_ids([str(d) for d in range(10)]))
    n = int(torch.randint(4, length + 1, (1,), generator=generator))
    words = pool[torch.randint(len(pool), (batch, n), generator=generator)]
    numbers = digits[torch.randint(10, (batch, n), generator=generator)]
    sequence = torch.where(torch.rand(batch, n, generator=generator) < digit_share, numbers, words)
    separator = torch.full((batch, 1), tokenizer.convert_tokens_to_ids(SEPARATOR))
    ids = torch.cat([sequence, separator, sequence], dim=1)
    labels = ids.clone()
    labels[:, : n + 1] = -100
    return {"input_ids": ids, "labels": labels}


def pretrain_copy(
    model: Any,
    tokenizer: Any,
    *,
    steps: int,
    batch: int,
    length: int,
    learning_rate: float,
    seed: int,
    tuner: ThreadTuner | None = None,
) -> CopyPretraining:
    """Train ``model`` (a causal LM, in place) for ``steps`` steps on copy sequences of ``tokenizer``'s
    vocabulary: AdamW at ``learning_rate``, 20 warmup steps, then constant. On a CPU ``tuner`` picks
    torch's thread count per step (as in SFT: one thread beside other work)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    batches = (copy_batch(tokenizer, generator, batch=batch, length=length) for _ in range(steps))
    first, final, seconds = train_steps(model, batches, learning_rate=learning_rate, tuner=tuner)
    return CopyPretraining(steps, first, final, seconds)


def train_steps(
    model: Any, batches: Iterable[dict[str, Any]], *, learning_rate: float, tuner: ThreadTuner | None = None
) -> tuple[float, float, float]:
    """One optimizer step of ``model`` (in place) per batch of ``batches``: AdamW at ``learning_rate``
    after 20 warmup steps, each step under ``tuner``'s thread count on a CPU. Returns the mean loss of
    the first and of the last steps (batches vary: a mean, not one step's loss) and the seconds taken."""
    import time

    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 20))
    model.train()
    losses: list[float] = []
    started = time.perf_counter()
    for inputs in batches:
        with tuner.unit(inputs["input_ids"].numel()) if tuner is not None else nullcontext():
            loss = model(**inputs).loss
            loss.backward()
            optimizer.step()
            warmup.step()
            optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    window = max(1, min(20, len(losses) // 4))
    return sum(losses[:window]) / window, sum(losses[-window:]) / window, time.perf_counter() - started
