"""Which chat format a model speaks, read from its own chat template (never assumed to be the embedded one).

TRL recognizes templates by their exact text (Qwen2.5, Qwen3, Llama 3.1/3.2, ...) and picks its
response parser and its training template (generation markers for assistant-only loss) from that;
campflow reads the same text to pick how a local model's reply becomes tool calls:

- ``text`` calls (Qwen2.5, Qwen3 and every template that writes ``<tool_call>`` JSON blocks, the
  Hermes format): the reply goes to the engine as text and the engine's parser reads the blocks (and a
  leading ``<think>`` block), with its precise messages for a malformed call;
- ``parsed`` calls (Llama 3.1/3.2, whose call is a bare ``{"name": ..., "parameters": ...}`` object):
  TRL's response template for the model parses the reply into native tool calls.

``thinking`` says whether the template renders reasoning (``<think>`` blocks, ``reasoning_content``);
for such a model earlier turns' reasoning goes back to it, and the template decides where it shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class ChatFormat:
    """How a model's chat template writes tool calls and reasoning.

    Attributes:
        family: ``qwen2.5``, ``qwen3``, ``qwen3-instruct``, ``qwen3-vl``, ``qwen2.5-vl``, ``llama3`` (TRL's
            templates, matched by text)
            or ``hermes`` (another template that writes ``<tool_call>`` blocks) or ``unknown``.
        tool_calls: ``text`` (the engine parses ``<tool_call>`` blocks) or ``parsed`` (TRL's response
            template turns the reply into native calls).
        thinking: whether the template renders reasoning.
    """

    family: str
    tool_calls: Literal["text", "parsed"]
    thinking: bool


def chat_format(chat_template: str | dict[str, str] | None) -> ChatFormat:
    """The :class:`ChatFormat` of a chat template (a tokenizer's ``chat_template``)."""
    from trl import chat_template_utils as t

    if isinstance(chat_template, dict):  # templates shipped as named variants: TRL reads the default
        chat_template = chat_template.get("default")
    text = chat_template or ""
    known = {
        t.qwen2_5_chat_template: ChatFormat("qwen2.5", "text", False),
        t.qwen3_chat_template: ChatFormat("qwen3", "text", True),
        t.qwen3_instruct_2507_chat_template: ChatFormat("qwen3-instruct", "text", False),
        t.qwen3_vl_chat_template: ChatFormat("qwen3-vl", "text", False),
        t.qwen2_5_vl_chat_template: ChatFormat("qwen2.5-vl", "text", False),
        t.llama3_1_chat_template: ChatFormat("llama3", "parsed", False),
        t.llama3_2_chat_template: ChatFormat("llama3", "parsed", False),
    }
    if text in known:
        return known[text]
    if "<tool_call>" in text:
        return ChatFormat("hermes", "text", "<think>" in text or "reasoning_content" in text)
    return ChatFormat("unknown", "text", "<think>" in text)


def parse_reply(tokenizer: Any, text: str, prompt: str, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A reply of a ``parsed``-format model as ``{"content", "tool_calls", "reasoning"}``, tool calls in
    the OpenAI shape (arguments as a JSON string), through TRL's response template for the tokenizer.

    ``text`` is the reply with its end-of-turn token; ``prompt`` the rendered prompt before it (templates
    may pre-write part of the reply). A reply the template cannot parse comes back as plain content, for
    the engine to count as the model's format error.
    """
    from trl.chat_template_utils import add_response_schema, parse_response

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    prefix = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    parsed = parse_response(tokenizer, ids, prefix=prefix, tools=tools)
    # no ids: the engine numbers calls by turn, so they are unique in the conversation
    calls = [
        {
            "type": "function",
            "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])},
        }
        for c in parsed.get("tool_calls") or []
    ]
    return {
        "content": parsed.get("content") or "",
        "tool_calls": calls or None,
        "reasoning": parsed.get("reasoning_content") or None,
    }
