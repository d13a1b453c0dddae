"""A local Hugging Face model run in-process, with batched generation.

Episodes in flight each ask for one turn; a batcher gathers the waiting requests (up to
``batch_size``, or whatever arrived within a few milliseconds), renders them with the model's own
chat template, and generates them together, left-padded, on a worker thread so the event loop keeps
serving the other episodes. The reply is the raw text: the engine's parser reads the
``<tool_call>`` blocks, exactly as it does for any other policy.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.errors import ContextOverflowError, PolicyError


# transformers' from_pretrained swaps a class attribute (PreTrainedModel.tie_weights) for the duration
# of a load, so two loads on two threads can leave weight tying switched off for the whole process
# (and later models with an untied, empty lm_head). Every load in campflow holds this lock.
MODEL_LOADING = threading.RLock()


def load_model(path: str) -> tuple[Any, Any, threading.Lock]:
    """Model, tokenizer and a generation lock for ``path``, loaded once per process (thread-safe)."""
    with MODEL_LOADING:
        return _load_model(path)


@functools.lru_cache(maxsize=4)
def _load_model(path: str) -> tuple[Any, Any, threading.Lock]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the CLI shows its own progress; per-load bars would interleave
    if not Path(path).exists() and "/" not in path:
        raise PolicyError(f"no local model at {path}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except OSError as exc:
        raise PolicyError(f"cannot load a model from {path}: {exc}") from None
    model.eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, threading.Lock()


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
    """

    def __init__(self, path: str | Path, *, batch_size: int = 16, max_new_tokens: int = 256,
                 temperature: float = 0.0, seed: int = 0, model_id: str | None = None) -> None:
        self.path = str(path)
        self.model_id = model_id or stamped_model_id(self.path) or self.path
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.temperature, self.seed = temperature, seed
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task | None = None
        self._batches = 0

    async def respond(self, messages: Sequence[dict], tools: Sequence[dict], context: TurnContext) -> PolicyReply:
        if self._queue is None:
            load_model(self.path)  # fail fast, on this episode, if the model cannot load
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
                        req.future.set_exception(exc if isinstance(exc, PolicyError)
                                                 else PolicyError(f"local generation failed: {exc}"))
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

        model, tokenizer, lock = load_model(self.path)
        limit = model.config.max_position_embeddings - self.max_new_tokens
        prompts: list[list[int] | Exception] = []
        for req in batch:
            ids = tokenizer.apply_chat_template(template_messages(req.messages, strict=False), tools=req.tools or None,
                                                add_generation_prompt=True, tokenize=True, return_dict=False)
            if len(ids) > limit:
                prompts.append(ContextOverflowError(f"prompt of {len(ids)} tokens leaves no room for "
                                                    f"{self.max_new_tokens} new ones in {limit + self.max_new_tokens}"))
            else:
                prompts.append(list(ids))
        todo = [p for p in prompts if not isinstance(p, Exception)]
        outputs: list[list[int]] = []
        if todo:
            width = max(len(p) for p in todo)
            input_ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in todo])
            attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in todo])
            sampling = {"do_sample": True, "temperature": self.temperature} if self.temperature > 0 else \
                {"do_sample": False}
            with lock, torch.inference_mode():
                self._batches += 1
                if self.temperature > 0:
                    torch.manual_seed(self.seed * 1_000_003 + self._batches)
                generated = model.generate(input_ids=input_ids, attention_mask=attention,
                                           max_new_tokens=self.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                           eos_token_id=tokenizer.eos_token_id, **sampling)
            outputs = [row[width:].tolist() for row in generated]
        replies: list[PolicyReply | Exception] = []
        it = iter(outputs)
        for p in prompts:
            if isinstance(p, Exception):
                replies.append(p)
                continue
            new = _until_eos(next(it), tokenizer.eos_token_id, tokenizer.pad_token_id)
            text = tokenizer.decode(new, skip_special_tokens=True)
            replies.append(PolicyReply(content=text, prompt_tokens=len(p), completion_tokens=len(new),
                                       finish_reason="stop" if len(new) < self.max_new_tokens else "length"))
        return replies

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
