"""The in-process local model behind the proxy: the chat template rendered once, generation from those ids.

Calls of several episodes are generated together (left-padded, on a worker thread, under the model's
generation lock). Each call's completion ids run through the first stop token the model sampled, with the
log-probability of each id under the distribution it was sampled from (temperature applied; no top-k or
top-p). Tool calls are parsed from the sampled text by the engine's parser (``<tool_call>`` blocks,
:func:`campflow.rollout.parsing.parse_turn`) or, for a template whose calls are bare JSON (Llama 3), by
TRL's response template (:func:`campflow.agents.templates.parse_reply`).

A conversation that renders as an earlier call's conversation plus the reply the proxy gave, plus more,
continues that call: the new prompt is its prompt and completion ids, then the ids of the text the
template renders after the reply's end. The model sees its own tokens, not its reply tokenized again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campflow.proxy.backends import Backend, ChatRequest, Generation, ProxyError, ServedCall

BATCH_WAIT_S = 0.02  # the longest a batch waits for calls still being rendered


@dataclass
class _Pending:
    prompt: list[int]
    future: asyncio.Future = field(repr=False)


class LocalBackend(Backend):
    """The in-process local model (see :class:`campflow.agents.local.LocalPolicy` for loading and placement).

    Args:
        path: the model folder.
        max_new_tokens: tokens per call.
        temperature: 0 for greedy decoding, else sampling at this temperature.
        seed: seeds sampling (each batch from it and a counter, so runs repeat).
        batch_size: most calls generated together.
        model_id: what the store records (default: the checkpoint id stamped in the folder, else the path).
        model_names: names a request may use for this model (default: ``model_id`` and the path).
        device / precision: where and how the model runs (:func:`campflow.hardware.resolve_hardware`).
    """

    kind = "local"

    def __init__(
        self,
        path: str | Path,
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        seed: int = 0,
        batch_size: int = 16,
        model_id: str | None = None,
        model_names: Sequence[str] | None = None,
        device: str = "auto",
        precision: str = "auto",
    ) -> None:
        from campflow.agents.local import stamped_model_id
        from campflow.hardware import resolve_hardware

        self.path = str(path)
        self.model_id = model_id or stamped_model_id(self.path) or self.path
        self.model_names = frozenset(model_names or (self.model_id, self.path))
        self.max_new_tokens, self.temperature, self.seed = max_new_tokens, temperature, seed
        self.batch_size = batch_size
        self.hardware = resolve_hardware(device, precision)
        self._queue: asyncio.Queue[_Pending] | None = None
        self._worker: asyncio.Task | None = None
        self._batches = 0
        self._last_batch = 1  # calls the last generation batch held
        self._rendering = 0
        self._format: Any = None

    @property
    def applied_sampling(self) -> dict[str, Any]:
        """The settings every call is generated with."""
        if self.temperature > 0:
            return {"temperature": self.temperature, "seed": self.seed, "max_tokens": self.max_new_tokens}
        return {"temperature": 0.0, "greedy": True, "max_tokens": self.max_new_tokens}

    def loaded(self) -> tuple[Any, Any, Any]:
        """The model, its tokenizer and the lock its generation runs under (loaded once per process)."""
        from campflow.agents.local import load_model

        return load_model(self.path, self.hardware)

    def _load(self) -> tuple[Any, Any]:
        from campflow.agents.templates import chat_format

        model, tokenizer, _ = self.loaded()
        if self._format is None:
            self._format = chat_format(tokenizer.chat_template)
        return model, tokenizer

    def tokenizer(self) -> Any:
        """The model's tokenizer (its chat template included)."""
        return self._load()[1]

    def context_limit(self) -> int:
        """The longest sequence the model takes, prompt and completion together."""
        return self._load()[0].config.get_text_config().max_position_embeddings

    def stop_ids(self) -> set[int]:
        """The ids that end a reply (the tokenizer's end of turn and the generation config's)."""
        model, tokenizer = self._load()
        return _stop_ids(tokenizer, model.generation_config)

    def render(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> str:
        """The chat template's text for ``messages`` with ``tools``, ending in the generation prompt."""
        return _render(self.tokenizer(), messages, tools, generation_prompt=True)

    def prompt_ids(self, request: ChatRequest, history: Sequence[ServedCall]) -> tuple[list[int], str, str | None]:
        """The prompt ids for ``request``, its rendered text, and the call it continues (if any).

        A conversation that renders as an earlier call's conversation plus the reply the proxy gave,
        plus more, continues that call: its prompt and completion ids, then the ids of the text the
        template renders after the reply's end. Anything else is rendered and tokenized whole.
        """
        tokenizer = self.tokenizer()
        text = _render(tokenizer, request.messages, request.tools, generation_prompt=True)
        for served in reversed(history[-4:]):
            gen = served.generation
            if gen.prompt_text is None or gen.prompt_ids is None or not gen.completion_ids:
                continue
            try:
                before = _render(tokenizer, [*served.messages, served.reply], served.tools, generation_prompt=False)
            except Exception:  # noqa: BLE001  (a reply the template cannot render: no continuation)
                continue
            if not (text.startswith(before) and before.startswith(gen.prompt_text)):
                continue
            cut = _reply_end(tokenizer, before, gen)
            if cut is None or cut < len(gen.prompt_text):
                continue
            tail = tokenizer(text[cut:], add_special_tokens=False)["input_ids"]
            return [*gen.prompt_ids, *gen.completion_ids, *tail], text, served.call_id
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return list(ids), text, None

    async def generate(self, request: ChatRequest, history: Sequence[ServedCall]) -> Generation:
        self._rendering += 1  # a call on its way to the batch: the batch waits for it (see _serve)
        try:
            tokenizer = await asyncio.to_thread(self.tokenizer)
            # rendering and tokenizing take milliseconds: off the event loop, which serves the other episodes
            prompt, text, continued = await asyncio.to_thread(self.prompt_ids, request, history)
        finally:
            self._rendering -= 1
        limit = self.context_limit()
        if len(prompt) + self.max_new_tokens > limit:
            raise ProxyError(
                f"messages: the prompt is {len(prompt)} tokens; with {self.max_new_tokens} new ones it exceeds "
                f"the model's context of {limit}",
                param="messages",
                code="context_length_exceeded",
            )
        completion, logprobs = await self.sample(prompt)
        stops = self.stop_ids()
        stopped = bool(completion) and completion[-1] in stops
        generated = completion[:-1] if stopped else completion
        message = self.reply_message(tokenizer, generated, request, stopped=stopped, prompt_text=text)
        finish = "tool_calls" if message.get("tool_calls") else ("stop" if stopped else "length")
        return Generation(
            message=message,
            finish_reason=finish,
            prompt_ids=prompt,
            completion_ids=completion,
            logprobs=logprobs,
            applied_sampling=self.applied_sampling,
            prompt_tokens=len(prompt),
            completion_tokens=len(completion),
            continued_from=continued,
            prompt_text=text,
        )

    async def sample(self, prompt: list[int]) -> tuple[list[int], list[float]]:
        """Ids sampled after ``prompt`` (through the first stop id) and their logprobs, generated in a batch
        with the other calls waiting."""
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._serve())
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(prompt, future))
        return await future

    def reply_message(
        self, tokenizer: Any, generated: Sequence[int], request: ChatRequest, *, stopped: bool, prompt_text: str
    ) -> dict[str, Any]:
        """The assistant message for sampled ids (stop token excluded): content, reasoning and tool calls,
        parsed by the engine's parser (``<tool_call>`` blocks) or TRL's response template (Llama 3)."""
        from campflow.agents.templates import parse_reply
        from campflow.rollout.parsing import parse_turn

        text = tokenizer.decode(list(generated), skip_special_tokens=True)
        parse = request.tool_choice != "none" and bool(request.tools)
        # ids unique within the conversation (the Agents SDK refuses a call id it has seen completed): the
        # turn's number, then the call's; not in the tokens (chat templates do not render them)
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        if parse and self._format is not None and self._format.tool_calls == "parsed":
            full = tokenizer.decode(list(generated)) + (tokenizer.eos_token if stopped else "")
            parsed = parse_reply(tokenizer, full, prompt_text, request.tools)
            content, reasoning, calls = parsed["content"], parsed["reasoning"], parsed["tool_calls"] or []
            calls = [{"id": f"call_{turn}_{i}", **c} for i, c in enumerate(calls)]
        elif parse:
            said = parse_turn(text, None, {}, max_calls=64)
            content, reasoning = said.content, said.reasoning
            # {} of tools: every named call is "unknown" to the parser, which still reads its name and
            # arguments; the agent's own tools decide what it means
            calls = [
                {
                    "id": f"call_{turn}_{i}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.raw_arguments},
                }
                for i, c in enumerate(c for c in said.calls if c.name)
            ]
        else:
            from campflow.rollout.parsing import split_reasoning

            reasoning, content = split_reasoning(text) if "<think>" in text else (None, text)
            calls = []
        message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
        if calls:
            message["tool_calls"] = calls
        if reasoning:
            message["reasoning_content"] = reasoning
        return message

    async def _serve(self) -> None:
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            # the calls of this moment join it: those queued within 2 ms, and for up to BATCH_WAIT_S those still
            # being rendered and as many as the last batch held (the episodes a batch answered call again
            # together, a few ms apart over HTTP); a lone call does not wait
            await asyncio.sleep(0.002)
            deadline = time.monotonic() + BATCH_WAIT_S
            expected = min(self.batch_size, self._last_batch)
            while len(batch) < self.batch_size:
                if not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                elif (self._rendering or len(batch) < expected) and time.monotonic() < deadline:
                    await asyncio.sleep(0.001)
                else:
                    break
            self._last_batch = len(batch)
            try:
                results = await asyncio.to_thread(self._generate, [p.prompt for p in batch])
            except Exception as exc:  # noqa: BLE001  (every waiting call must hear about it)
                error = ProxyError(
                    f"local generation failed: {exc}", status=500, kind="server_error", code="generation_failed"
                )
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(error)
                continue
            for p, result in zip(batch, results):
                if not p.future.done():
                    p.future.set_result(result)

    def _generate(self, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
        """Sampled ids (through the first stop token) and their logprobs, per prompt, generated together."""
        import torch

        model, tokenizer, lock = self.loaded()
        pad = tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        inputs = {
            "input_ids": torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device),
            "attention_mask": torch.tensor(
                [[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device
            ),
        }
        sampling = (
            {"do_sample": True, "temperature": self.temperature, "top_k": 0, "top_p": 1.0}
            if self.temperature > 0
            else {"do_sample": False}
        )
        stops = self.stop_ids()
        with lock, torch.inference_mode():
            self._batches += 1
            if self.temperature > 0:
                torch.manual_seed(self.seed * 1_000_003 + self._batches)
            out = model.generate(
                **inputs,
                max_new_tokens=self.max_new_tokens,
                pad_token_id=pad,
                eos_token_id=sorted(stops),
                output_scores=True,
                return_dict_in_generate=True,
                **sampling,
            )
            # scores are the processed logits sampling drew from (temperature applied): their log-softmax
            # is the sampled token's logprob under that distribution
            scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        results = []
        for row, row_scores in zip(out.sequences[:, width:].tolist(), scores.tolist()):
            ids: list[int] = []
            for token in row:
                ids.append(token)
                if token in stops:
                    break
            results.append((ids, [float(s) for s in row_scores[: len(ids)]]))
        return results

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None
            self._queue = None


def _render(tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], **kw: Any) -> str:
    from campflow.agents.chat import template_messages

    try:
        return tokenizer.apply_chat_template(
            template_messages(list(messages), strict=False),
            tools=list(tools) or None,
            add_generation_prompt=kw["generation_prompt"],
            tokenize=False,
        )
    except Exception as exc:  # noqa: BLE001  (jinja raises its own kinds for a message it cannot render)
        raise ProxyError(f"messages: the chat template cannot render them: {exc}", param="messages") from None


def _stop_ids(tokenizer: Any, generation_config: Any) -> set[int]:
    stops = {tokenizer.eos_token_id}
    configured = getattr(generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        stops.add(configured)
    elif configured:
        stops.update(configured)
    return {s for s in stops if s is not None}


def _reply_end(tokenizer: Any, rendered: str, gen: Generation) -> int | None:
    """Where the model's reply ends in ``rendered`` (a conversation ending with that reply): after its
    stop token's text when it sampled one, else before the template's end-of-turn text."""
    ids = gen.completion_ids or []
    last = tokenizer.decode([ids[-1]]) if ids else ""
    if gen.finish_reason != "length" and last and last in rendered:
        return rendered.rfind(last) + len(last)
    eos = tokenizer.eos_token or ""
    at = rendered.rfind(eos) if eos else -1
    return at if at >= 0 else None
