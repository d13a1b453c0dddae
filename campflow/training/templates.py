"""Whether TRL can train a model with its own chat template, checked before training starts.

TRL picks its handling from the template's exact text: SFT swaps in a training template with
generation markers (assistant-only loss) for the templates it knows, GRPO adds the response parser
that reads the model's tool calls. A template it does not know fails deep inside the trainer's
constructor; here it is one line naming the model folder and what TRL needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from campflow.errors import CampflowError


class UnsupportedTemplateError(CampflowError):
    """A model's chat template that TRL cannot train with (no training template, no response parser)."""

    exit_code = 2


def check_sft_template(tokenizer: Any, path: str | Path) -> None:
    """Raise :class:`UnsupportedTemplateError` unless TRL can mask assistant turns with ``tokenizer``'s template."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = tokenizer.chat_template
    if not template:
        raise UnsupportedTemplateError(f"{path}: the tokenizer has no chat template; SFT on conversations needs one")
    if has_generation_markers(template):
        return
    try:
        get_training_chat_template(tokenizer)
    except ValueError:
        raise UnsupportedTemplateError(
            f"{path}: TRL has no training version of this chat template (assistant-only loss needs "
            "{% generation %} markers); use a model whose template TRL ships (Qwen2.5, Qwen3, Llama 3, ...) or "
            "add the markers to chat_template.jinja"
        ) from None


def check_rl_template(tokenizer: Any, path: str | Path) -> None:
    """Raise :class:`UnsupportedTemplateError` unless TRL can parse tool calls in ``tokenizer``'s template
    (adds TRL's response parser to ``tokenizer``, as GRPOTrainer would)."""
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    if not supports_tool_calling(tokenizer):
        raise UnsupportedTemplateError(
            f"{path}: the chat template cannot render tool calls and tool results, "
            "which RL with bootcamps as environments needs"
        )
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)
        except ValueError:
            raise UnsupportedTemplateError(
                f"{path}: TRL has no response parser for this chat template, so GRPO cannot read the model's "
                "tool calls; use a template TRL knows (Qwen2.5, Qwen3, Llama 3.1/3.2, ...) or set the tokenizer's "
                "response_template"
            ) from None
