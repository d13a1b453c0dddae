"""`campflow rescore`: after a planted weak verifier is fixed, a run's stored episodes are judged again
without running the model; the changed episodes are listed and the old scores kept."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from campflow.agents.base import Policy, PolicyReply, TurnContext
from campflow.agents.oracle import native_call
from campflow.bootcamps import registry
from campflow.bootcamps.base import Action, Bootcamp, Score
from campflow.rollout.engine import EpisodeSpec, rollout
from campflow.storage.workspace import Workspace

WEAK = Path(__file__).parent / "data" / "weak_verifiers" / "accepts_zero.py"
NAME = "weak-accepts-zero"


def _weak_class() -> type[Bootcamp]:
    spec = importlib.util.spec_from_file_location("weak_accepts_zero_rescore", WEAK)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded.AcceptsZero


class _ZeroOnOddSeeds(Policy):
    """Answers "0" on odd seeds (the hack the weak verifier rewards) and the sum on even ones."""

    model_id = "zero-on-odd-seeds"
    suspends = False

    async def respond(self, messages, tools, context: TurnContext) -> PolicyReply:
        d = context.instance.data
        answer = "0" if context.instance.seed % 2 else str(d["a"] + d["b"])
        return PolicyReply(tool_calls=[native_call(Action("submit", {"answer": answer}), f"call_{context.turn}_0")])


@pytest.fixture
def planted_run(tmp_path: Path) -> Workspace:
    weak = _weak_class()
    registry.register(NAME, weak, replace=True)
    ws = Workspace(tmp_path / "ws")
    bootcamp = ws.bootcamp(NAME)
    instances = [bootcamp.generate(1, seed) for seed in range(6)]
    ws.store.write_instances(instances, split="train")
    ws.store.start_run("planted", "evaluate", {}, _ZeroOnOddSeeds.model_id)
    ws.store.write_episodes(rollout([EpisodeSpec(bootcamp, i) for i in instances], _ZeroOnOddSeeds(), run_id="planted"))

    class Fixed(weak):
        def score(self, instance, state, transcript):
            ok = state.answer is not None and state.answer.strip() == str(instance.data["a"] + instance.data["b"])
            return Score(float(ok), ok, {} if ok else {"reason": "mismatch"})

    registry.register(NAME, Fixed, replace=True)  # the verifier is fixed after the run
    return ws


def test_rescore_after_fixing_a_planted_verifier_lists_the_changed_episodes_and_keeps_the_old_scores(
    planted_run: Workspace,
) -> None:
    from campflow.storage.rescores import rescore_run

    ws = planted_run
    assert ws.store.scalar("SELECT count(*) FROM episodes WHERE success") == 6  # the weak verifier passed all
    result = rescore_run(ws, "planted")
    assert len(result.episodes) == 6 and not result.failed
    changed = result.changed
    assert sorted(e.sample for e in changed) == [0, 0, 0]
    seeds = {r["instance_id"]: r["seed"] for r in ws.store.query("SELECT instance_id, seed FROM instances")}
    assert sorted(seeds[e.instance_id] for e in changed) == [1, 3, 5]  # exactly the "0" answers
    assert all(e.old_success and e.old_reward == 1.0 and e.new_success is False for e in changed)
    assert ws.store.scalar("SELECT count(*) FROM episodes WHERE success") == 6  # the old scores are kept
    rows = ws.store.query(
        "SELECT rescore_id, old_success, new_success, new_reward FROM episode_rescores WHERE run_id = 'planted'"
    )
    assert len(rows) == 6 and {r["rescore_id"] for r in rows} == {result.rescore_id}
    assert sum(r["old_success"] for r in rows) == 6 and sum(r["new_success"] for r in rows) == 3


def test_the_rescore_command_prints_what_changed_and_refuses_an_unknown_run(planted_run: Workspace) -> None:
    import importlib

    from typer.testing import CliRunner

    from campflow.cli import COMMAND_MODULES, app

    for module in COMMAND_MODULES:  # as `campflow` does: every command registered
        importlib.import_module(f"campflow.cli.{module}")

    db = str(planted_run.db_path)
    done = CliRunner().invoke(app, ["rescore", "--run", "planted", "--db", db], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())  # as words: the console may wrap its line at another width
    assert "6 episodes re-scored" in said and "3 changed; solved 6 -> 3" in said
    missing = CliRunner().invoke(app, ["rescore", "--run", "nope", "--db", db])
    assert missing.exit_code != 0 and "run 'nope' has no episodes to re-score" in str(missing.exception)
