"""A local Hugging Face model run in-process, with batched generation.

Episodes in flight each ask for one turn; a batcher gathers the waiting requests (up to
``batch_size``, or whatever arrived within a few milliseconds), renders them with the model's own
chat template, and generates them together, left-padded, on a worker thread so the event loop keeps
serving the other episodes. How the reply becomes tool calls follows the model's template
(:mod:`campflow.agents.templates`): ``<tool_call>`` text goes to the engine's parser as is; other
formats (Llama 3) are parsed by TRL's response template for that model.

The model is placed and cast by :func:`campflow.hardware.resolve_hardware` (``policy.device`` and
``policy.precision``); a folder holding a PEFT adapter is loaded as its base model plus the adapter.
A vision-language model (:func:`campflow.agents.vision.is_vision_model`) reads each conversation through
its processor: the images of the prompt and of tool results become pixel values and image tokens, and a
batch carries every row's images in row order.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.vision import collate, encode_conversation, is_vision_model, load_processor
from campflow.errors import ContextOverflowError, PolicyError
from campflow.hardware import Hardware, resolve_hardware

# transformers' from_pretrained swaps a class attribute (PreTrainedModel.tie_weights) for the duration
# of a load, so two loads on two threads can leave weight tying switched off for the whole process
# (and later models with an untied, empty lm_head). Every load in campflow holds this lock.
MODEL_LOADING = threading.RLock()

ADAPTER_CONFIG = "adapter_config.json"


def adapter_base(path: str | Path) -> str | None:
    """The base model folder of a PEFT adapter folder, or None when ``path`` holds a whole model."""
    config = Path(path) / ADAPTER_CONFIG
    if not config.exists():
        return None
    return json.loads(config.read_text())["base_model_name_or_path"]


def load_causal_lm(path: str | Path, dtype: Any, *, trainable_adapter: bool = False) -> Any:
    """A causal LM from a model folder, or from an adapter folder as its base plus the adapter (PEFT).

    ``trainable_adapter`` loads an adapter ready to train further; otherwise it is loaded for inference.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from campflow.agents.vision import is_vision_model

    base = adapter_base(path)
    auto = AutoModelForImageTextToText if is_vision_model(base or path) else AutoModelForCausalLM
    with MODEL_LOADING:
        if base is None:
            return auto.from_pretrained(str(path), dtype=dtype)
        from peft import PeftModel

        model = auto.from_pretrained(base, dtype=dtype)
        return PeftModel.from_pretrained(model, str(path), is_trainable=trainable_adapter)


def load_model(path: str, hardware: Hardware | None = None) -> tuple[Any, Any, threading.Lock]:
    """Model, tokenizer and a generation lock for ``path`` on ``hardware`` (default: resolved from auto),
    loaded once per process (thread-safe)."""
    hardware = hardware or resolve_hardware()
    with MODEL_LOADING:
        return _load_model(path, hardware.device, hardware.dtype)


