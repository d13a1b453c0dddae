"""A user's agent program: what ``campflow eval --agent`` runs, and what it is told about its episode.

``--agent`` names either a command (``"python my_agent.py"``, split as a shell would, run without a
shell) or an async Python function (``my_agent:run``, imported from the current folder). Either way the
program runs as a process of its own, in a process group of its own, once per episode, and learns its
episode from the environment (:data:`ENVIRONMENT`) and its standard input (the prompt's text). A
function is called with an :class:`AgentTask` by this module's launcher
(``python -m campflow.proxy.program my_agent:run``).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from campflow.errors import CampflowError

# the environment an agent program starts with (docs/agents.md)
ENVIRONMENT = {
    "OPENAI_BASE_URL": "the proxy's base URL for this episode (the OpenAI SDK reads it)",
    "OPENAI_API_KEY": "this episode's key on the proxy (the OpenAI SDK reads it)",
    "CAMPFLOW_OPENAI_BASE_URL": "the same base URL",
    "CAMPFLOW_OPENAI_API_KEY": "the same key",
    "CAMPFLOW_MODEL": "the model name to send in each request",
    "CAMPFLOW_MCP_URL": "the episode's MCP server (streamable HTTP): the bootcamp's tools",
    "CAMPFLOW_TASK": "the task as JSON: bootcamp, instance_id, level, seed, episode_id, messages",
    "CAMPFLOW_PROMPT": "the task's last user message as text (also on standard input)",
    "CAMPFLOW_EPISODE_ID": "the episode's id (as the store records it)",
    "CAMPFLOW_EPISODE_TIMEOUT": "seconds the episode may run before the program's process group is stopped",
}

_FUNCTION = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


class AgentProgramError(CampflowError):
    """An ``--agent`` value that names no program campflow can run."""


@dataclass(frozen=True)
class AgentProgram:
    """The program ``--agent`` names: a command (``argv``) or an async function (``module:function``)."""

    spec: str  # as given
    argv: tuple[str, ...]  # what is started for each episode

    @property
    def is_function(self) -> bool:
        """Whether the program is an async Python function run by this module's launcher."""
        return _FUNCTION.match(self.spec) is not None

    @classmethod
    def parse(cls, value: str) -> AgentProgram:
        """The program ``value`` names: ``module:function`` (importable from the current folder) or a command.

        Raises:
            AgentProgramError: an empty value, unbalanced quotes, a command not found, a module that is not
                importable (the message names the value and what was expected).
        """
        spec = value.strip()
        if _FUNCTION.match(spec):
            module = spec.partition(":")[0]
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())
            try:
                found = importlib.util.find_spec(module)
            except (ImportError, ValueError) as exc:
                found, why = None, f" ({exc})"
            else:
                why = ""
            if found is None:
                raise AgentProgramError(
                    f"--agent {value!r}: module {module!r} is not importable from {os.getcwd()}{why}; "
                    "expected module:function (an async function) or a command such as 'python my_agent.py'"
                )
            return cls(spec, (sys.executable, "-m", __name__, spec))
        try:
            argv = tuple(shlex.split(spec))
        except ValueError as exc:
            raise AgentProgramError(f"--agent {value!r}: cannot be split into a command ({exc})") from None
        if not argv:
            raise AgentProgramError(
                f"--agent {value!r}: expected a command such as 'python my_agent.py' or module:function"
            )
        if shutil.which(argv[0]) is None:
            raise AgentProgramError(
                f"--agent {value!r}: command {argv[0]!r} not found (not on PATH, or not an executable file); "
                "expected a command such as 'python my_agent.py' or module:function"
            )
        missing = [a for a in argv[1:] if a.endswith(".py") and not a.startswith("-") and not os.path.exists(a)]
        if missing:  # "python my_agent.py" from the wrong folder would fail every episode the same way
            raise AgentProgramError(
                f"--agent {value!r}: script {missing[0]!r} not found from {os.getcwd()}; "
                "run campflow from the folder the command expects, or give the script's full path"
            )
        return cls(spec, argv)


@dataclass(frozen=True)
class AgentTask:
    """One episode as an agent program sees it (the function form's argument; :data:`ENVIRONMENT` otherwise).

    Attributes:
        base_url: the proxy's OpenAI base URL for this episode.
        api_key: this episode's key.
        model: the model name to request.
        mcp_url: the episode's MCP server (streamable HTTP).
        task: bootcamp, instance_id, level, seed, episode_id and the prompt's ``messages``.
        prompt: the last user message's text.
        episode_id: the episode's id.
        timeout: seconds before the program is stopped.
    """

    base_url: str
    api_key: str
    model: str
    mcp_url: str
    task: dict[str, Any]
    prompt: str
    episode_id: str
    timeout: float

    def environment(self) -> dict[str, str]:
        """The variables of :data:`ENVIRONMENT` for this episode."""
        return {
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_KEY": self.api_key,
            "CAMPFLOW_OPENAI_BASE_URL": self.base_url,
            "CAMPFLOW_OPENAI_API_KEY": self.api_key,
            "CAMPFLOW_MODEL": self.model,
            "CAMPFLOW_MCP_URL": self.mcp_url,
            "CAMPFLOW_TASK": json.dumps(self.task),
            "CAMPFLOW_PROMPT": self.prompt,
            "CAMPFLOW_EPISODE_ID": self.episode_id,
            "CAMPFLOW_EPISODE_TIMEOUT": f"{self.timeout:g}",
        }

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> AgentTask:
        """The task an agent program was started with.

        Raises:
            AgentProgramError: a variable is missing (the program was not started by campflow).
        """
        env = os.environ if env is None else env
        missing = [name for name in ENVIRONMENT if name not in env]
        if missing:
            raise AgentProgramError(
                f"{', '.join(missing)} not set: this program expects to be run by campflow eval --agent"
            )
        return cls(
            base_url=env["CAMPFLOW_OPENAI_BASE_URL"],
            api_key=env["CAMPFLOW_OPENAI_API_KEY"],
            model=env["CAMPFLOW_MODEL"],
            mcp_url=env["CAMPFLOW_MCP_URL"],
            task=json.loads(env["CAMPFLOW_TASK"]),
            prompt=env["CAMPFLOW_PROMPT"],
            episode_id=env["CAMPFLOW_EPISODE_ID"],
            timeout=float(env["CAMPFLOW_EPISODE_TIMEOUT"]),
        )


def main(argv: list[str] | None = None) -> None:
    """The launcher of a function agent: ``python -m campflow.proxy.program module:function``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not _FUNCTION.match(argv[0]):
        raise SystemExit(f"usage: python -m {__name__} module:function (got {argv!r})")
    module, _, name = argv[0].partition(":")
    sys.path.insert(0, os.getcwd())
    function = getattr(importlib.import_module(module), name, None)
    if not inspect.iscoroutinefunction(function):
        raise SystemExit(f"{argv[0]}: expected an async function taking an AgentTask, got {function!r}")
    asyncio.run(function(AgentTask.from_environment()))


if __name__ == "__main__":
    main()
