"""Vision-language models in-process: what a model folder can see, its processor, and images as it reads them.

A model folder holds a vision-language model when its ``config.json`` has a ``vision_config`` (Qwen2.5-VL,
Qwen3-VL, the embedded tiny VLM, ...; an adapter folder answers for its base). Such a model reads the
images of vision bootcamps; every other model gets their text observation mode instead
(:func:`observation_mode`), so the choice follows the model and is never made by hand.

The processor is transformers' own (``AutoProcessor``). Qwen-VL processors also carry a video processor,
which needs torchvision; where torchvision is missing (the CPU default), :func:`load_processor` builds the
same processor without its video half (:class:`ImageOnlyQwen3VLProcessor`): images and text only, the
same tokens, the same image processing.

Images travel as PNG data URLs in transcripts (OpenAI ``image_url`` parts); :func:`pil_image` decodes
one (cached: a conversation sends its earlier images again every turn).
"""

from __future__ import annotations

import base64
import functools
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from campflow.errors import PolicyError

ObservationMode = Literal["image", "text"]
# Qwen-VL's vision tokens, in the order the embedded VLM's tokenizer adds them.
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def is_vision_model(path: str | Path) -> bool:
    """Whether the model (or adapter) folder at ``path`` holds a vision-language model (reads JSON only)."""
    folder = Path(path)
    adapter = folder / "adapter_config.json"
    if adapter.exists():
        folder = Path(json.loads(adapter.read_text())["base_model_name_or_path"])
    config = folder / "config.json"
    if not config.exists():
        return False
    return "vision_config" in json.loads(config.read_text())


def observation_mode(setting: str, policy_kind: str, model: str | None) -> ObservationMode | None:
    """The observation mode vision bootcamps use for a policy: ``setting`` when it is ``image`` or
    ``text``; for ``auto``, ``image`` for a local vision-language model and for endpoints (which send
    image parts), ``text`` for a local text-only model, and None (each level's own) for the oracles."""
    if setting in ("image", "text"):
        return setting  # type: ignore[return-value]
    if policy_kind == "local" and model:
        return "image" if is_vision_model(model) else "text"
    if policy_kind == "openai":
        return "image"
    return None


def _qwen3_vl_processor_class() -> type:
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
        """Qwen3-VL's processor without the video processor (which needs torchvision): saved and
        reloaded as a ``Qwen3VLProcessor``, so a machine with torchvision loads the folder as usual."""

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None, **kwargs):
            self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
            self.vision_start_token, self.vision_end_token = "<|vision_start|>", "<|vision_end|>"
            self.vision_start_token_id = tokenizer.convert_tokens_to_ids(self.vision_start_token)
            self.vision_end_token_id = tokenizer.convert_tokens_to_ids(self.vision_end_token)

        def to_dict(self) -> dict[str, Any]:
            out = super().to_dict()
            out["processor_class"] = "Qwen3VLProcessor"
            return out

    return ImageOnlyQwen3VLProcessor


@functools.cache
def image_only_processor_class() -> type:
    """:class:`ImageOnlyQwen3VLProcessor` (defined on first use: it subclasses a transformers class)."""
    return _qwen3_vl_processor_class()


def image_only_processor(image_processor: Any, tokenizer: Any, chat_template: str | None = None) -> Any:
    """A Qwen3-VL processor of ``image_processor`` and ``tokenizer``, without a video processor."""
    return image_only_processor_class()(image_processor, tokenizer, chat_template=chat_template)


def load_processor(path: str | Path) -> Any:
    """The processor of the vision-language model at ``path`` (an adapter folder: its base's).

    Raises:
        PolicyError: the folder has no processor files.
    """
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    folder = str(path)
    adapter = Path(folder) / "adapter_config.json"
    if adapter.exists() and not (Path(folder) / "processor_config.json").exists():
        folder = json.loads(adapter.read_text())["base_model_name_or_path"]
    try:
        return AutoProcessor.from_pretrained(folder)
    except (ImportError, AttributeError, ValueError, TypeError, OSError):
        pass  # e.g. a video processor that needs torchvision: build the image half alone
    model_type = json.loads((Path(folder) / "config.json").read_text()).get("model_type")
    if model_type not in ("qwen3_vl", "qwen2_5_vl", "qwen2_vl"):
        raise PolicyError(
            f"cannot load the processor of the {model_type} model at {folder} (is torchvision installed?)"
        )
    try:
        image_processor = AutoImageProcessor.from_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except OSError as exc:
        raise PolicyError(f"{folder} has no image processor or tokenizer files: {exc}") from None
    return image_only_processor(image_processor, tokenizer, tokenizer.chat_template)


