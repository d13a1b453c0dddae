"""A bootcamp as an OpenEnv environment: train-split instances on reset, the engine's rules on step.

The OpenEnv server (``openenv.core.env_server``) makes one :class:`BootcampEnvironment` per client
session and calls ``reset`` and ``step`` on it. Here:

- ``reset`` draws a train-split instance from a :class:`TrainStream` (deterministic from a seed, never
  an eval or probe instance) and answers with its prompt and tool schemas;
- ``step`` plays one agent turn -- a tool call, or text with Qwen-style ``<tool_call>`` blocks, or a
  reply without a call -- through the rollout engine (:class:`campflow.rollout.stepped.SteppedEpisode`),
  so a bad call gets the engine's ``Error: ...`` as its observation and ends the episode only where the
  engine would (``rollout.max_consecutive_errors`` unusable turns, the turn budget);
- ``reward`` is 0 until the episode ends, then the bootcamp's score; ``done`` is the engine's ending.
"""

from __future__ import annotations

import json
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from campflow.agents.base import PolicyReply
from campflow.bootcamps.base import Bootcamp
from campflow.bootcamps.messages import content_text
from campflow.envserve.stream import TrainStream
from campflow.errors import InvalidParamsError
from campflow.rollout.engine import RolloutSettings
from campflow.rollout.stepped import SteppedEpisode, Turn


class BootcampAction(Action):
    """One turn of the agent: a tool call, or text (which may hold ``<tool_call>`` blocks), or both."""

    tool: str | None = Field(None, description="the tool to call; None for a reply without a native call")
    arguments: Any = Field(
        default_factory=dict, description="the call's arguments: a JSON object, or its JSON text as the model wrote it"
    )
    content: str = Field("", description="the reply's text; Qwen-style <tool_call> blocks in it are calls too")
    reasoning: str | None = Field(None, description="the reply's separate reasoning, kept in the transcript")


class BootcampObservation(Observation):
    """What the environment said: the prompt on reset, tool results and notes after a step."""

    messages: list[dict[str, Any]] = Field(
        default_factory=list,
        description="messages to append to the conversation, OpenAI format: on reset the prompt (system, "
        "user); after a step the tool results (Error: ... for a refused or malformed call), notes and feedback",
    )
    text: str = Field("", description="those messages' text, joined: on reset the task (the user message)")
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="OpenAI function schemas of the tools (on reset)"
    )
    bootcamp: str = Field("", description="the bootcamp's name")
    instance_id: str = Field("", description="the instance's id (a content hash of bootcamp, version, params, seed)")
    level: int = Field(0, description="the instance's difficulty level")
    turn: int = Field(0, description="agent turns played so far")
    termination: str | None = Field(
        None, description="how the episode ended (solved, wrong_answer, ...); None while on"
    )
    success: bool = Field(False, description="whether the episode was solved")
    details: dict[str, Any] = Field(default_factory=dict, description="the score's details (a failure's reason)")


class BootcampState(State):
    """Where the session stands: the episode's instance and outcome so far."""

    bootcamp: str = ""
    instance_id: str | None = None
    level: int | None = None
    seed: int | None = None
    done: bool = False
    reward: float | None = None
    termination: str | None = None


class BootcampEnvironment(Environment[BootcampAction, BootcampObservation, BootcampState]):
    """One session's episodes of one bootcamp (see the module docstring).

    Args:
        bootcamp: the bootcamp served.
        stream: where resets draw their instances.
        settings: the episode limits, as in evaluation.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session owns its episode; the bootcamp holds no episode state

    def __init__(self, bootcamp: Bootcamp, stream: TrainStream, settings: RolloutSettings = RolloutSettings()) -> None:
        super().__init__()
        self.bootcamp, self.stream, self.settings = bootcamp, stream, settings
        self._episode: SteppedEpisode | None = None
        self._state = BootcampState(bootcamp=bootcamp.name)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, level: int | None = None, **kwargs: Any
    ) -> BootcampObservation:
        """Start an episode of a fresh train-split instance and return its prompt and tools.

        Args:
            seed: picks the instance (the same seed, the same instance); None: the server's next one.
            episode_id: the caller's name for the episode, kept in the state.
            level: the instance's level (one the server serves); None: the seed's turn in the rotation.

        Raises:
            InvalidParamsError: an unknown argument or a level not served (the client reads the message).
        """
        if kwargs:
            raise InvalidParamsError(f"reset takes seed, episode_id and level; got {', '.join(sorted(kwargs))}")
        instance = self.stream.draw(seed, level)
        self.close()
        episode = SteppedEpisode(self.bootcamp, instance, self.settings)
        if episode.done:  # the bootcamp could not set this instance up: its bug, not the caller's
            raise RuntimeError(f"{self.bootcamp.name} instance {instance.id}: {episode.episode.error}")
        self._episode = episode
        self._state = BootcampState(
            episode_id=episode_id,
            bootcamp=self.bootcamp.name,
            instance_id=instance.id,
            level=instance.level,
            seed=instance.seed,
        )
        user = content_text(episode.prompt[-1].get("content")) if episode.prompt else ""
        return self._observe(Turn(episode.prompt), text=user, tools=episode.tools)

    def step(self, action: BootcampAction, timeout_s: float | None = None, **kwargs: Any) -> BootcampObservation:
        """Play one agent turn; the observation holds what the environment answered."""
        episode = self._episode
        if episode is None or episode.done:
            why = "no episode is running" if episode is None else "the episode has ended"
            text = f"Error: {why}; call reset to start one."
            return self._observe(Turn([{"role": "user", "content": text}]), text=text, done=True)
        calls = None
        if action.tool is not None:
            arguments = action.arguments if isinstance(action.arguments, str) else json.dumps(action.arguments)
            calls = [
                {
                    "id": f"call_{episode.turns}_0",
                    "type": "function",
                    "function": {"name": action.tool, "arguments": arguments},
                }
            ]
        turn = episode.reply(PolicyReply(content=action.content, tool_calls=calls, reasoning=action.reasoning))
        self._state.step_count += 1
        if turn.episode is not None:
            self._state.done, self._state.reward = True, turn.episode.reward
            self._state.termination = turn.episode.termination.value
        return self._observe(turn)

    @property
    def state(self) -> BootcampState:
        """The session's episode: its instance and, once ended, its reward and termination."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """The bootcamp's name, task description and version."""
        return EnvironmentMetadata(
            name=self.bootcamp.name, description=self.bootcamp.describe_task(), version=self.bootcamp.version
        )

    def close(self) -> None:
        """Abandon the running episode, if any."""
        if self._episode is not None:
            self._episode.close()
            self._episode = None

    def _observe(
        self, turn: Turn, text: str | None = None, tools: list[dict[str, Any]] | None = None, done: bool = False
    ) -> BootcampObservation:
        episode = turn.episode
        if text is None:
            text = "\n".join(content_text(m.get("content")) for m in turn.messages)
        return BootcampObservation(
            messages=turn.messages,
            text=text,
            tools=tools or [],
            bootcamp=self.bootcamp.name,
            instance_id=self._state.instance_id or "",
            level=self._state.level or 0,
            turn=self._episode.turns if self._episode is not None else 0,
            done=done or episode is not None,
            reward=episode.reward if episode is not None else 0.0,
            termination=episode.termination.value if episode is not None else None,
            success=bool(episode and episode.success),
            details=episode.details if episode is not None else {},
        )
