"""Training on a user's agent's episodes: SFT rows and GRPO completions are the ids the proxy recorded.

The agents are real programs campflow starts per episode: ``examples/agents/openai_loop.py`` with the
grounded demonstrator answering behind the proxy in the tiny model's tokens (SFT data), and a small agent
written here that asks the model being trained twice (appending, so the calls merge) and then submits the
right or a wrong answer by the parity of what the model said (GRPO: rewards that differ within a group).
"""

from __future__ import annotations

import asyncio
import json
import math
import shlex
import sys
import textwrap
from pathlib import Path

import pytest

from campflow.bootcamps import registry
from campflow.bootcamps.splits import train_instances
from campflow.config import RLSettings, SFTSettings, load_config
from campflow.proxy.program import AgentProgram
from campflow.proxy.records import read_calls
from campflow.proxy.runner import AgentItem, AgentRunner
from campflow.proxy.teacher import DemonstratorBackend
from campflow.rollout.engine import RolloutSettings
from campflow.storage.workspace import Workspace
from campflow.testing.tiny import untrained_tiny
from tests.conftest import REPO

PYTHON = shlex.quote(sys.executable)
TINY = untrained_tiny()

# asks the model twice, appending its reply, then submits the right answer when the model's second reply has
# an even length (the answers are in the file CAMPFLOW_TEST_ANSWERS names), a wrong one otherwise
PARITY_AGENT = """
import asyncio, json, os
from mcp import Client
from openai import AsyncOpenAI

async def main():
    task = json.loads(os.environ["CAMPFLOW_TASK"])
    right = json.load(open(os.environ["CAMPFLOW_TEST_ANSWERS"]))[task["instance_id"]]
    model = AsyncOpenAI()
    messages = list(task["messages"])
    for _ in range(2):
        reply = (await model.chat.completions.create(model=os.environ["CAMPFLOW_MODEL"], messages=messages)).choices[0]
        messages += [{"role": "assistant", "content": reply.message.content or ""}, {"role": "user", "content": "Go on."}]
    answer = right if len(reply.message.content or "") % 2 == 0 else right + 1
    async with Client(os.environ["CAMPFLOW_MCP_URL"], cache=None) as tools:
        await tools.call_tool("submit", {"answer": answer})

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    """A tiny calculator model, a workspace, and two solved episodes of the OpenAI-SDK example taught by the
    demonstrator behind the proxy (run ``teach``)."""
    from campflow.training.tinymodel import build_tiny_model

    root = tmp_path_factory.mktemp("agent-training")
    tiny = root / "tiny"
    build_tiny_model(tiny, TINY, ["calculator"])
    ws = Workspace.from_config(load_config(None, {"workspace.path": str(root / "ws")}))
    calculator = registry.make("calculator")
    instances = train_instances(calculator, 4, seed=11, levels=[1])
    ws.store.write_instances(instances, split="train")
    ws.store.start_run("teach", "collect", {}, "demonstrator")
    runner = AgentRunner(
        AgentProgram.parse(f"{PYTHON} {REPO / 'examples' / 'agents' / 'openai_loop.py'}"),
        DemonstratorBackend(tiny, device="cpu", precision="fp32"),
        ws.store,
        RolloutSettings(episode_timeout=60),
        "teach",
    )
    episodes = asyncio.run(runner.run([AgentItem(calculator, i, 0) for i in instances[:2]]))
    ws.store.write_episodes(episodes)
    return root, tiny, ws, instances


def test_the_agents_sdk_example_taught_by_the_demonstrator_solves_and_exits_cleanly(setup) -> None:
    _, tiny, ws, instances = setup
    calculator = registry.make("calculator")
    ws.store.start_run("teach-sdk", "collect", {}, "demonstrator")
    runner = AgentRunner(
        AgentProgram.parse(f"{PYTHON} {REPO / 'examples' / 'agents' / 'agents_sdk.py'}"),
        DemonstratorBackend(tiny, device="cpu", precision="fp32"),
        ws.store,
        RolloutSettings(episode_timeout=60),
        "teach-sdk",
    )
    (episode,) = asyncio.run(runner.run([AgentItem(calculator, instances[0], 0)]))
    # several tool calls in one run: their ids differ (the SDK ends a run on an id it has seen completed)
    assert (episode.termination.value, episode.reward) == ("solved", 1.0), episode.error
    assert episode.details["agent"]["exit_code"] == 0 and episode.details["agent"]["model_calls"] >= 2


def _completion_ids(store, episode_id: str) -> list[int]:
    """The ids the model (here: the demonstrator) produced in an episode, every call's in order."""
    return [t for c in read_calls(store, [episode_id]) for t in c["completion_ids"]]


