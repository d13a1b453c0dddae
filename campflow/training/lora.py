"""Adapters through PEFT: a LoRA adapter trained on a frozen base, saved as an adapter folder, merged on export.

``training.sft.lora`` / ``training.rl.lora`` (null: full fine-tuning) decide what a training step starts from:

- a whole model and no LoRA: every weight trains (float32 master weights, the Trainer's autocast);
- a whole model and LoRA: the base is frozen in the training precision and TRL wraps it with a new
  adapter (``peft_config``); the checkpoint is the adapter folder, whose base is the parent checkpoint;
- an adapter checkpoint and LoRA: that adapter trains further on the same base (its own r, alpha and
  targets); the new checkpoint is an adapter on that base too;
- an adapter checkpoint and no LoRA: the adapter is merged into its base and the merged model trains.

The checkpoint's metrics record ``adapter`` (base model id and path, r, alpha, trainable parameters),
so lineage shows what an adapter needs to run; :func:`merge_adapter` writes a plain model folder.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campflow.agents.local import adapter_base, load_causal_lm
from campflow.config import LoRASettings
from campflow.errors import CampflowError
from campflow.hardware import Hardware
from campflow.training import checkpoints


@dataclass
class StartingModel:
    """What a training step trains: the model, the adapter TRL should add, and the base under the result.

    Attributes:
        model: a transformers model, or a PEFT model continuing an adapter.
        peft_config: a ``peft.LoraConfig`` for the trainer (``peft_config=``), or None.
        base_path: the base model folder under the adapter this step produces; None for a whole model.
        base_model_id: that base's checkpoint id.
    """

    model: Any
    peft_config: Any | None
    base_path: str | None
    base_model_id: str | None

    @property
    def is_adapter(self) -> bool:
        """Whether the step trains (and saves) an adapter rather than a whole model."""
        return self.base_path is not None


def peft_config(cfg: LoRASettings) -> Any:
    """PEFT's ``LoraConfig`` for a causal LM from campflow's LoRA settings."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=cfg.target_modules,
        task_type="CAUSAL_LM",
    )


def starting_model(parent: checkpoints.Checkpoint, lora: LoRASettings | None, hardware: Hardware) -> StartingModel:
    """Load ``parent`` for a training step with ``lora`` (None: full fine-tuning) on ``hardware``."""
    path = Path(parent.path).resolve()  # adapters name their base by path: keep it valid from any cwd
    parent_base = adapter_base(path)
    if lora is None:
        model = load_causal_lm(path, hardware.load_dtype(trainable=True))
        if parent_base is not None:  # PEFT froze the base: after merging, every weight trains again
            model = model.merge_and_unload().requires_grad_(True)
        return StartingModel(model, None, None, None)
    frozen = hardware.load_dtype(trainable=False)
    if parent_base is not None:
        base_id = (parent.metrics.get("adapter") or {}).get("base_model_id")
        return StartingModel(load_causal_lm(path, frozen, trainable_adapter=True), None, parent_base, base_id)
    return StartingModel(load_causal_lm(path, frozen), peft_config(lora), str(path), parent.model_id)


def adapter_metrics(start: StartingModel, model: Any, lora: LoRASettings | None) -> dict[str, Any]:
    """The ``adapter`` entry of a checkpoint's metrics (empty for a whole model)."""
    if not start.is_adapter:
        return {}
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    settings = lora.model_dump() if lora is not None else {}
    return {
        "adapter": {
            "base_model_id": start.base_model_id,
            "base_path": start.base_path,
            "trainable_parameters": trainable,
            "total_parameters": total,
            **settings,
        }
    }


def merge_adapter(adapter_path: str | Path, out: str | Path) -> Path:
    """Write base + adapter at ``adapter_path`` merged into one model folder at ``out`` (loads with plain
    transformers); returns ``out``. The folder appears whole or not at all."""
    import torch
    from transformers import AutoTokenizer

    source, final = Path(adapter_path), Path(out)
    base = adapter_base(source)
    if base is None:
        raise CampflowError(
            f"{source} holds no adapter (no adapter_config.json); only adapter checkpoints "
            "(trained with training.sft.lora or training.rl.lora) can be merged"
        )
    model = load_causal_lm(source, torch.float32).merge_and_unload()
    with checkpoints.staging(final) as tmp:
        model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(source).save_pretrained(tmp)
        meta = json.loads((source / "campflow.json").read_text()) if (source / "campflow.json").exists() else {}
        (tmp / "campflow.json").write_text(
            json.dumps({"kind": "merged", "merged_from": meta.get("model_id"), "base_path": base}, indent=1)
        )
        for extra in ("generation_config.json",):
            if not (tmp / extra).exists() and (Path(base) / extra).exists():
                shutil.copy(Path(base) / extra, tmp / extra)
    return final