def save_processor(processor: Any, out: str | Path) -> None:
    """Save ``processor`` (tokenizer, image processor, chat template) to ``out`` as a Qwen-VL processor."""
    processor.save_pretrained(str(out))
    tokenizer_config = Path(out) / "tokenizer_config.json"
    if tokenizer_config.exists():  # name the class transformers knows, as the processor config does
        data = json.loads(tokenizer_config.read_text())
        if "ImageOnly" in str(data.get("processor_class")):
            data["processor_class"] = "Qwen3VLProcessor"
            tokenizer_config.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


@functools.lru_cache(maxsize=1024)  # ~0.2 MB a frame: the images of the episodes in flight
def pil_image(url: str) -> Any:
    """The RGB image of a ``data:image/...;base64,`` URL.

    Raises:
        PolicyError: not a base64 data URL of an image.
    """
    from PIL import Image, UnidentifiedImageError

    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:image/") or not head.endswith(";base64"):
        raise PolicyError(f"image {url[:40]!r}...: expected a data:image/...;base64 URL")
    try:
        return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
    except (ValueError, UnidentifiedImageError) as exc:
        raise PolicyError(f"image {url[:40]!r}... does not decode: {exc}") from None


def image_urls(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The data URLs of every ``image_url`` part of ``messages`` (assistant turns aside), in order."""
    out = []
    for message in messages:
        if message.get("role") == "assistant":
            continue
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    image = part.get("image_url")
                    out.append(image.get("url", "") if isinstance(image, dict) else str(image))
    return out


def png_bytes(url: str) -> bytes:
    """The PNG bytes of a data URL (as datasets store images)."""
    return base64.b64decode(url.partition(",")[2])


def vision_conversation(messages: Sequence[dict[str, Any]], *, strict: bool = False) -> list[dict[str, Any]]:
    """``messages`` (OpenAI format) as a processor renders them: images as ``{"type": "image", "image": PIL}``."""
    from campflow.agents.chat import template_messages

    out = template_messages(messages, strict=strict, images=True)
    urls = iter(image_urls(messages))
    for message in out:
        if isinstance(message.get("content"), list):
            for part in message["content"]:
                if part.get("type") == "image":
                    part["image"] = pil_image(next(urls))
    return out


def encode_conversation(processor: Any, messages: Sequence[dict[str, Any]], tools: Sequence[dict] | None) -> dict:
    """One prompt through ``processor``: ``input_ids`` (a list) and, when it has images, the tensors the
    model reads with them (``pixel_values``, ``image_grid_thw``, ``mm_token_type_ids``)."""
    encoded = processor.apply_chat_template(
        vision_conversation(messages),
        tools=list(tools) if tools else None,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    out = {k: v for k, v in encoded.items() if k != "attention_mask"}
    out["input_ids"] = encoded["input_ids"][0].tolist()
    if "mm_token_type_ids" in out:
        out["mm_token_type_ids"] = out["mm_token_type_ids"][0].tolist()
    return out


def collate(prompts: Sequence[dict], pad_id: int, device: Any) -> dict[str, Any]:
    """Left-padded batch tensors of :func:`encode_conversation` outputs, their images in row order."""
    import torch

    width = max(len(p["input_ids"]) for p in prompts)
    batch: dict[str, Any] = {
        "input_ids": torch.tensor([[pad_id] * (width - len(p["input_ids"])) + p["input_ids"] for p in prompts]),
        "attention_mask": torch.tensor(
            [[0] * (width - len(p["input_ids"])) + [1] * len(p["input_ids"]) for p in prompts]
        ),
    }
    if all("mm_token_type_ids" in p for p in prompts):
        batch["mm_token_type_ids"] = torch.tensor(
            [[0] * (width - len(p["mm_token_type_ids"])) + p["mm_token_type_ids"] for p in prompts]
        )
    with_images = [p for p in prompts if "pixel_values" in p]
    if with_images:
        batch["pixel_values"] = torch.cat([p["pixel_values"] for p in with_images])
        batch["image_grid_thw"] = torch.cat([p["image_grid_thw"] for p in with_images])
    return {k: v.to(device) for k, v in batch.items()}


def with_observation(cfg: Any, model_path: str | Path) -> Any:
    """``cfg`` (a :class:`~campflow.config.CampflowConfig`) with ``rollout.observation`` fixed for the model
    at ``model_path`` where it is ``auto``, so every step of a cycle (the teacher's included) draws
    instances in the mode that model reads."""
    if cfg.rollout.observation != "auto":
        return cfg
    out = cfg.model_copy(deep=True)
    out.rollout.observation = "image" if is_vision_model(model_path) else "text"
    return out
