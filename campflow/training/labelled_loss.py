"""SFT's loss computed only where it is defined: length-sorted sub-batches, logits at labelled positions.

With an assistant-only loss on tool-calling episodes, most of a padded batch is wasted work. In the
embedded default's SFT data (calculator episodes ~150 tokens, maze ~290, up to ~800, batches of 8), a
random batch is ~40% padding, and only ~13% of its positions carry a label, yet a causal LM computes
every layer at every position and the vocabulary projection (the largest matmul of a small model) at
every one too. :func:`labelled_loss` computes the same objective with less of that:

- the batch is split into sub-batches of similar length (sorted, cut where that saves more padded
  positions than a sub-batch's fixed cost), each trimmed to its own longest row, so padding is small;
- the model's decoder runs on each, and the output projection only on the positions whose next token
  is labelled;
- the loss is the summed cross-entropy over the labelled tokens divided by ``num_items_in_batch``,
  the normalization transformers' own causal-LM loss uses, so the gradient is that of the whole batch.

The batches, their order and their contents are the trainer's own (random, as the config says); only
the arithmetic is arranged differently. :class:`LabelledLoss` checks that once, on the first batch,
against the model's own loss, and keeps the model's own loss for the rest of the run if the two
differ (an architecture that scales or caps its logits), or where it does not apply: several
processes or GPUs (DDP expects one forward per backward), vision-language inputs, a model without a
separate decoder and output projection. ``benchmarks/bench_sft_throughput.py`` measures both.
"""

from __future__ import annotations

from typing import Any

# A sub-batch's fixed cost (kernel launches, Python), in token positions: the split is made only where it
# saves more padded positions than this.
SUB_BATCH_COST = 256
KEYS = frozenset({"input_ids", "attention_mask", "labels"})
AGREEMENT = 1e-4  # relative difference from the model's own loss at which the check fails


def sub_batches(lengths: list[int], cost: int = SUB_BATCH_COST) -> list[list[int]]:
    """Row indices grouped into sub-batches of similar length: sorted by length, cut where the padded
    positions saved exceed ``cost`` per extra sub-batch (exact dynamic programme over the cut points)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    sizes = [lengths[i] for i in order]
    n = len(sizes)
    best = [0.0] + [float("inf")] * n  # best[j]: cheapest split of the j shortest rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):  # rows i..j-1 form the last sub-batch, padded to sizes[j-1]
            total = best[i] + (j - i) * sizes[j - 1] + cost
            if total < best[j]:
                best[j], cut[j] = total, i
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j] : j])
        j = cut[j]
    return groups[::-1]


def applicable(model: Any, inputs: dict[str, Any], processes: int) -> bool:
    """Whether :func:`labelled_loss` can stand in for the model's own loss on ``inputs``."""
    if processes != 1 or not KEYS <= set(inputs) or set(inputs) - KEYS - {"use_cache"}:
        return False
    decoder = getattr(model, "get_decoder", None)
    head = getattr(model, "get_output_embeddings", None)
    return callable(decoder) and callable(head) and decoder() is not None and head() is not None


def labelled_loss(model: Any, inputs: dict[str, Any], num_items_in_batch: Any) -> tuple[Any, int]:
    """The causal-LM loss of ``inputs`` (summed over labelled next tokens / ``num_items_in_batch``, or
    their mean when it is None) and the token positions computed for it."""
    import torch

    ids, mask, labels = inputs["input_ids"], inputs["attention_mask"], inputs["labels"]
    lengths = mask.sum(dim=1)
    right_padded = bool((mask[:, :-1] >= mask[:, 1:]).all())
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    total = None
    positions = 0
    for rows in sub_batches([int(n) for n in lengths]):
        index = torch.tensor(rows, device=ids.device)
        width = int(lengths[index].max()) if right_padded else ids.shape[1]
        targets = labels[index, 1:width]
        keep = targets != -100
        if not bool(keep.any()):
            continue  # nothing to learn from these rows: not computed at all
        hidden = decoder(
            input_ids=ids[index, :width], attention_mask=mask[index, :width], use_cache=False
        ).last_hidden_state
        positions += len(rows) * width
        logits = head(hidden[:, :-1][keep])
        part = torch.nn.functional.cross_entropy(logits.float(), targets[keep], reduction="sum")
        total = part if total is None else total + part
    if total is None:  # no labelled token in the batch: a zero loss that still has a graph
        total = head.weight.sum() * 0.0
    if num_items_in_batch is None:
        count = int((labels[:, 1:] != -100).sum())
        return total / max(count, 1), positions
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch, positions


class LabelledLoss:
    """:func:`labelled_loss` for one training run, checked once against the model's own loss.

    ``own_loss(inputs)`` computes the model's loss as the trainer would. The first applicable batch is
    computed both ways without gradients; if they differ by more than :data:`AGREEMENT` (relative), the
    run keeps the model's own loss. ``used`` says which it was (None until a batch was seen).
    """

    def __init__(self) -> None:
        self.used: bool | None = None
        self.checked_difference: float | None = None

    def __call__(self, model: Any, inputs: dict[str, Any], num_items_in_batch: Any, processes: int, own_loss: Any):
        """``(loss, positions)`` through :func:`labelled_loss`, or None where the model's own loss applies."""
        import torch

        if self.used is False or not model.training or not applicable(model, inputs, processes):
            return None
        if self.used is None:
            with torch.no_grad():
                mine, _ = labelled_loss(model, inputs, num_items_in_batch)
                theirs = own_loss(inputs)
            difference = abs(float(mine) - float(theirs)) / max(abs(float(theirs)), 1e-8)
            self.checked_difference = difference
            self.used = difference <= AGREEMENT
            if not self.used:
                return None
        return labelled_loss(model, inputs, num_items_in_batch)
