"""The demonstrator behind the proxy: a teacher that answers a user's agent in the model's own tokens.

To teach a model inside the agent that will run it, the teacher's replies must sit in the context that
agent really builds: its own system prompt, its own tool wrappers, its own way of sending results back.
:class:`DemonstratorBackend` answers each call of an episode with the bootcamp's grounded demonstrator's
next action (:meth:`~campflow.bootcamps.base.Bootcamp.demonstrate`), written as the reply to the agent's
actual request: the proxy holds the request, and the world is rebuilt from it (the tool calls the
conversation holds, replayed on a fresh state of the episode's instance, as the episode's MCP session
played them; a call the world refused is left out, as it changed nothing).

The reply's ids are the model's: the prompt is rendered with the model's chat template once (and
continues the episode's earlier calls as :class:`~campflow.proxy.local.LocalBackend` does), and the
reply is the template's rendering of the demonstrator's tool call, tokenized once, through the first stop
id. They are recorded as trainable with a logprob of 0 for each id: SFT labels them like the model's own
replies, while RL never sees them (RL plays the live model).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from campflow.bootcamps.base import Action, Bootcamp, Instance
from campflow.proxy.backends import CURRENT_EPISODE, ChatRequest, Generation, ProxyError, ServedCall
from campflow.proxy.local import LocalBackend, _render
from campflow.serialization import from_json

MODEL_ID = "demonstrator"


class DemonstratorBackend(LocalBackend):
    """The grounded demonstrator answering in the tokens of the model at ``path`` (its tokenizer and template).

    Args:
        path: the model whose chat template and tokenizer the replies are written in.
        device / precision: as for :class:`LocalBackend` (the model is loaded for its tokenizer only).

    Episodes are made known with :meth:`watch` before their agent starts (the runner does it).
    """

    kind = "demonstrator"

    def __init__(self, path: str | Path, *, device: str = "auto", precision: str = "auto") -> None:
        super().__init__(path, model_id=MODEL_ID, model_names=[MODEL_ID], device=device, precision=precision)
        self._episodes: dict[str, tuple[Bootcamp, Instance]] = {}

    def watch(self, episode_id: str, bootcamp: Bootcamp, instance: Instance) -> None:
        """Answer the calls of ``episode_id`` as the demonstrator of ``instance``."""
        self._episodes[episode_id] = (bootcamp, instance)

    def forget(self, episode_id: str) -> None:
        """The episode is over: its task is no longer kept."""
        self._episodes.pop(episode_id, None)

    @property
    def applied_sampling(self) -> dict[str, Any]:
        return {"demonstrator": True}

    async def generate(self, request: ChatRequest, history: Sequence[ServedCall]) -> Generation:
        episode_id = CURRENT_EPISODE.get()
        found = self._episodes.get(episode_id or "")
        if found is None:
            raise ProxyError(
                f"episode {episode_id!r}: the demonstrator was given no task for it",
                status=500,
                kind="server_error",
                code="no_task",
            )
        bootcamp, instance = found
        tokenizer = await asyncio.to_thread(self.tokenizer)
        prompt, text, continued = await asyncio.to_thread(self.prompt_ids, request, history)
        action = await asyncio.to_thread(_next_action, bootcamp, instance, request.messages)
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        reply = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"call_{turn}",
                    "type": "function",
                    "function": {"name": action.name, "arguments": json.dumps(dict(action.arguments))},
                }
            ],
        }
        full = _render(tokenizer, [*request.messages, reply], request.tools, generation_prompt=False)
        if not full.startswith(text):
            raise ProxyError(
                "messages: the chat template renders the conversation differently once a reply follows it",
                status=500,
                kind="server_error",
                code="template_mismatch",
            )
        ids = tokenizer(full[len(text) :], add_special_tokens=False)["input_ids"]
        stops = self.stop_ids()
        end = next((i for i, t in enumerate(ids) if t in stops), None)
        completion = list(ids if end is None else ids[: end + 1])
        stopped = end is not None
        generated = completion[:-1] if stopped else completion
        message = self.reply_message(tokenizer, generated, request, stopped=stopped, prompt_text=text)
        return Generation(
            message=message,
            finish_reason="tool_calls" if message.get("tool_calls") else ("stop" if stopped else "length"),
            prompt_ids=prompt,
            completion_ids=completion,
            logprobs=[0.0] * len(completion),
            applied_sampling=self.applied_sampling,
            prompt_tokens=len(prompt),
            completion_tokens=len(completion),
            continued_from=continued,
            prompt_text=text,
        )


def _next_action(bootcamp: Bootcamp, instance: Instance, messages: Sequence[dict[str, Any]]) -> Action:
    """The demonstrator's next action after the tool calls ``messages`` hold, replayed on a fresh state."""
    state = bootcamp.new_state(instance)
    for m in messages:
        for call in m.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = function.get("arguments") or "{}"
                arguments = from_json(arguments) if isinstance(arguments, str) else arguments
                bootcamp.apply(instance, state, Action(function.get("name", ""), arguments))
            except Exception:  # noqa: BLE001, S112  (a call the world refused changed nothing)
                continue
    try:
        return bootcamp.demonstrate(instance, state, list(messages))
    except Exception as exc:  # noqa: BLE001  (the agent's request stays answered with a clear error)
        raise ProxyError(
            f"the demonstrator of {instance.id} could not act: {type(exc).__name__}: {exc}",
            status=500,
            kind="server_error",
            code="demonstrator_failed",
        ) from None