def test_sft_on_agent_episodes_labels_exactly_the_recorded_completion_ids(setup) -> None:
    from campflow.hardware import resolve_hardware
    from campflow.training.agent_data import build_agent_sft_dataset
    from campflow.training.sft import sft_arguments, sft_trainer, train_sft

    root, tiny, ws, _ = setup
    store = ws.store
    solved = store.query("SELECT episode_id, termination FROM episodes WHERE run_id = 'teach'")
    assert {r["termination"] for r in solved} == {"solved"} and len(solved) == 2
    cfg = load_config(None, {"workspace.path": str(ws.path)}).training.filter
    build = build_agent_sft_dataset(store, ws.path, ["teach"], cfg)
    assert (build.episodes, build.rows, build.merged_share) == (2, 2, 1.0)  # each episode appended: one sequence
    recorded = json.loads(store.scalar("SELECT filter FROM datasets WHERE dataset_id = ?", [build.dataset_id]))
    assert recorded["source"] == "agent_episodes" and recorded["merged_share"] == 1.0

    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rows = datasets.load_from_disk(str(build.path))
    hardware = resolve_hardware("cpu", "fp32")
    args = sft_arguments(SFTSettings(max_steps=1, batch_size=2), hardware, root / "trl", 1024, tokenized=True)
    trainer = sft_trainer(
        False,
        model=AutoModelForCausalLM.from_pretrained(str(tiny)),
        args=args,
        train_dataset=rows.select_columns(["input_ids", "completion_mask"]),
        processing_class=AutoTokenizer.from_pretrained(str(tiny)),
    )
    prepared = {tuple(r["input_ids"]): r["labels"] for r in trainer.train_dataset}
    for row in rows:
        labels = prepared[tuple(row["input_ids"])]
        assert labels == [t if m else -100 for t, m in zip(row["input_ids"], row["completion_mask"], strict=True)]
        # the labelled ids are the recorded completion ids, every call's, nothing re-tokenized
        assert [t for t in labels if t != -100] == _completion_ids(store, row["episode_id"])
        assert sum(row["completion_mask"]) < len(row["input_ids"])  # the prompts are not trained on

    result = train_sft(
        store, ws.path, str(tiny), build.dataset_id, SFTSettings(max_steps=1, batch_size=2), 1024, hardware=hardware
    )
    assert result.metrics["steps"] == 1 and math.isfinite(result.metrics["train_loss"])