@functools.lru_cache(maxsize=4)
def _load_model(path: str, device: str, dtype: str) -> tuple[Any, Any, threading.Lock]:
    import torch
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the CLI shows its own progress; per-load bars would interleave
    if not Path(path).exists() and "/" not in path:
        raise PolicyError(f"no local model at {path}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
        model = load_causal_lm(path, getattr(torch, dtype))
    except OSError as exc:
        raise PolicyError(f"cannot load a model from {path}: {exc}") from None
    if device != "cpu":
        model.to(device)
    model.eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, threading.Lock()


@functools.lru_cache(maxsize=4)
def vision_processor(path: str) -> Any:
    """The processor of the vision-language model at ``path``, loaded once per process."""
    with MODEL_LOADING:
        return load_processor(path)


def stamped_model_id(path: str | Path) -> str | None:
    """The checkpoint id campflow stamped into a model folder (``campflow.json``), if any."""
    meta = Path(path) / "campflow.json"
    if meta.exists():
        return json.loads(meta.read_text()).get("model_id")
    return None


@dataclass
class _Request:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    future: asyncio.Future = field(repr=False)


class LocalPolicy(Policy):
    """Generates with a local causal LM (a path saved with ``save_pretrained``, or a cached hub id).

    Args:
        path: the model folder.
        batch_size: most sequences generated together.
        max_new_tokens: tokens per turn.
        temperature: 0 for greedy decoding, else sampling at this temperature.
        seed: seeds sampling (each batch reseeds from it and a counter, so runs repeat).
        model_id: what the store records (default: the path).
        device / precision: where and how the model runs (see :func:`campflow.hardware.resolve_hardware`).
        cpu_threads: torch threads on a CPU, ``auto`` to choose them by measured speed per batch
            (:mod:`campflow.threads`).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        batch_size: int = 16,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        seed: int = 0,
        model_id: str | None = None,
        device: str = "auto",
        precision: str = "auto",
        cpu_threads: int | str = "auto",
    ) -> None:
        self.path = str(path)
        self.model_id = model_id or stamped_model_id(self.path) or self.path
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.temperature, self.seed = temperature, seed
        # a setting this machine lacks fails here, at once
        self.hardware = resolve_hardware(device, precision, cpu_threads=cpu_threads)
        self.threads = self.hardware.thread_tuner()
        self._format: Any = None
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task | None = None
        self._batches = 0

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        if self._queue is None:
            _, tokenizer, _ = load_model(self.path, self.hardware)  # fail fast, on this episode, if it cannot load
            from campflow.agents.templates import chat_format

            self._format = chat_format(tokenizer.chat_template)
            # a thinking template decides itself where earlier reasoning shows; send it what it would render
            self.send_reasoning = self._format.thinking
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._serve())
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Request(list(messages), list(tools), future))
        return await future

    async def _serve(self) -> None:
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            await asyncio.sleep(0.002)  # let the other episodes of this turn arrive
            while len(batch) < self.batch_size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                replies = await asyncio.to_thread(self._generate, batch)
            except Exception as exc:  # noqa: BLE001  (every waiting episode must hear about it)
                for req in batch:
                    if not req.future.done():
                        req.future.set_exception(
                            exc if isinstance(exc, PolicyError) else PolicyError(f"local generation failed: {exc}")
                        )
                continue
            for req, reply in zip(batch, replies):
                if not req.future.done():
                    if isinstance(reply, Exception):
                        req.future.set_exception(reply)
                    else:
                        req.future.set_result(reply)

    def _generate(self, batch: list[_Request]) -> list[PolicyReply | Exception]:
        import torch

        from campflow.agents.chat import template_messages

        model, tokenizer, lock = load_model(self.path, self.hardware)
        processor = vision_processor(self.path) if is_vision_model(self.path) else None
        limit = model.config.get_text_config().max_position_embeddings - self.max_new_tokens
        prompts: list[list[int] | Exception] = []
        encoded: list[dict[str, Any]] = []  # a vision model's prompts, with their pixel values
        for req in batch:
            if processor is not None:
                try:
                    encoded.append(encode_conversation(processor, req.messages, req.tools))
                except PolicyError as exc:  # an image that does not decode: this episode's problem alone
                    prompts.append(exc)
                    encoded.append({})
                    continue
                ids = encoded[-1]["input_ids"]
            else:
                ids = tokenizer.apply_chat_template(
                    template_messages(req.messages, strict=False),
                    tools=req.tools or None,
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=False,
                )
            if len(ids) > limit:
                prompts.append(
                    ContextOverflowError(
                        f"prompt of {len(ids)} tokens leaves no room for "
                        f"{self.max_new_tokens} new ones in {limit + self.max_new_tokens}"
                    )
                )
            else:
                prompts.append(list(ids))
        todo = [p for p in prompts if not isinstance(p, Exception)]
        outputs: list[list[int]] = []
        if todo:
            width = max(len(p) for p in todo)
            if processor is not None:
                inputs = collate(
                    [e for e, p in zip(encoded, prompts) if not isinstance(p, Exception)],
                    tokenizer.pad_token_id,
                    model.device,
                )
            else:
                inputs = {
                    "input_ids": torch.tensor(
                        [[tokenizer.pad_token_id] * (width - len(p)) + p for p in todo], device=model.device
                    ),
                    "attention_mask": torch.tensor(
                        [[0] * (width - len(p)) + [1] * len(p) for p in todo], device=model.device
                    ),
                }
            sampling = (
                {"do_sample": True, "temperature": self.temperature} if self.temperature > 0 else {"do_sample": False}
            )
            with lock, torch.inference_mode():
                self._batches += 1
                if self.temperature > 0:
                    torch.manual_seed(self.seed * 1_000_003 + self._batches)
                started = time.perf_counter()
                if self.threads is not None:
                    self.threads.apply()  # on this (worker) thread: torch keeps the count per thread
                generated = model.generate(
                    **inputs,
                    max_new_tokens=self.max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    **sampling,
                )
                if self.threads is not None:  # work: token positions, the prompt's included
                    self.threads.record(time.perf_counter() - started, float(generated.numel()))
            outputs = [row[width:].tolist() for row in generated]
        replies: list[PolicyReply | Exception] = []
        it = iter(outputs)
        for req, p in zip(batch, prompts):
            if isinstance(p, Exception):
                replies.append(p)
                continue
            new = _until_eos(next(it), tokenizer.eos_token_id, tokenizer.pad_token_id)
            finish = "stop" if len(new) < self.max_new_tokens else "length"
            reply = PolicyReply(
                content=tokenizer.decode(new, skip_special_tokens=True),
                prompt_tokens=len(p),
                completion_tokens=len(new),
                finish_reason=finish,
            )
            if self._format is not None and self._format.tool_calls == "parsed":
                self._parse(reply, tokenizer, p, new, finish, req.tools or None)
            replies.append(reply)
        return replies

    @staticmethod
    def _parse(
        reply: PolicyReply,
        tokenizer: Any,
        prompt: list[int],
        new: list[int],
        finish: str,
        tools: list[dict[str, Any]] | None,
    ) -> None:
        """Native tool calls from a reply in a format the engine does not read (TRL's parser for it)."""
        from campflow.agents.templates import parse_reply

        text = tokenizer.decode(new) + (tokenizer.eos_token if finish == "stop" else "")
        parsed = parse_reply(tokenizer, text, tokenizer.decode(prompt), tools)
        reply.content, reply.tool_calls, reply.reasoning = parsed["content"], parsed["tool_calls"], parsed["reasoning"]

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None
            self._queue = None


def _until_eos(ids: list[int], eos: int, pad: int) -> list[int]:
    out = []
    for i in ids:
        if i in (eos, pad):
            break
        out.append(i)
    return out
