"""The process that holds a verifiers environment for campflow: JSON lines on stdin and stdout.

This file runs under the verifiers environment's own Python (``.venv-verifiers``, ``make verifiers``):
verifiers pins an ``openai`` and an ``mcp`` campflow's environment cannot share, so campflow never
imports it. It imports nothing of campflow, only the standard library and verifiers::

    .venv-verifiers/bin/python campflow/sources/verifiers_bridge.py MODULE_OR_PATH '{"kwarg": 1}'

``MODULE_OR_PATH`` is an installed environment module (``vf-install``'s name, loaded as ``vf-eval``
loads it) or a ``.py`` file defining ``load_environment(**kwargs)``. Each request is one JSON object a
line with an ``id`` and an ``op``; each reply carries the ``id`` and ``result`` or ``error`` (one line
naming what failed). Requests run concurrently, so many episodes share one process:

- ``describe``: the environment's class and protocol, its tools (name, description, JSON schema), turn
  budget, reward functions with their weights, and the rows of ``dataset`` and ``eval_dataset`` (prompt
  messages, answer, info, task);
- ``open``: a rollout state for one row (``split``, ``index``; or a ``row`` given whole: a proposed one),
  set up as the environment sets it up;
- ``step``: one assistant message into the rollout: the environment's stop conditions are asked, then its
  ``env_response`` (tool calls run here, ``update_tool_args`` included); answers the messages it said and
  whether the rollout is over;
- ``finish``: the final assistant reply (``answer``; none where the episode ended without one), then the
  environment's cleanup and its rubric: ``reward`` (the weighted sum) and ``metrics``;
- ``close``: drop a rollout without scoring it;
- ``score``: ``open`` and ``finish`` at once: the rubric's reward of ``answer`` as the only reply (in a
  custom multi-turn protocol the reply is a ``step``, so the environment answers it before the rubric).

The rollout is the environment's own, step by step: :meth:`MultiTurnEnv.rollout` asks the model for each
turn where here campflow's engine hands the turn in, so what the environment does between turns is
exactly what ``vf-eval`` would do.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import json
import os
import sys
import threading
import traceback
import uuid
from pathlib import Path
from typing import Any

# the environment's prints and logs must not reach the protocol's stream
_PROTOCOL = sys.stdout
sys.stdout = sys.stderr


def load(source: str, kwargs: dict[str, Any]) -> Any:
    """The environment ``source`` names, built by its ``load_environment(**kwargs)``."""
    if source.endswith(".py"):
        path = Path(source).resolve()
        if not path.is_file():
            raise ValueError(f"{source}: no such file")
        sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        loader = getattr(module, "load_environment", None)
        if loader is None:
            raise ValueError(f"{source} defines no load_environment()")
        return loader(**kwargs)
    from verifiers.utils.env_utils import load_environment

    return load_environment(source, **kwargs)


def _plain(value: Any) -> Any:
    """``value`` as JSON values (verifiers' pydantic messages dumped, None fields left out)."""
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump(exclude_none=True))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _openai_message(message: Any) -> dict[str, Any]:
    """A verifiers message as an OpenAI chat message (tool calls nested under ``function``)."""
    raw = _plain(message)
    calls = raw.pop("tool_calls", None)
    if calls:
        raw["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    return raw


def _protocol(env: Any) -> str:
    import verifiers as vf

    if isinstance(env, vf.SingleTurnEnv):
        return "single_turn"
    if isinstance(env, vf.StatefulToolEnv):
        return "stateful_tool"
    if isinstance(env, vf.ToolEnv):
        return "tool"
    if isinstance(env, vf.MultiTurnEnv):
        return "multi_turn"
    return "other"


def _weights(rubric: Any) -> list[dict[str, Any]]:
    """Each reward function of ``rubric`` (a rubric group's members' too) with its weight."""
    members = getattr(rubric, "rubrics", None)
    if members:
        return [w for member in members for w in _weights(member)]
    names = [getattr(f, "__name__", type(f).__name__) for f in rubric.funcs]
    return [{"name": n, "weight": float(w)} for n, w in zip(names, rubric.weights, strict=False)]


def _rows(dataset: Any) -> list[dict[str, Any]]:
    if dataset is None:
        return []
    out = []
    for row in dataset.to_list():
        info = row.get("info")
        if isinstance(info, str):
            try:
                info = json.loads(info)
            except ValueError:
                pass
        out.append(
            {
                "prompt": _plain(row.get("prompt")),
                "answer": row.get("answer"),
                "info": _plain(info) if info is not None else {},
                "task": row.get("task"),
            }
        )
    return out


class Bridge:
    """One environment and the rollouts open on it."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.rollouts: dict[str, dict[str, Any]] = {}
        self._inputs: dict[str, list[Any]] = {}
        self._client: Any = None

    def _input(self, split: str, index: int, row: dict[str, Any] | None = None) -> dict[str, Any]:
        if row is not None:  # a proposed row: prompt, answer and info as campflow formatted them
            return {
                "prompt": row["prompt"],
                "answer": row.get("answer"),
                "info": row.get("info") or {},
                "example_id": -1,
            }
        if split not in self._inputs:
            dataset = self.env.get_eval_dataset() if split == "eval" else self.env.get_dataset()
            self._inputs[split] = dataset.to_list()
        row = dict(self._inputs[split][index])
        row.setdefault("example_id", index)
        return row

    async def describe(self) -> dict[str, Any]:
        env = self.env
        train = env.build_dataset()
        evaluation = env.build_eval_dataset()
        parser = getattr(env, "parser", None)
        return {
            "class": f"{type(env).__module__}.{type(env).__qualname__}",
            "protocol": _protocol(env),
            "tools": [_plain(t) for t in (env.tool_defs or [])],
            "max_turns": int(getattr(env, "max_turns", 1) or -1),
            "reward_functions": _weights(env.rubric),
            "parser": type(parser).__name__ if parser is not None else None,
            "system_prompt": getattr(env, "system_prompt", None),
            "few_shot": _plain(getattr(env, "few_shot", None) or []),
            "answer_formats": _answer_formats(parser),
            "rows": _rows(train),
            "eval_rows": _rows(evaluation),
            "verifiers": _version(),
        }

    async def open(self, split: str, index: int, row: dict[str, Any] | None = None) -> dict[str, Any]:
        env = self.env
        state = await env.init_state(self._input(split, index, row), self._no_model(), "campflow")
        setup = await env.setup_state(state) if hasattr(env, "setup_state") else None
        if setup is not None:
            state = setup
        rid = uuid.uuid4().hex
        self.rollouts[rid] = {"state": state, "messages": list(state["prompt"])}
        return {"rollout": rid, "prompt": [_openai_message(m) for m in state["prompt"]]}

    async def step(self, rollout: str, message: dict[str, Any]) -> dict[str, Any]:
        from verifiers.utils.message_utils import normalize_messages

        held = self._held(rollout)
        state = held["state"]
        completion = normalize_messages([message], field_name="campflow turn")
        state["trajectory"].append(_trajectory_step(held["messages"], completion, state))
        held["messages"] = [*held["messages"], *completion]
        if await self.env.is_completed(state):
            return {"messages": [], "done": True, "stop": state.get("stop_condition")}
        before = len(held["messages"])
        messages = await self.env.get_prompt_messages(state)
        held["messages"] = list(messages)
        answered = [_openai_message(m) for m in messages[before:]]
        done = state.get("final_env_response") is not None or await self.env.is_completed(state)
        return {"messages": answered, "done": bool(done), "stop": state.get("stop_condition")}

    async def finish(self, rollout: str, answer: str | None) -> dict[str, Any]:
        held = self.rollouts.pop(rollout, None)
        if held is None:
            raise ValueError(f"no open rollout {rollout}")
        state = held["state"]
        if answer is not None:
            from verifiers.types import AssistantMessage

            reply = [AssistantMessage(content=answer)]
            state["trajectory"].append(_trajectory_step(held["messages"], reply, state))
        await self.env.is_completed(state)
        await self.env.cleanup(state)
        rubric = self.env.rubric
        if getattr(self.env, "score_rollouts", True):
            await rubric.score_rollout(state)
        else:
            await rubric.dummy_score_rollout(state)
        await rubric.cleanup(state)
        return {
            "reward": float(state["reward"] or 0.0),
            "metrics": {k: float(v) for k, v in (state.get("metrics") or {}).items()},
            "completion": [_openai_message(m) for m in state.get("completion") or []],
            "stop": state.get("stop_condition"),
            "error": repr(state["error"]) if state.get("error") is not None else None,
        }

    async def close(self, rollout: str) -> dict[str, Any]:
        held = self.rollouts.pop(rollout, None)
        if held is not None:
            await self.env.cleanup(held["state"])
        return {}

    async def score(self, split: str, index: int, answer: str, row: dict[str, Any] | None = None) -> dict[str, Any]:
        opened = await self.open(split, index, row)
        if _protocol(self.env) == "multi_turn":  # the environment answers the reply, as it answers every turn
            await self.step(opened["rollout"], {"role": "assistant", "content": answer})
            return await self.finish(opened["rollout"], None)
        return await self.finish(opened["rollout"], answer)

    def _no_model(self) -> Any:
        """The client a rollout state carries, which campflow never calls (its turns come from campflow's
        engine): one for every rollout, for each new one loads the system's certificates (~60 ms)."""
        if self._client is None:
            from verifiers.clients import resolve_client
            from verifiers.types import ClientConfig

            self._client = resolve_client(
                ClientConfig(api_key_var="CAMPFLOW_NO_MODEL", api_base_url="http://127.0.0.1:9/v1")
            )
        return self._client

    def _held(self, rollout: str) -> dict[str, Any]:
        held = self.rollouts.get(rollout)
        if held is None:
            raise ValueError(f"no open rollout {rollout}")
        return held


def _trajectory_step(prompt: list[Any], completion: list[Any], state: Any) -> dict[str, Any]:
    from verifiers.types import TrajectoryStep

    return TrajectoryStep(
        prompt=list(prompt),
        completion=list(completion),
        response=None,
        tokens=None,
        reward=None,
        advantage=None,
        is_truncated=False,
        trajectory_id=state["trajectory_id"],
        extras={},
    )


def _answer_formats(parser: Any) -> list[str]:
    """Ways to write an answer as a reply this parser reads, most plain first (``{answer}`` is filled)."""
    formats = ["{answer}"]
    fields = getattr(parser, "answer_field", None) or (
        "answer" if type(parser).__name__ in ("XMLParser", "ThinkParser") else None
    )
    if fields:
        formats.append(f"<{fields}>\n{{answer}}\n</{fields}>")
    formats.append("\\boxed{{{answer}}}")
    if type(parser).__name__ in ("ThinkParser", "MaybeThinkParser"):
        formats += ["<think>\n</think>\n{answer}", "<think>\n</think>\n\\boxed{{{answer}}}"]
    return formats


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("verifiers")
    except Exception:  # noqa: BLE001
        return "unknown"


async def serve(bridge: Bridge) -> None:
    """Answer requests from stdin until it closes, each in a task of its own."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    write = threading.Lock()

    def reply(payload: dict[str, Any]) -> None:
        text = json.dumps(payload)
        with write:
            _PROTOCOL.write(text + "\n")
            _PROTOCOL.flush()

    async def answer(request: dict[str, Any]) -> None:
        rid = request.get("id")
        try:
            op = getattr(bridge, str(request.get("op")), None)
            if op is None or str(request.get("op")).startswith("_"):
                raise ValueError(f"unknown op {request.get('op')!r}")
            args = {k: v for k, v in request.items() if k not in ("id", "op")}
            reply({"id": rid, "result": await op(**args)})
        except Exception as exc:  # noqa: BLE001  (named in the reply; the process goes on)
            traceback.print_exc(file=sys.stderr)
            reply({"id": rid, "error": f"{type(exc).__name__}: {exc}"[:2000]})

    tasks: set[asyncio.Task] = set()
    while (line := await lines.get()) is not None:
        if not line.strip():
            continue
        task = asyncio.create_task(answer(json.loads(line)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)


def main() -> None:
    source, kwargs = sys.argv[1], json.loads(sys.argv[2] if len(sys.argv) > 2 else "{}")
    os.environ.setdefault("CAMPFLOW_NO_MODEL", "no-model: campflow plays the turns")
    try:
        env = load(source, kwargs)
        if not hasattr(env, "rubric") or not hasattr(env, "get_dataset"):
            raise TypeError(f"load_environment() returned {type(env).__name__}, not a verifiers Environment")
        if inspect.iscoroutine(env):
            raise TypeError("load_environment() is a coroutine function; verifiers calls it synchronously")
    except Exception as exc:  # noqa: BLE001  (the first line says why the source cannot be loaded)
        traceback.print_exc(file=sys.stderr)
        _PROTOCOL.write(json.dumps({"id": 0, "error": f"{type(exc).__name__}: {exc}"[:2000]}) + "\n")
        _PROTOCOL.flush()
        return
    _PROTOCOL.write(json.dumps({"id": 0, "result": {"ready": True}}) + "\n")
    _PROTOCOL.flush()
    asyncio.run(serve(Bridge(env)))


if __name__ == "__main__":
    main()
