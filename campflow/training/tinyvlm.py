"""The embedded vision-language model: a tiny Qwen3-VL built locally, no download.

Qwen3-VL because it is the seed's headline model and TRL knows its chat template byte for byte (SFT's
training template with generation markers, GRPO's tool-call parser), so the tiny model trains through
the same code paths as the real one. Its architecture is transformers' ``Qwen3VLForConditionalGeneration``:
a small vision tower (patches of ``patch_size`` pixels, 2D rotary positions, 2x2 patches merged into
one image token, one deepstack layer feeding the language model) in front of a small Qwen3 language
model with multimodal rotary positions. Its processor is transformers' Qwen2-VL image processor (the
Pillow backend, no torchvision) with a Qwen3-VL processor around it
(:func:`campflow.agents.vision.load_processor`).

The tokenizer is the text model's (:func:`campflow.training.tinymodel.build_tokenizer`: byte-level BPE
trained on the bootcamps' demonstrations, one token per digit) plus Qwen-VL's vision tokens; the chat
template is TRL's Qwen3-VL template, which renders image parts (in user and tool messages) as
``<|vision_start|><|image_pad|><|vision_end|>`` and tool calls as ``<tool_call>`` JSON.

Deterministic for a seed: the corpus, the tokenizer and the initial weights (float32 on the CPU).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from campflow.agents.vision import VISION_TOKENS, image_only_processor, save_processor
from campflow.config import ReadingPretrainingConfig, TinyModelConfig, TinyVisionModelConfig
from campflow.hardware import Hardware, resolve_hardware
from campflow.training.tinymodel import (
    BuiltModel,
    build_tokenizer,
    copy_pretrain,
    corpus,
    fingerprint,
    initialized,
    weights_fingerprint,
)

MERGE = 2  # patches per side merged into one image token (Qwen-VL's spatial merge)
TEMPORAL_PATCH = 2  # Qwen-VL repeats a still image over two frames


def vision_chat_template() -> str:
    """TRL's Qwen3-VL chat template, exactly as TRL ships it (TRL matches templates by text)."""
    from trl.chat_template_utils import qwen3_vl_chat_template

    return qwen3_vl_chat_template


def _mrope_section(head_dim: int) -> list[int]:
    """The split of a head's rotary frequencies over time, height and width (Qwen3-VL: 24/20/20 of 64)."""
    half = head_dim // 2
    t = half - 2 * (half * 5 // 16)
    return [t, half * 5 // 16, half * 5 // 16]


def build_processor(texts: Sequence[str], cfg: TinyVisionModelConfig):  # noqa: ANN201
    """The tokenizer trained on ``texts`` with the vision tokens, and the processor around it."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    text_cfg = TinyModelConfig(seed=cfg.seed, vocab_size=cfg.vocab_size)
    tokenizer = build_tokenizer(texts, text_cfg.vocab_size, header_unit=True)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *VISION_TOKENS]})
    tokenizer.chat_template = vision_chat_template()
    tokenizer.model_max_length = cfg.max_positions
    side = cfg.patch_size * MERGE
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=cfg.patch_size,
        temporal_patch_size=TEMPORAL_PATCH,
        merge_size=MERGE,
        size={"shortest_edge": side * side, "longest_edge": cfg.max_image_pixels},
    )
    return image_only_processor(image_processor, tokenizer, vision_chat_template())


def read_pretrain(
    model: Any, processor: Any, cfg: ReadingPretrainingConfig, bootcamps: Sequence[str], seed: int, hardware: Hardware
) -> dict[str, float | int]:
    """Reading-pretrain ``model`` on the vision bootcamps among ``bootcamps`` as ``cfg`` says (nothing for
    0 steps or no vision bootcamp); its figures."""
    if cfg.steps == 0:
        return {}
    from campflow.training.reading import pretrain_reading, reading_rows

    rows = reading_rows(bootcamps, cfg.instances, seed, cfg.levels)
    if not rows:
        return {}
    done = pretrain_reading(
        model,
        processor,
        rows,
        steps=cfg.steps,
        batch=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        seed=seed,
        tuner=hardware.thread_tuner(),
    )
    return done.metrics()


def build_tiny_vlm(
    out: Path,
    cfg: TinyVisionModelConfig,
    bootcamps: Sequence[str],
    *,
    texts: Sequence[str] | None = None,
    hardware: Hardware | None = None,
) -> BuiltModel:
    """Build the processor and a freshly initialized tiny Qwen3-VL for ``bootcamps``; save both to ``out``.

    ``texts`` replaces the bootcamps' corpus for the tokenizer; ``hardware`` sets the saved precision
    (default: fp32).
    """
    from transformers import GenerationConfig, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    hardware = hardware or resolve_hardware("cpu", "fp32")
    if cfg.hidden_size % cfg.heads or cfg.vision_hidden_size % cfg.vision_heads:
        raise ValueError(
            f"hidden sizes {cfg.hidden_size} / {cfg.vision_hidden_size} must divide evenly by "
            f"{cfg.heads} / {cfg.vision_heads} heads"
        )
    texts = list(texts) if texts is not None else list(corpus(bootcamps, cfg.corpus_per_level, cfg.seed))
    processor = build_processor(texts, cfg)
    tokenizer = processor.tokenizer
    token = tokenizer.convert_tokens_to_ids
    head_dim = cfg.hidden_size // cfg.heads
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads,
            "head_dim": head_dim,
            "max_position_embeddings": cfg.max_positions,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": _mrope_section(head_dim),
                "mrope_interleaved": True,
            },
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": None,
        },
        vision_config={
            "depth": cfg.vision_layers,
            "hidden_size": cfg.vision_hidden_size,
            "intermediate_size": cfg.vision_intermediate_size,
            "num_heads": cfg.vision_heads,
            "patch_size": cfg.patch_size,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": TEMPORAL_PATCH,
            "out_hidden_size": cfg.hidden_size,
            # learned positions for a grid of up to 32 x 32 patches (interpolated for others)
            "num_position_embeddings": 1024,
            "deepstack_visual_indexes": [(cfg.vision_layers - 1) // 2],
        },
        image_token_id=token("<|image_pad|>"),
        video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"),
        vision_end_token_id=token("<|vision_end|>"),
        tie_word_embeddings=True,
    )
    model = initialized(Qwen3VLForConditionalGeneration, config, cfg.seed)
    init_fingerprint = weights_fingerprint(model, tokenizer.backend_tokenizer.to_str())
    pretraining = copy_pretrain(model, tokenizer, cfg.pretrain, cfg.seed, hardware)  # the language model, text only
    pretraining |= read_pretrain(model, processor, cfg.read, bootcamps, cfg.seed, hardware)
    if hardware.dtype != "float32":
        model = model.to(hardware.torch_dtype())
        model.config.dtype = hardware.dtype
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    save_processor(processor, out)
    (out / "campflow.json").write_text(
        json.dumps(
            {
                "kind": "base",
                "bootcamps": list(bootcamps),
                "tiny_vl": cfg.model_dump(),
                "init_fingerprint": init_fingerprint,
                "pretraining": pretraining,
            },
            indent=1,
        )
    )
    size = sum(p.numel() for p in model.parameters())
    return BuiltModel(out, size, len(tokenizer), fingerprint(out), init_fingerprint, pretraining)
