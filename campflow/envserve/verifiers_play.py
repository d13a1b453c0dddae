"""The campflow process an exported verifiers environment plays its bootcamps through: JSON lines on stdio.

``campflow export --format verifiers`` (:mod:`campflow.envserve.verifiers_export`) writes a package whose
environment runs under verifiers' Python and cannot import campflow; for every rollout it asks this
process, started with campflow's own Python::

    python -m campflow.envserve.verifiers_play --db campflow-data/campflow.duckdb --run-id verifiers-...

Requests (one JSON object a line, with an ``id``; replies carry it with ``result`` or ``error``):

- ``open`` ``{bootcamp, params, seed}``: a :class:`~campflow.rollout.stepped.SteppedEpisode` of that
  instance (the engine's own episode, as ``campflow env serve`` plays one); answers ``episode``, its prompt
  and tools;
- ``reply`` ``{episode, message}``: the model's assistant message (content, tool calls) as the agent's turn;
  answers the messages the environment said and, once the episode has ended, its ``outcome`` (reward,
  success, termination, details);
- ``stop`` ``{episode}``: end an episode whose rollout ended first (scored where it stands; a reply still
  in flight is waited for, and where it ended the episode the outcome is None here).

An episode's requests are answered one at a time; episodes run side by side. When stdin closes, the
episodes still open are abandoned and their servers stopped.

Every ended episode is written to the workspace's store under the run id (an ``evaluate`` run of model
``verifiers``), so a verifiers trainer's failures are mined like any policy's; infrastructure faults stay
``infra_error``. Its sample index is counted in the store as it is written: several processes (every
environment object verifiers loads from the package starts one) record the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MODEL_ID = "verifiers"


class Player:
    """The open episodes of one exported environment, and the store they are written to."""

    def __init__(self, db: str | None, config: str | None, run_id: str, workspace: str | None = None) -> None:
        from pathlib import Path

        from campflow.config import load_config
        from campflow.rollout.engine import RolloutSettings
        from campflow.storage.workspace import Workspace

        overrides: dict[str, Any] = {}
        if db:
            overrides["workspace.db"] = Path(db)
        if workspace:
            overrides["workspace.path"] = Path(workspace)
        cfg = load_config(Path(config) if config else None, overrides)
        self.workspace = Workspace.from_config(cfg)
        # made (and migrated) here, once: requests run on many threads, and two first uses would race
        self.store = self.workspace.store
        # an evaluation of the verifiers side's model: its failures are mined like any policy's (a second
        # process of the same package resumes the run)
        self.store.start_run(run_id, "evaluate", {"protocol": "verifiers"}, MODEL_ID)
        self.workspace.load_imports()
        self.settings = RolloutSettings.from_config(cfg.rollout)
        self.run_id = run_id
        self.episodes: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.writing = threading.Lock()  # one store write at a time: replies run on many threads

    def open(self, bootcamp: str, params: dict[str, Any], seed: int) -> dict[str, Any]:
        from campflow.bootcamps.splits import is_eval_seed
        from campflow.rollout.stepped import SteppedEpisode

        camp = self.workspace.bootcamp(bootcamp)
        instance = camp.generate(params, seed)
        if is_eval_seed(seed) or instance.id in self._held_out(bootcamp):
            raise ValueError(
                f"instance {instance.id} of {bootcamp} is held out (eval or probe); it is never played here"
            )
        episode = SteppedEpisode(camp, instance, self.settings)
        key = uuid.uuid4().hex
        with self.lock:
            self.episodes[key] = (episode, threading.Lock())
        with self.writing:
            self.store.write_instances([instance], split="train")
        out: dict[str, Any] = {"episode": key, "prompt": episode.prompt, "tools": episode.tools}
        if episode.episode is not None:  # setting it up failed: over before a reply
            out["outcome"] = self._finish(key, episode.episode)
        return out

    def reply(self, episode: str, message: dict[str, Any]) -> dict[str, Any]:
        from campflow.agents.base import PolicyReply

        held, turns = self._held(episode)
        with turns:
            if self._held(episode)[0] is not held:
                raise ValueError(f"no open episode {episode!r}")
            content = message.get("content")
            turn = held.reply(
                PolicyReply(
                    content=content if isinstance(content, str) else None,
                    tool_calls=message.get("tool_calls") or None,
                    reasoning=message.get("reasoning_content"),
                )
            )
            out: dict[str, Any] = {"messages": turn.messages}
            if turn.episode is not None:
                out["outcome"] = self._finish(episode, turn.episode)
            return out

    def stop(self, episode: str) -> dict[str, Any]:
        """End the episode where it stands. A reply still in flight (the rollout gave up on it) is waited
        for; where it ended the episode, the outcome went to it, and here it is None."""
        held, turns = self._held(episode)
        with turns:
            with self.lock:
                if self.episodes.get(episode, (None,))[0] is not held:
                    return {"outcome": None}
            if held.episode is not None:  # ended, but its record failed: written now
                return {"outcome": self._finish(episode, held.episode)}
            return {"outcome": self._finish(episode, held.stop("the verifiers rollout ended before the episode"))}

    def abandon(self) -> None:
        """Abandon every open episode (the environment is gone): their servers are stopped, nothing is scored."""
        with self.lock:
            left, self.episodes = list(self.episodes.values()), {}
        for held, _ in left:
            if held.episode is None:
                held.close()

    def _held(self, episode: str) -> tuple[Any, threading.Lock]:
        """The open episode ``episode`` and the lock its turns take one at a time."""
        with self.lock:
            found = self.episodes.get(episode)
        if found is None:
            raise ValueError(f"no open episode {episode!r}")
        return found

    def _held_out(self, bootcamp: str) -> set[str]:
        return self.store.eval_ids(bootcamp) | self.store.probe_ids(bootcamp)

    def _finish(self, key: str, episode: Any) -> dict[str, Any]:
        """Record an ended episode as the next sample of its instance in the run. The sample is counted in
        the store, inside the transaction that writes it: every environment loaded from the package (two
        evaluations side by side, an env server's workers) is a process of its own, on the same run."""
        from campflow.storage.store import episodes_to_arrow

        with self.writing, self.store.transaction() as con:
            [(sample,)] = con.execute(
                "SELECT coalesce(max(sample_index) + 1, 0) FROM episodes WHERE run_id = ? AND instance_id = ?",
                [self.run_id, episode.instance_id],
            ).fetchall()
            recorded = dataclasses.replace(episode, run_id=self.run_id, model_id=MODEL_ID, sample=sample)
            con.register("_campflow_episodes", episodes_to_arrow([recorded.freeze()]))
            try:
                con.execute("INSERT INTO episodes BY NAME SELECT * FROM _campflow_episodes")
            finally:
                con.unregister("_campflow_episodes")
        with self.lock:  # held until written: a rollout whose reply failed to record stops it again
            self.episodes.pop(key, None)
        return {
            "reward": recorded.reward,
            "success": recorded.success,
            "termination": recorded.termination.value,
            "episode_id": recorded.id,
            "run_id": self.run_id,
        }


def serve(player: Player) -> None:
    """Answer requests from stdin until it closes; each runs on a worker thread (episodes in parallel)."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the protocol's stream
    write = threading.Lock()

    def answer(request: dict[str, Any]) -> None:
        rid = request.pop("id", None)
        op = getattr(player, str(request.pop("op", "")), None)
        try:
            if op is None or not callable(op) or str(getattr(op, "__name__", "_")).startswith("_"):
                raise ValueError("unknown op")
            reply = {"id": rid, "result": op(**request)}
        except Exception as exc:  # noqa: BLE001  (named in the reply; the process goes on)
            reply = {"id": rid, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        with write:
            out.write(json.dumps(reply, default=str) + "\n")
            out.flush()

    out.write(json.dumps({"id": 0, "result": {"ready": True}}) + "\n")
    out.flush()
    with ThreadPoolExecutor(16) as pool:
        for line in sys.stdin:
            if line.strip():
                pool.submit(answer, json.loads(line))
        # stdin closed: the environment is gone; requests still running finish, the episodes left open
        # (their rollouts will never reply) are abandoned, their servers stopped
        pool.shutdown(wait=True)
        player.abandon()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=None, help="the workspace's store (default: the config's)")
    parser.add_argument("--config", default=None, help="campflow YAML config")
    parser.add_argument("--workspace", default=None, help="the workspace folder (default: the config's)")
    parser.add_argument("--run-id", required=True, help="the run its episodes are recorded under")
    args = parser.parse_args(argv)
    serve(Player(args.db, args.config, args.run_id, args.workspace))


if __name__ == "__main__":
    main()