def test_a_grpo_step_on_agent_episodes_trains_the_sampled_ids_with_the_verifiers_rewards(setup, monkeypatch) -> None:
    from campflow.bootcamps.base import Action
    from campflow.hardware import resolve_hardware
    from campflow.training.agent_rl import train_agent_rl

    root, tiny, ws, instances = setup
    store = ws.store
    calculator = registry.make("calculator")
    prompts = instances[2:]
    answers = {}
    for inst in prompts:  # the oracle's submitted answer
        state = calculator.new_state(inst)
        while (action := calculator.oracle(inst, state)).name != "submit":
            calculator.apply(inst, state, Action(action.name, action.arguments))
        answers[inst.id] = action.arguments["answer"]
    (root / "answers.json").write_text(json.dumps(answers))
    (root / "parity_agent.py").write_text(textwrap.dedent(PARITY_AGENT))
    monkeypatch.setenv("CAMPFLOW_TEST_ANSWERS", str(root / "answers.json"))
    steps = []
    result = train_agent_rl(
        store,
        ws.path,
        str(tiny),
        prompts,
        RLSettings(max_steps=1, num_generations=4, prompts_per_step=2, temperature=1.0, learning_rate=1e-3),
        f"{PYTHON} {root / 'parity_agent.py'}",
        RolloutSettings(episode_timeout=60),
        max_new_tokens=8,
        hardware=resolve_hardware("cpu", "fp32"),
        on_step=lambda output, run_id: steps.append((output, run_id)),
    )
    assert result.metrics["steps"] == 1 and len(steps) == 1
    assert all(math.isfinite(loss) for _, loss in result.metrics["loss_curve"])
    assert result.metrics["merged_share"] == 1.0  # the agent only appends: one sequence per episode
    output, run_id = steps[0]
    stored = {
        r["episode_id"]: r
        for r in store.query("SELECT episode_id, reward, termination FROM episodes WHERE run_id = ?", [run_id])
    }
    assert sorted(stored) == sorted(output["episode_id"]) and len(stored) == 8
    # the rewards are the verifier's, as the episodes recorded them; and they differ (the step learns)
    assert output["reward"] == [stored[e]["reward"] for e in output["episode_id"]]
    assert {stored[e]["termination"] for e in stored} <= {"solved", "wrong_answer"} and len(set(output["reward"])) == 2
    for episode_id, completion, mask, logprobs in zip(
        output["episode_id"], output["completion_ids"], output["env_mask"], output["logprobs"], strict=True
    ):
        # the ids the loss sees are exactly those the model sampled, in every call, with their logprobs
        assert [t for t, m in zip(completion, mask, strict=True) if m] == _completion_ids(store, episode_id)
        calls = read_calls(store, [episode_id])
        assert len(calls) == 2 and [lp for lp, m in zip(logprobs, mask, strict=True) if m] == [
            lp for c in calls for lp in c["logprobs"]
        ]
    # what TRL logged as the step's reward is the mean of the verifier's
    assert result.metrics["reward_curve"][0][1] == pytest.approx(sum(output["reward"]) / len(output["reward"]))


@pytest.mark.slow
@pytest.mark.timeout(1200)  # about 17 agent processes and a cycle's flows: minutes on a loaded 2-core machine
@pytest.mark.usefixtures("prefect_harness")
def test_campflow_improve_with_the_openai_sdk_example_runs_one_cycle_to_a_decision_and_a_report(tmp_path) -> None:
    from campflow.storage.query import run_sql
    from tests.conftest import run_cli
    from tests.loop_config import write_tiny_config

    config = write_tiny_config(
        tmp_path / "ws",
        rollout__episode_timeout=60,
        rollout__concurrency=8,
        eval__bootcamps=["calculator"],
        eval__n=2,
        eval__levels=[1],
        synthesis__n_per_cluster=1,
        synthesis__max_clusters=1,
        synthesis__probes_per_variant=1,
        training__levels=[1],
        training__collect_n=4,
        training__sft__max_steps=2,
        training__rl__band_samples=2,
        improve__variant_eval_n=2,
        improve__curriculum_n=1,
    )
    agent = f"{PYTHON} {REPO / 'examples' / 'agents' / 'openai_loop.py'}"
    done = run_cli("improve", "--agent", agent, "--config", str(config), "--cycle-id", "c1", timeout=1100)
    assert done.returncode == 0, done.stderr[-3000:]
    db = tmp_path / "ws" / "campflow.duckdb"

    def sql(query: str) -> list[tuple]:
        return run_sql(db, query, wait_s=30).rows

    status, decision, state = sql("SELECT status, decision, state FROM cycles WHERE cycle_id = 'c1'")[0]
    assert status == "completed" and decision.startswith("pass_rate ")
    state = json.loads(state)
    assert Path(state["report"]).exists()
    # every rollout of the cycle went through the agent: each of its episodes' calls are in proxy_calls
    rollouts = [state["eval_before"], state["collect_run"], state["eval_after"]]
    rollouts += [r for r in (state.get("rl_band_run"), state.get("probe_before"), state.get("probe_after")) if r]
    for run in rollouts:
        ((episodes, without_calls),) = sql(
            "SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM proxy_calls p "
            f"WHERE p.episode_id = e.episode_id)) FROM episodes e WHERE run_id = '{run}'"
        )
        assert episodes > 0 and without_calls == 0, run
    # the teacher answered the agent in the model's tokens, and SFT trained on those ids
    ((teacher,),) = sql(f"SELECT DISTINCT model_id FROM episodes WHERE run_id = '{state['collect_run']}'")
    assert teacher == "demonstrator"
    ((source,),) = sql(f"SELECT filter->>'source' FROM datasets WHERE dataset_id = '{state['dataset']}'")
    assert source == "agent_episodes"
