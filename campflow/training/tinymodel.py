"""The embedded default model: a tiny Qwen3-architecture transformer built locally, no download.

The tokenizer is a byte-level BPE trained on text rendered from the bootcamps themselves (system
prompts, tool schemas, grounded demonstrations, all through the chat template), with every digit its own
token, since a small model only learns to copy and compute numbers digit by digit. It does not split
on whitespace first, so a phrase that recurs in every prompt (the template's tool instructions, a
tool's schema, the system preamble) becomes one token: sequences are ~2.5x shorter than with
word-level pre-splitting, and training on a CPU ~2.5x cheaper (measured on calculator and maze). The chat template
is TRL's Qwen2.5 template, byte for byte, so TRL recognizes it (tool-call parsing, the training
template with generation markers) and our own parser reads the same ``<tool_call>`` JSON. Qwen2.5's
turns all look alike; Qwen3's template adds an empty think block to the last assistant turn only,
which would teach a multi-turn model two formats, so it is an option (``chat_template: qwen3``) for
exercising the thinking path, not the default.

Weights are initialized in float32 on the CPU (deterministic for a seed) and saved in the precision
:func:`campflow.hardware.resolve_hardware` gives (float32 for the embedded default).

Everything is deterministic for a seed: the corpus, the tokenizer and the initial weights.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campflow.config import CopyPretrainingConfig, TinyModelConfig
from campflow.hardware import Hardware, resolve_hardware

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ASSISTANT_HEADER = "assistant\n"  # after <|im_start|> in the Qwen templates
# Added as ordinary tokens (as Qwen2.5 does) so they survive decoding with skip_special_tokens.
TAG_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<tools>",
    "</tools>",
]


@dataclass(frozen=True)
class BuiltModel:
    """A model saved on disk, with its size and fingerprints.

    ``init_fingerprint`` (the weights as initialized, before any training step, and the tokenizer) is the
    same on every machine (see :func:`initialized`); ``fingerprint`` (the files saved) is too when nothing
    was pretrained, and otherwise only on machines with the same kernels and thread counts: floating-point
    sums differ in their last bits between vector instruction sets and thread counts, and training carries
    those bits on.
    """

    path: Path
    parameters: int
    vocab_size: int
    fingerprint: str
    init_fingerprint: str
    pretraining: dict[str, float | int] = field(default_factory=dict)


def initialized(model_class: Any, config: Any, seed: int) -> Any:
    """A ``model_class(config)`` initialized from ``seed``, with the same float32 weights on every CPU.

    Torch draws float32 normals with vectorized kernels whose last bit differs between instruction sets
    (AVX2 or AVX-512 against the plain kernels that ``ATEN_CPU_CAPABILITY=default`` or an older CPU runs);
    float64 draws take one scalar path everywhere, so the weights are drawn in float64 and rounded.
    """
    import torch

    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = model_class(config)
    finally:
        torch.set_default_dtype(previous)
    return model.to(torch.float32)


def weights_fingerprint(model: Any, tokenizer_json: str = "") -> str:
    """A hash of a model's weights in memory (names, shapes, bytes) and of its tokenizer's JSON."""
    h = hashlib.sha256(tokenizer_json.encode())
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def chat_template(name: str = "qwen2.5") -> str:
    """TRL's chat template ``name`` (qwen2.5 or qwen3), exactly as TRL ships it (TRL matches templates by text)."""
    from trl import chat_template_utils

    templates = {"qwen2.5": chat_template_utils.qwen2_5_chat_template, "qwen3": chat_template_utils.qwen3_chat_template}
    return templates[name]


