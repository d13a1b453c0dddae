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

A served bootcamp (an MCP server as its tools, :class:`~campflow.bootcamps.served.ServedTools`) becomes a
:class:`ServedEnvironment`: ``reset`` starts a fresh server for the episode (a new stdio process in a
fresh folder, or the URL server's reset call) and the prompt names the episode's folder; the tools are
the server's, each call sent to it through the bootcamp's own client (:meth:`~ServedTools.call_served`);
``get_reward`` reads the final server state (:meth:`~ServedTools.conclude`), scores it and stops the
server. TRL steps an environment from synchronous code, so the episode is held open on an event loop of
its own thread (:class:`~campflow.bootcamps.served.HeldEpisode`); a server still running when the next
``reset`` comes, or when the process ends (however it ends), is stopped. A server that fails mid-episode
(crash, hang past its ``call_timeout``) ends the rollout: the model reads ``Error: the tool server
failed ...``, later calls ``Error: the episode has already ended.``, and the rollout scores 0 (a line says so).
A URL server (one shared state, reset per episode) is refused: TRL plays a batch's rollouts side by side.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from campflow import progress
from campflow.agents.vision import image_urls, vision_conversation
from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp, Instance, Observation, Tool, ToolArgs, format_validation_error
from campflow.bootcamps.messages import content_text
from campflow.bootcamps.served import HeldEpisode, ServedTools
from campflow.errors import ConfigError, ToolError, ToolServerError
from campflow.rollout.engine import image_note

# TRL's interface and the environments' own attributes: a tool of one of these names would hide them
RESERVED = frozenset({"reset", "get_reward", "bootcamp", "images", "instance", "state", "calls", "held", "failure"})


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
        self.instance = self._row_instance(row)
        self.state = self.bootcamp.new_state(self.instance)
        self.calls = 0  # tools run this episode
        return self._user_content(self.bootcamp.prompt(self.instance))

    def _row_instance(self, row: dict[str, Any]) -> Instance:
        params, seed = row.get("params"), row.get("seed")
        if params is None or seed is None:
            raise ValueError(
                f"a {self.bootcamp.name} training row needs `params` and `seed` columns, got {sorted(row)}"
            )
        instance = self.bootcamp.generate(json.loads(params) if isinstance(params, str) else params, int(seed))
        if row.get("instance_id") and row["instance_id"] != instance.id:
            raise ValueError(f"row instance {row['instance_id']} regenerated as {instance.id}")
        return instance

    def _user_content(self, messages: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        content = messages[-1]["content"]
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
            obs = self._execute(tool, args)
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

    def _execute(self, tool: Tool, args: ToolArgs) -> Observation:
        return self.bootcamp.call(self.instance, self.state, tool.name, args)


class ServedEnvironment(BootcampEnvironment):
    """Base of the environment classes of served bootcamps: a fresh tool server per episode (module docstring)."""

    bootcamp: Any  # a ServedTools bootcamp

    def __init__(self) -> None:
        super().__init__()
        self.held: HeldEpisode | None = None
        self.failure: str | None = None  # the server's failure that ended this episode, if one did

    def reset(self, **row: Any) -> str | list[dict[str, Any]]:
        """Stop the last episode's server if it still runs, start a fresh one for the row's instance; returns
        the user prompt (naming the episode's folder where the task does).

        Raises:
            ToolServerError: the server would not start.
        """
        self._close()
        self.instance = self._row_instance(row)
        self.calls, self.failure = 0, None
        self.held = HeldEpisode(self.bootcamp, self.instance)
        self.state = self.held.state
        bootcamp, instance = self.bootcamp, self.instance

        async def prompt(state: Any) -> list[dict[str, Any]]:  # inside the episode: its folder is known
            return bootcamp.prompt(instance)

        return self._user_content(self.held.run(prompt))

    def _execute(self, tool: Tool, args: ToolArgs) -> Observation:
        bootcamp, instance = self.bootcamp, self.instance

        async def call(state: Any) -> Observation:
            return await bootcamp.call_served(instance, state, tool.name, args)

        if self.held is None or not self.held.open:
            raise ToolError("the episode has already ended.")
        try:
            return self.held.run(call)
        except ToolServerError as exc:
            self._fail(str(exc))
            raise ToolError(f"the tool server failed, and the episode ends: {exc}") from None

    def get_reward(self) -> float:
        """Read the final server state, score the episode and stop its server (0 when the server failed)."""
        if self.instance is None:
            return 0.0
        if self.held is not None and self.held.open and self.failure is None:
            bootcamp, instance = self.bootcamp, self.instance

            async def conclude(state: Any) -> float:
                await bootcamp.conclude(instance, state)
                return float(bootcamp.score(instance, state, ()).reward)

            try:
                return self.held.run(conclude)
            except ToolServerError as exc:
                self._fail(f"reading the final server state failed: {exc}")
            finally:
                self._close()
        return 0.0

    def _fail(self, why: str) -> None:
        self.failure = why
        self.state.finished = True  # later calls: "the episode has already ended"
        self._close()
        progress.current().note(f"RL rollout of {self.instance.id} scores 0: {why}")

    def _close(self) -> None:  # not a tool: TRL takes every public method for one
        """Stop the episode's server, if one runs."""
        if self.held is not None:
            self.held.close()
            self.held = None

    def __del__(self) -> None:
        if not sys.is_finalizing():  # at exit the episode's thread may never run again; the guard stops the server
            self._close()


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
    base = ServedEnvironment if isinstance(bootcamp, ServedTools) else BootcampEnvironment
    shared = bootcamp.shared_server(instance) if isinstance(bootcamp, ServedTools) else None
    if shared is not None:  # TRL resets a batch's environments, then plays their rollouts side by side
        raise ConfigError(
            f"{name}: GRPO plays several rollouts at once, and every episode of the server {shared} shares its one "
            "state; serve it from a command (a fresh process per episode) to train on it with RL"
        )
    members: dict[str, Any] = {
        "bootcamp": bootcamp,
        "images": images,
        "__doc__": f"The {name} bootcamp as a TRL environment.",
    }
    for tool in bootcamp.tools(instance):
        if tool.name in RESERVED or tool.name.startswith("_"):
            raise ValueError(f"{name} tool {tool.name!r} clashes with TRL's environment interface")
        members[tool.name] = _tool_method(tool)
    return type(f"{name.title().replace('-', '').replace('_', '')}Environment", (base,), members)


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
