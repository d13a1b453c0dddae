"""LoRA adapters through PEFT: what trains, what is saved, how it is evaluated, merged and traced."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from campflow.config import LoRASettings, SFTSettings, TinyModelConfig, load_config
from tests import fixed_chats
from tests.conftest import run_cli

pytestmark = pytest.mark.numeric  # trains an adapter and compares what it computed

LORA = LoRASettings(r=4, alpha=8, dropout=0.0)
PROMPT = fixed_chats.conversations(1, seed=7)[0][:2]


def _reply(path: Path | str, max_new_tokens: int = 24) -> str:
    from campflow.agents.local import LocalPolicy

    async def go() -> str:
        policy = LocalPolicy(path, max_new_tokens=max_new_tokens)
        reply = await policy.respond(PROMPT, fixed_chats.TOOLS, None)
        await policy.aclose()
        return reply.content

    return asyncio.run(go())


def _greedy_in_memory(model, tokenizer) -> str:  # noqa: ANN001
    """The greedy reply to PROMPT of a model in memory (as the local policy renders and decodes it)."""
    import torch

    ids = tokenizer.apply_chat_template(
        PROMPT, tools=fixed_chats.TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        out = model.generate(
            input_ids=torch.tensor([ids], device=model.device),
            max_new_tokens=24,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    model.train(was_training)
    new = []
    for token in out[0][len(ids) :].tolist():
        if token in (tokenizer.eos_token_id, tokenizer.pad_token_id):
            break
        new.append(token)
    return tokenizer.decode(new, skip_special_tokens=True)


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A tiny base model on the fixed chats and a LoRA adapter trained on them (80 steps), with the trained
    model's greedy reply captured in memory when training ended."""
    import pytest as _pytest

    from campflow.storage.store import Store
    from campflow.training import checkpoints, sft, tinymodel

    ws = tmp_path_factory.mktemp("lora")
    store = Store(ws / "campflow.duckdb")
    tinymodel.build_tiny_model(
        ws / "base", TinyModelConfig(**fixed_chats.TINY), ["fixed"], texts=fixed_chats.corpus(tinymodel.chat_template())
    )
    base = checkpoints.register(store, "base-fixed", "base", ws / "base")
    dataset = fixed_chats.save_sft_dataset(store, ws / "ds")
    captured: dict[str, str] = {}
    original = sft.progress_callback

    def capturing(key: str, description: str):  # noqa: ANN202
        inner = original(key, description)
        parent_end = inner.on_train_end

        def on_train_end(args, state, control, model=None, processing_class=None, **kwargs):  # noqa: ANN001
            captured["reply"] = _greedy_in_memory(model, processing_class)
            captured["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
            return parent_end(args, state, control, **kwargs)

        inner.on_train_end = on_train_end
        return inner

    with _pytest.MonkeyPatch.context() as mp:
        mp.setattr(sft, "progress_callback", capturing)
        result = sft.train_sft(
            store, ws, base.model_id, dataset, SFTSettings(max_steps=80, batch_size=4, learning_rate=0.01, lora=LORA)
        )
    return ws, store, base, result, captured


def _expected_adapter_parameters(base_path: Path, r: int) -> int:
    """r x (in + out) for every linear layer but the output head: what LoRA on all-linear adds."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_path)
    return sum(
        r * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and not name.endswith("lm_head")
    )


def test_lora_trains_only_the_adapter_weights_and_the_loss_falls(adapter) -> None:
    from safetensors import safe_open

    _, _, base, result, captured = adapter
    expected = _expected_adapter_parameters(base.path, LORA.r)
    assert expected > 0
    assert result.metrics["adapter"]["trainable_parameters"] == expected == captured["trainable"]
    assert result.metrics["adapter"]["total_parameters"] > expected
    with safe_open(str(result.checkpoint.path / "adapter_model.safetensors"), "pt") as f:
        saved = {k: f.get_tensor(k).numel() for k in f.keys()}
    assert all("lora_" in k for k in saved) and sum(saved.values()) == expected
    assert not (result.checkpoint.path / "model.safetensors").exists(), "an adapter checkpoint holds no base weights"
    curve = result.metrics["loss_curve"]
    assert curve[-1][1] < curve[0][1] - 0.2


def test_the_base_weights_under_the_adapter_are_unchanged(adapter) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from campflow.agents.local import load_causal_lm

    _, _, base, result, _ = adapter
    original = AutoModelForCausalLM.from_pretrained(base.path).state_dict()
    loaded = load_causal_lm(result.checkpoint.path, torch.float32).get_base_model().state_dict()
    for name, tensor in original.items():
        under = loaded.get(name) if name in loaded else loaded[name.replace(".weight", ".base_layer.weight")]
        assert torch.equal(tensor, under), name


def test_the_saved_adapter_reloads_to_the_trained_models_greedy_output(adapter) -> None:
    _, _, base, result, captured = adapter
    reloaded = _reply(result.checkpoint.path)
    assert reloaded == captured["reply"]
    assert "<tool_call>" in reloaded and reloaded != _reply(base.path), "the adapter changed what the model says"


def test_lineage_shows_the_adapters_base(adapter) -> None:
    _, store, base, result, _ = adapter
    row = store.query(
        "SELECT kind, parent_model_id, json_extract_string(metrics, '$.adapter.base_model_id') AS b "
        "FROM checkpoints WHERE model_id = ?",
        [result.checkpoint.model_id],
    )[0]
    assert (row["kind"], row["parent_model_id"], row["b"]) == ("sft", base.model_id, base.model_id)
    ancestors = {
        r["ancestor_id"]
        for r in store.query(
            "SELECT ancestor_id FROM checkpoint_lineage WHERE model_id = ?", [result.checkpoint.model_id]
        )
    }
    assert base.model_id in ancestors
    meta = json.loads((result.checkpoint.path / "adapter_config.json").read_text())
    assert Path(meta["base_model_name_or_path"]) == Path(base.path).resolve()


def test_export_merge_writes_a_model_folder_plain_transformers_loads_with_the_same_output(adapter, tmp_path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ws, _, _, result, captured = adapter
    out = tmp_path / "merged"
    done = run_cli(
        "export",
        "--merge",
        result.checkpoint.model_id,
        "--out",
        str(out),
        "--db",
        str(ws / "campflow.duckdb"),
        env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    assert done.returncode == 0, done.stderr
    assert (out / "model.safetensors").exists() and not (out / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert _greedy_in_memory(model, AutoTokenizer.from_pretrained(out)) == captured["reply"]
    again = run_cli(
        "export",
        "--merge",
        "base-fixed",
        "--out",
        str(tmp_path / "no"),
        "--db",
        str(ws / "campflow.duckdb"),
        env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    assert again.returncode != 0 and "holds no adapter" in again.stderr and "Traceback" not in again.stderr
    assert not (tmp_path / "no").exists()


def test_rl_with_lora_continues_the_sft_adapter_on_the_same_base(adapter) -> None:
    from campflow.training.rl import train_rl

    ws, store, base, result, _ = adapter
    rl_cfg = load_config(None, {}, env={}).training.rl.model_copy(
        update={
            "max_steps": 1,
            "num_generations": 2,
            "prompts_per_step": 1,
            "instances_per_bootcamp": 1,
            "max_completion_length": 16,
            "lora": LORA,
        }
    )
    rl = train_rl(store, ws, result.checkpoint.model_id, ["calculator"], rl_cfg, [1])
    assert (rl.checkpoint.path / "adapter_config.json").exists()
    assert rl.metrics["adapter"]["base_model_id"] == base.model_id
    assert rl.metrics["adapter"]["trainable_parameters"] == result.metrics["adapter"]["trainable_parameters"]
    ancestors = [
        r["ancestor_id"]
        for r in store.query(
            "SELECT ancestor_id FROM checkpoint_lineage WHERE model_id = ? ORDER BY depth", [rl.checkpoint.model_id]
        )
    ]
    assert ancestors == [rl.checkpoint.model_id, result.checkpoint.model_id, base.model_id]


def test_full_fine_tuning_from_an_adapter_checkpoint_trains_the_merged_model(adapter) -> None:
    from campflow.training.sft import train_sft

    ws, store, _, result, _ = adapter
    full = train_sft(store, ws, result.checkpoint.model_id, "sft-fixed", SFTSettings(max_steps=1, batch_size=2))
    assert (full.checkpoint.path / "model.safetensors").exists() and "adapter" not in full.metrics
    assert not (full.checkpoint.path / "adapter_config.json").exists()
