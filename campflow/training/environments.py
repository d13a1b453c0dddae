"""Bootcamps as TRL environments, for ``GRPOTrainer(environment_factory=...)``.

TRL's contract: an environment instance has ``reset(**row)`` (called with the dataset row before each
rollout; a returned string is appended to the prompt's last user message), public methods that are
its tools (typed parameters and Google-style docstrings, from which transformers builds the tool
schema), and ``get_reward()``, called once per finished rollout. Here:

- the dataset row names a train-split instance (bootcamp, params, seed); ``reset`` rebuilds it and
  returns its user prompt, so synthesized variants train exactly like generated instances;
- each bootcamp tool becomes a method whose signature is the tool's argument model, so the schema TRL
  renders equals :meth:`campflow.bootcamps.base.Tool.schema` (checked in the tests) and the model sees
  the same prompt in RL as in SFT and evaluation;
- tool errors come back as ``Error: ...`` text, exactly as the rollout engine words them;
- ``get_reward`` is the bootcamp's reward layer;
- for a vision-language model (``images=True``) the prompt and tool results keep their images, as
  ``{"type": "image", "image": PIL}`` parts TRL passes to the processor; otherwise only their text. A
  tool's image comes after its result and the engine's note ("Image returned by call call_N_0:"), and
  campflow's GRPO trainer renders the two in a user message after the tool turn, as the engine sends them
  (:func:`campflow.training.rl.as_evaluated`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from campflow.agents.vision import image_urls, vision_conversation
from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp, Tool, format_validation_error
from campflow.bootcamps.messages import content_text
from campflow.errors import ToolError
from campflow.rollout.engine import image_note


class BootcampEnvironment:
    """Base of the generated environment classes: one episode of one bootcamp at a time."""

    bootcamp: Bootcamp
    images: bool = False

    def __init__(self) -> None:
        self.instance: Any = None
        self.state: Any = None
        self.calls = 0

    def reset(self, **row: Any) -> str | list[dict[str, Any]]:
        """Start an episode of the row's instance; returns its user prompt (appended to the row's prompt):
        text, or text and image parts for a vision-language model."""
        params, seed = row.get("params"), row.get("seed")
        if params is None or seed is None:
            raise ValueError(
                f"a {self.bootcamp.name} training row needs `params` and `seed` columns, got {sorted(row)}"
            )
        self.instance = self.bootcamp.generate(json.loads(params) if isinstance(params, str) else params, int(seed))
        if row.get("instance_id") and row["instance_id"] != self.instance.id:
            raise ValueError(f"row instance {row['instance_id']} regenerated as {self.instance.id}")
        self.state = self.bootcamp.new_state(self.instance)
        self.calls = 0  # tools run this episode
        content = self.bootcamp.prompt(self.instance)[-1]["content"]
        if self.images and isinstance(content, list) and image_urls([{"role": "user", "content": content}]):
            return vision_conversation([{"role": "user", "content": content}])[0]["content"]
        return content_text(content)

    def get_reward(self) -> float:
        """The bootcamp's reward for the episode so far."""
        if self.instance is None:
            return 0.0
        return float(self.bootcamp.score(self.instance, self.state, ()).reward)

    def _call(self, tool: Tool, arguments: dict[str, Any]) -> str | list[dict[str, Any]]:
        self.calls += 1  # refused calls too: the engine numbers calls by turn, one call a turn here
        if self.state is None:
            return "Error: the episode has not started."
        if self.state.finished:
            return "Error: the episode has already ended."
        try:
            args = tool.args_model.model_validate(arguments)
            obs = self.bootcamp.call(self.instance, self.state, tool.name, args)
        except ValidationError as exc:
            return f"Error: invalid arguments for {tool.name}: {format_validation_error(exc)}"
        except ToolError as exc:
            return f"Error: {exc}"
        if obs.final:
            self.state.finished = True
        if self.images and obs.image is not None:
            # the engine's call id for a one-call turn; EpisodeGRPOTrainer moves the note and the image
            # into a user message after the tool result, as the engine sends them
            note = image_note(f"call_{self.calls - 1}_0")
            return [
                {"type": "text", "text": obs.text},
                {"type": "text", "text": note},
                {"type": "image", "image": png_image(obs.image)},
            ]
        return obs.text


def _tool_method(tool: Tool) -> Callable[..., Any]:
    """A method named after ``tool`` whose signature and docstring describe its arguments."""
    fields = tool.args_model.model_fields

    def method(self: BootcampEnvironment, **kwargs: Any) -> Any:
        return self._call(tool, kwargs)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for name, field in fields.items():
        default = inspect.Parameter.empty if field.is_required() else field.default
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=field.annotation)
        )
    method.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    method.__annotations__ = {name: field.annotation for name, field in fields.items()}
    doc = tool.description
    if fields:
        doc += "\n\nArgs:\n" + "\n".join(
            f"    {n}: {' '.join((f.description or n).split())}" for n, f in fields.items()
        )
    method.__doc__ = doc
    method.__name__ = method.__qualname__ = tool.name
    return method


def environment_class(name: str, *, images: bool = False) -> type[BootcampEnvironment]:
    """A TRL environment class for bootcamp ``name`` (its tools as methods); ``images``: it returns images."""
    bootcamp = registry.make(name)
    instance = bootcamp.generate(None, 0)
    members: dict[str, Any] = {
        "bootcamp": bootcamp,
        "images": images,
        "__doc__": f"The {name} bootcamp as a TRL environment.",
    }
    for tool in bootcamp.tools(instance):
        if tool.name in ("reset", "get_reward") or tool.name.startswith("_"):
            raise ValueError(f"{name} tool {tool.name!r} clashes with TRL's environment interface")
        members[tool.name] = _tool_method(tool)
    return type(f"{name.title().replace('-', '').replace('_', '')}Environment", (BootcampEnvironment,), members)


def rendered_tools(environment: type[BootcampEnvironment], tools: list[Any]) -> list[Any]:
    """``tools`` (TRL's list for ``environment``: its methods) with each of the environment's tool methods
    replaced by the bootcamp's own schema, in the same order.

    TRL renders a method through transformers' ``get_json_schema``, which cannot carry an argument's
    bounds, lengths or pattern; the bootcamp's schema (:meth:`campflow.bootcamps.base.Tool.schema`) does,
    and it is what evaluation and SFT render, so RL prompts say the same."""
    bootcamp = environment.bootcamp
    schemas = {s["function"]["name"]: s for s in bootcamp.tool_schemas(bootcamp.generate(None, 0))}
    return [schemas.get(getattr(t, "__name__", None), t) if callable(t) else t for t in tools]


def environment_factories(names: list[str], *, images: bool = False) -> dict[str, type[BootcampEnvironment]]:
    """``{bootcamp: environment class}``; TRL calls each class to make an instance per rollout. ``images``
    (a vision-language model): the environments return the images of vision bootcamps."""
    return {name: environment_class(name, images=images) for name in names}


def png_image(png: bytes) -> Any:
    """A PNG as an RGB PIL image."""
    import io

    from PIL import Image

    return Image.open(io.BytesIO(png)).convert("RGB")
