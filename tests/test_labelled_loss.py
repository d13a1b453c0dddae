"""SFT's labelled-positions loss is the model's own loss: same value, same gradients, fewer positions."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from campflow.training.labelled_loss import LabelledLoss, applicable, labelled_loss, sub_batches  # noqa: E402


def small_model(seed: int = 0):
    config = transformers.Qwen3Config(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=128, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(config).train()


def padded_batch(lengths: list[int], seed: int = 1) -> dict:
    """Right-padded rows, labels only on a few spans (as an assistant-only loss has them)."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    labels = torch.full((len(lengths), width), -100)
    for r, n in enumerate(lengths):
        ids[r, :n] = torch.randint(1, 97, (n,), generator=g)
        mask[r, :n] = 1
        start = n // 2
        labels[r, start : start + 5] = ids[r, start : start + 5]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def gradients(model) -> list:
    return [p.grad.detach().clone() for p in model.parameters()]


def test_sub_batches_cut_only_where_padding_saved_exceeds_the_cost():
    assert sub_batches([10, 10, 10, 10], cost=256) == [[0, 1, 2, 3]]
    groups = sub_batches([100, 800, 120, 790, 110, 805], cost=256)
    assert sorted(sorted(g) for g in groups) == [[0, 2, 4], [1, 3, 5]]
    assert sorted(i for g in sub_batches([5, 3, 9, 1], cost=0) for i in g) == [0, 1, 2, 3]
    assert sub_batches([], cost=10) == []


@pytest.mark.parametrize("num_items", [None, 17])
def test_same_loss_and_gradients_as_the_models_own(num_items):
    batch = padded_batch([12, 70, 15, 64, 9, 80, 11, 75])
    model = small_model()
    own = model(**batch, use_cache=False, **({"num_items_in_batch": num_items} if num_items else {})).loss
    own.backward()
    expected = gradients(model)
    model.zero_grad()
    mine, positions = labelled_loss(model, batch, num_items)
    mine.backward()
    assert mine.item() == pytest.approx(own.item(), rel=1e-5)
    for a, b in zip(gradients(model), expected, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert positions < batch["input_ids"].numel()  # the short rows were not padded to 80


def test_a_model_whose_logits_differ_keeps_its_own_loss():
    """An architecture that scales its logits (the head is not the whole story) fails the first-batch check."""
    batch = padded_batch([12, 40, 30])
    model = small_model()
    forward = model.forward

    def scaled(*args, **kwargs):
        out = forward(*args, **kwargs)
        out.loss = out.loss * 1.5
        return out

    model.forward = scaled
    check = LabelledLoss()
    assert check(model, batch, None, 1, lambda b: model(**b, use_cache=False).loss) is None
    assert check.used is False and check.checked_difference == pytest.approx(1 / 3, rel=1e-3)
    plain = small_model()
    ok = LabelledLoss()
    loss, _ = ok(plain, batch, None, 1, lambda b: plain(**b, use_cache=False).loss)
    assert ok.used is True and float(loss) == pytest.approx(float(plain(**batch, use_cache=False).loss), rel=1e-5)


def test_not_applied_across_processes_or_to_other_inputs():
    model = small_model()
    batch = padded_batch([5, 6])
    assert applicable(model, batch, 1)
    assert not applicable(model, batch, 2)  # DDP expects one forward per backward
    assert not applicable(model, {**batch, "pixel_values": torch.zeros(1)}, 1)
    assert not applicable(model, {k: v for k, v in batch.items() if k != "labels"}, 1)


def test_rows_without_labels_are_not_computed_and_a_batch_without_any_gives_zero():
    model = small_model()
    batch = padded_batch([10, 150, 12, 160, 14, 170, 16, 120])
    batch["labels"][1::2] = -100  # the long rows teach nothing
    loss, positions = labelled_loss(model, batch, None)
    own = model(**batch, use_cache=False).loss
    assert loss.item() == pytest.approx(own.item(), rel=1e-5)
    assert positions == 4 * 16  # only the short rows' sub-batch, padded to 16
    batch["labels"][:] = -100
    zero, positions = labelled_loss(model, batch, None)
    zero.backward()
    assert zero.item() == 0.0 and positions == 0