def corpus(bootcamps: Sequence[str], per_level: int, seed: int, template_name: str = "qwen2.5") -> Iterator[str]:
    """Chat-template renderings of teacher episodes on training instances of ``bootcamps``: the grounded
    demonstrations SFT trains on (observing calls included), so the tokenizer covers that text."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from campflow.agents.chat import template_messages
    from campflow.agents.oracle import DemonstratorPolicy
    from campflow.bootcamps import registry
    from campflow.bootcamps.splits import train_instances
    from campflow.rollout.engine import EpisodeSpec, run_episodes

    template = chat_template(template_name)
    for name in bootcamps:
        bootcamp = registry.make(name)
        instances = train_instances(bootcamp, per_level * len(bootcamp.levels), seed=seed)
        episodes = asyncio.run(run_episodes([EpisodeSpec(bootcamp, i) for i in instances], DemonstratorPolicy()))
        for instance, episode in zip(instances, episodes):
            rendered = render_jinja_template(
                [template_messages(episode.transcript)], tools=bootcamp.tool_schemas(instance), chat_template=template
            )
            yield rendered[0][0] if isinstance(rendered, tuple) else rendered[0]


def build_tokenizer(
    texts: Sequence[str], vocab_size: int, template_name: str = "qwen2.5", *, header_unit: bool = False
):
    """Train a byte-level BPE with single-digit tokens and wrap it as a transformers tokenizer.

    With ``header_unit`` the assistant's turn header (``assistant\n``) is a pre-token of its own, so text
    an assistant writes before its tool call tokenizes the same in a training row as after an inference
    prompt, which ends with the header (merged, ``\nYou (`` is one token that no prompt ends with). The
    vision model's demonstrations say what they see before they act, so it is built with it; the text
    model's demonstrations write no text there, and its tokenizer stays as measured.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    header = [pre_tokenizers.Split(ASSISTANT_HEADER, behavior="isolated")] if header_unit else []

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                pattern="|".join(_escape(t) for t in SPECIAL_TOKENS + TAG_TOKENS), behavior="isolated"
            ),
            *header,
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS + TAG_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        model_max_length=4096,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens(TAG_TOKENS, special_tokens=False)
    tokenizer.chat_template = chat_template(template_name)
    return tokenizer


def _escape(token: str) -> str:
    import re

    return re.escape(token)


def build_tiny_model(
    out: Path,
    cfg: TinyModelConfig,
    bootcamps: Sequence[str],
    *,
    texts: Sequence[str] | None = None,
    hardware: Hardware | None = None,
) -> BuiltModel:
    """Build the tokenizer and a freshly initialized model for ``bootcamps`` and save both to ``out``.

    ``texts`` replaces the bootcamps' corpus for the tokenizer; ``hardware`` sets the saved precision
    (default: fp32, the embedded model's).
    """
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    hardware = hardware or resolve_hardware("cpu", "fp32")
    texts = (
        list(texts) if texts is not None else list(corpus(bootcamps, cfg.corpus_per_level, cfg.seed, cfg.chat_template))
    )
    tokenizer = build_tokenizer(texts, cfg.vocab_size, cfg.chat_template)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.hidden_size // cfg.heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_theta=10000.0,
        dtype="float32",
    )
    model = initialized(Qwen3ForCausalLM, config, cfg.seed)
    init_fingerprint = weights_fingerprint(model, tokenizer.backend_tokenizer.to_str())
    pretraining = copy_pretrain(model, tokenizer, cfg.pretrain, cfg.seed, hardware)
    if hardware.dtype != "float32":
        model = model.to(hardware.torch_dtype())
        model.config.dtype = hardware.dtype
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "campflow.json").write_text(
        json.dumps(
            {
                "kind": "base",
                "bootcamps": list(bootcamps),
                "tiny_model": cfg.model_dump(),
                "init_fingerprint": init_fingerprint,
                "pretraining": pretraining,
            },
            indent=1,
        )
    )
    size = sum(p.numel() for p in model.parameters())
    return BuiltModel(out, size, len(tokenizer), fingerprint(out), init_fingerprint, pretraining)


def copy_pretrain(
    model: Any, tokenizer: Any, cfg: CopyPretrainingConfig, seed: int, hardware: Hardware
) -> dict[str, float | int]:
    """Copy-pretrain a freshly initialized ``model`` as ``cfg`` says (nothing for 0 steps), torch's CPU
    threads chosen by ``hardware``; its figures."""
    if cfg.steps == 0:
        return {}
    from campflow.training.copying import pretrain_copy

    done = pretrain_copy(
        model,
        tokenizer,
        steps=cfg.steps,
        batch=cfg.batch_size,
        length=cfg.length,
        learning_rate=cfg.learning_rate,
        seed=seed,
        tuner=hardware.thread_tuner(),
    )
    return done.metrics()


def fingerprint(path: Path) -> str:
    """A hash of a saved model's weights, config and tokenizer files (identical builds, identical hash)."""
    h = hashlib.sha256()
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        f = path / name
        if f.exists():
            h.update(name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]
