# An environment package written by `campflow export --format verifiers` (campflow/envserve/verifiers_export.py).
# It runs under verifiers' Python and imports nothing of campflow: every rollout is one campflow episode,
# played by a campflow process (campflow/envserve/verifiers_play.py) started with campflow's own Python, so
# the tools, the turn budget, the ending and the reward are the bootcamp's own. Edit CONFIG to move it.
"""A verifiers environment: campflow bootcamps __NAMES__ (train-split instances), played by campflow."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import subprocess
import threading
from typing import Any

import verifiers as vf
from datasets import Dataset

CONFIG: dict[str, Any] = json.loads(r"""__CONFIG__""")


class CampflowProcess:
    """The campflow process playing this environment's episodes (JSON lines on its stdin and stdout)."""

    def __init__(self, config: dict[str, Any]) -> None:
        command = [config["python"], "-m", "campflow.envserve.verifiers_play", "--run-id", config["run_id"]]
        for flag in ("db", "config", "workspace"):
            if config.get(flag):
                command += [f"--{flag}", config[flag]]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=config.get("cwd") or None
        )
        self.ids = itertools.count(1)
        self.pending: dict[int, concurrent.futures.Future] = {0: concurrent.futures.Future()}
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        self.pending_result = self.pending[0]
        self.pending_result.result(timeout=600)

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            reply = json.loads(line)
            with self.lock:
                future = self.pending.pop(reply.get("id"), None)
            if future is not None:
                if "error" in reply:
                    future.set_exception(RuntimeError(f"campflow: {reply['error']}"))
                else:
                    future.set_result(reply["result"])
        with self.lock:
            left, self.pending = list(self.pending.values()), {}
        for future in left:
            future.set_exception(RuntimeError(f"the campflow process exited ({self.proc.wait()})"))

    async def request(self, op: str, **args: Any) -> Any:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self.lock:
            rid = next(self.ids)
            self.pending[rid] = future
            self.proc.stdin.write(json.dumps({"id": rid, "op": op, **args}) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        return await asyncio.wrap_future(future)


class CampflowBootcampEnv(vf.MultiTurnEnv):
    """Each row is a campflow train-split instance; each turn goes to its campflow episode."""

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        rows = [{"prompt": row["prompt"], "answer": "", "info": json.dumps(row)} for row in config["rows"]]
        rubric = vf.Rubric(funcs=[self.bootcamp_reward, self.solved, self.partial_credit], weights=[1.0, 0.0, 0.0])
        super().__init__(dataset=Dataset.from_list(rows), rubric=rubric, max_turns=config["max_turns"], **kwargs)
        self.config = config
        self._campflow: CampflowProcess | None = None
        self._start = threading.Lock()

    def campflow(self) -> CampflowProcess:
        with self._start:
            if self._campflow is None or self._campflow.proc.poll() is not None:
                self._campflow = CampflowProcess(self.config)
            return self._campflow

    async def setup_state(self, state: vf.State, **kwargs: Any) -> vf.State:
        row = state["info"]
        row = json.loads(row) if isinstance(row, str) else row
        opened = await self.campflow().request("open", bootcamp=row["bootcamp"], params=row["params"], seed=row["seed"])
        state["campflow_episode"] = opened["episode"]
        if opened["prompt"] != row["prompt"]:  # the episode's own (an MCP episode's {workdir} is its folder)
            said = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
            state["prompt"] = [said[m["role"]](content=m["content"]) for m in opened["prompt"]]
        state["campflow_outcome"] = opened.get("outcome")
        if opened.get("outcome") is not None:
            state["final_env_response"] = []
        return state

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        last = messages[-1]
        message = {"role": "assistant", "content": last.content if isinstance(last.content, str) else None}
        if getattr(last, "tool_calls", None):
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in last.tool_calls
            ]
        answered = await self.campflow().request("reply", episode=state["campflow_episode"], message=message)
        said = [vf.ToolMessage(**m) if m["role"] == "tool" else vf.UserMessage(**m) for m in answered["messages"]]
        if answered.get("outcome") is not None:
            state["campflow_outcome"] = answered["outcome"]
            state["final_env_response"] = said
        return said

    @vf.cleanup
    async def stop_campflow_episode(self, state: vf.State) -> None:
        """A rollout that ended before its campflow episode (verifiers' own limits) is scored where it stands."""
        if state.get("campflow_outcome") is None and state.get("campflow_episode"):
            stopped = await self.campflow().request("stop", episode=state["campflow_episode"])
            state["campflow_outcome"] = stopped["outcome"]

    async def bootcamp_reward(self, state: vf.State) -> float:
        """The bootcamp's reward for the episode (partial credit included), as campflow scores it."""
        outcome = state.get("campflow_outcome") or {}
        return float(outcome.get("reward") or 0.0)

    async def solved(self, state: vf.State) -> float:
        """1 where the bootcamp counts the episode solved."""
        return 1.0 if (state.get("campflow_outcome") or {}).get("success") else 0.0

    async def partial_credit(self, state: vf.State) -> float:
        """The reward of an episode that was not solved (the bootcamp's partial credit)."""
        outcome = state.get("campflow_outcome") or {}
        return 0.0 if outcome.get("success") else float(outcome.get("reward") or 0.0)


def load_environment(**kwargs: Any) -> vf.Environment:
    """The exported bootcamps as one verifiers environment; ``kwargs`` override CONFIG's keys (``python``, ``db``)."""
    config = {**CONFIG, **{k: v for k, v in kwargs.items() if k in CONFIG}}
    return CampflowBootcampEnv(config)
