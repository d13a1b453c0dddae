"""Batches of vision SFT rows with their tools: TRL's vision collator, one row at a time.

TRL's ``DataCollatorForVisionLanguageModeling`` renders a batch of conversations in one call of the
processor's chat template, without a ``tools`` argument: the tool schemas (the ``tools`` column) never
reach the rendered text, so a VLM would train on prompts without the tool block that every rollout and
evaluation shows it. This collator renders each row with its own tools (rows of different bootcamps
have different tools), through the same processor and training template (assistant-only loss from its
generation markers), and pads the rows into one batch, their images in row order.
"""

from __future__ import annotations

import json
from typing import Any


class VisionToolsCollator:
    """Collate SFT rows with ``messages``, ``images`` and ``tools`` for a vision-language model.

    Args:
        processor: the model's processor.
        chat_template: the training template (TRL's, with ``{% generation %}`` markers).
        max_length: the longest row in tokens; longer rows are refused (cutting one would cut image tokens).
    """

    def __init__(self, processor: Any, chat_template: str | None, max_length: int | None = None) -> None:
        self.processor, self.chat_template, self.max_length = processor, chat_template, max_length

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch
        from trl.data_utils import prepare_multimodal_messages

        rows = []
        for example in examples:
            tools = example.get("tools")
            out = self.processor.apply_chat_template(
                prepare_multimodal_messages(example["messages"], images=example.get("images") or []),
                tools=json.loads(tools) if isinstance(tools, str) else tools,
                chat_template=self.chat_template,
                tokenize=True,
                return_dict=True,
                return_tensors="pt",
                return_assistant_tokens_mask=True,
                processor_kwargs={"add_special_tokens": False},
            )
            if self.max_length is not None and out["input_ids"].shape[1] > self.max_length:
                raise ValueError(
                    f"an SFT row of {out['input_ids'].shape[1]} tokens exceeds max_length {self.max_length}; "
                    "lower training.filter.max_chars or raise the model's max_positions"
                )
            rows.append(out)
        width = max(r["input_ids"].shape[1] for r in rows)
        pad = self.processor.tokenizer.pad_token_id

        def padded(key: str, value: int) -> Any:
            return torch.cat([torch.nn.functional.pad(r[key], (0, width - r[key].shape[1]), value=value) for r in rows])

        batch = {"input_ids": padded("input_ids", pad), "attention_mask": padded("attention_mask", 0)}
        if all("mm_token_type_ids" in r for r in rows):
            batch["mm_token_type_ids"] = padded("mm_token_type_ids", 0)
        masks = torch.cat(
            [
                torch.nn.functional.pad(
                    torch.as_tensor(r["assistant_masks"]).reshape(1, -1), (0, width - r["input_ids"].shape[1])
                )
                for r in rows
            ]
        )
        labels = batch["input_ids"].clone()
        labels[(batch["attention_mask"] == 0) | (masks == 0)] = -100
        batch["labels"] = labels
        with_images = [r for r in rows if "pixel_values" in r]
        if with_images:
            batch["pixel_values"] = torch.cat([r["pixel_values"] for r in with_images])
            batch["image_grid_thw"] = torch.cat([r["image_grid_thw"] for r in with_images])
        return batch
