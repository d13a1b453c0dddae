"""verifiers both ways, with environments campflow did not write (tests/verifiers_envs/, written against
verifiers' public API the way its documentation writes them) and verifiers' own evaluation.

- a single-turn math environment with an ``answer`` column and an ``eval_dataset``: imported, vetted (the
  reference answer as a reply earns full reward; the hack battery's probes do not), evaluated through a
  scripted OpenAI-compatible endpoint, one SFT step on the endpoint's solved train episodes;
- a stateful tool environment (a counter per rollout, the ``state`` argument hidden and filled by
  ``update_tool_args``): imported without an oracle (its reward needs the tools' work), played through
  the endpoint: the tool's work is rewarded, the answer alone is not;
- a planted rubric rewarding any reply: refused, naming the exploit.

The export side (``calculator`` and an MCP task bootcamp run by ``vf-eval``) is tests/test_verifiers_export.py.

The verifiers environment is built by ``make verifiers`` (CI builds it); where it is not built the tests
skip, except in CI, where they fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import re

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps.splits import eval_instances, train_instances
from campflow.config import load_config
from campflow.errors import ImportSourceError
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec
from campflow.storage.store import Store
from campflow.testing.scripted_server import ScriptedEndpoint
from tests.conftest import REPO

VENV = REPO / ".venv-verifiers" / "bin" / "python"
ENVS = REPO / "tests" / "verifiers_envs"
SETTINGS = RolloutSettings(episode_timeout=120.0)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    if not VENV.exists():
        if os.environ.get("CI") or os.environ.get("CAMPFLOW_REQUIRE_VLLM"):
            pytest.fail("CI builds .venv-verifiers (make verifiers); it is missing")
        pytest.skip("verifiers' environment is made by `make verifiers`")
    ws = tmp_path_factory.mktemp("vf")
    cfg = load_config(
        None,
        {
            "workspace.path": str(ws),
            "training.tiny.vocab_size": 600,
            "training.tiny.hidden_size": 32,
            "training.tiny.intermediate_size": 64,
            "training.tiny.layers": 1,
            "training.tiny.heads": 2,
            "training.tiny.kv_heads": 1,
            "training.tiny.corpus_per_level": 4,
            "training.tiny.pretrain.steps": 2,
        },
        env={},
    )
    return cfg, Store(cfg.workspace.db_path)


def imported(workspace, path: str, name: str, notes: list[str]):
    """Vet and record one environment file as bootcamp ``name`` (the Python API of ``campflow import verifiers``)."""
    from campflow.sources.verifiers_vetting import vet_environment
    from campflow.storage.imports import import_bootcamp

    _, store = workspace
    options = vet_environment(str(ENVS / path), {}, say=notes.append)
    spec = ImportSpec(name=name, adapter="verifiers", source=str(ENVS / path), options=options)
    return import_bootcamp(spec, store, cross_process=False, say=notes.append)


def sums(request: dict) -> dict:
    """A model that adds the prompt's two numbers right, except when the first is odd (then off by one)."""
    user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    a, b = (int(x) for x in re.findall(r"\d+", user)[:2])
    answer = a + b + (a % 2)
    call = {"id": "c0", "type": "function", "function": {"name": "submit", "arguments": json.dumps({"answer": answer})}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def counter_moves(request: dict) -> dict:
    """A model that calls add(target) once, then submits the target; for odd targets it skips the tool."""
    messages = request["messages"]
    user = next(m["content"] for m in messages if m["role"] == "user")
    target = int(re.findall(r"\d+", user)[-1])
    called = any(m.get("tool_calls") for m in messages if m["role"] == "assistant")
    if target % 2 == 0 and not called:
        name, args = "add", {"amount": target}
    else:
        name, args = "submit", {"answer": str(target)}
    call = {"id": f"c{len(messages)}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def played(bootcamp, instances, script, store, run_id: str) -> list:
    from campflow.agents.openai_policy import EndpointPolicy

    with ScriptedEndpoint(script) as endpoint:
        policy = EndpointPolicy("scripted", base_url=endpoint.url, max_retries=0)
        store.start_run(run_id, "evaluate", {}, policy.model_id)
        episodes = asyncio.run(
            run_episodes([EpisodeSpec(bootcamp, i) for i in instances], policy, SETTINGS, run_id=run_id)
        )
    store.write_episodes(episodes)
    return episodes


@pytest.mark.slow
def test_a_single_turn_math_environment_imports_vets_evaluates_and_trains_one_sft_step(workspace) -> None:
    from campflow.training.base import ensure_base
    from campflow.training.filtering import build_sft_dataset
    from campflow.training.sft import train_sft

    cfg, store = workspace
    notes: list[str] = []
    spec, bootcamp = imported(workspace, "math_single_turn.py", "vf-math", notes)
    assert spec.options["oracle"] and spec.options["answer_format"] == "{answer}" and not notes, notes
    assert sorted(bootcamp.levels) == [1] and [t.name for t in bootcamp.tools(bootcamp.generate(None, 0))] == ["submit"]
    probes = store.query(
        "SELECT count(*) AS n, coalesce(max(reward) FILTER (WHERE verdict <> 'oracle_agrees'), 0) AS top, "
        "count(*) FILTER (WHERE verdict = 'hack') AS hacks FROM verifier_probes WHERE subject = 'vf-math'"
    )[0]
    # empty, echoed, hedged, 100 KB: nothing earns a reward, but for an echo that is the answer (row 0 asks
    # "0 + 3": its second number is its sum), which the oracle would give too
    assert probes["n"] > 10 and probes["top"] == 0.0 and probes["hacks"] == 0, probes

    evals, train = eval_instances(bootcamp, 4), train_instances(bootcamp, 8)
    assert {i.data["split"] for i in evals} == {"eval"} and {i.data["split"] for i in train} == {"train"}
    assert not {json.dumps(i.data["prompt"]) for i in evals} & {json.dumps(i.data["prompt"]) for i in train}
    store.write_instances(evals, split="eval")
    store.write_instances(train, split="train")

    oracle = asyncio.run(run_episodes([EpisodeSpec(bootcamp, i) for i in evals], OraclePolicy(), SETTINGS))
    assert [(e.reward, e.termination) for e in oracle] == [(1.0, Termination.SOLVED)] * 4

    for instances, run_id in ((evals, "vf-math-eval"), (train, "vf-math-train")):
        episodes = played(bootcamp, instances, sums, store, run_id)
        for instance, episode in zip(instances, episodes, strict=True):
            a = int(re.findall(r"\d+", instance.data["prompt"][-1]["content"])[0])
            assert episode.reward == (0.0 if a % 2 else 1.0), (instance.data, episode.transcript[-2:])
            assert episode.details["metrics"]["exact_answer"] == episode.reward
    build = build_sft_dataset(store, cfg.workspace.path, ["vf-math-train"], cfg.training.filter)
    assert 0 < build.rows < len(train)  # the solved train episodes only
    with pytest.raises(Exception, match="eval"):  # the eval split is never trained on
        build_sft_dataset(store, cfg.workspace.path, ["vf-math-eval"], cfg.training.filter)
    base = ensure_base(store, cfg)
    trained = train_sft(
        store, cfg.workspace.path, base.model_id, build.dataset_id, cfg.training.sft.model_copy(update={"max_steps": 1})
    )
    assert trained.checkpoint.parent_model_id == base.model_id and trained.checkpoint.dataset_id == build.dataset_id


@pytest.mark.slow
def test_a_stateful_tool_environment_rewards_the_tools_work_not_the_answer_alone(workspace) -> None:
    _, store = workspace
    notes: list[str] = []
    spec, bootcamp = imported(workspace, "counter_tools.py", "vf-counter", notes)
    assert not spec.options["oracle"] and any("no oracle" in n for n in notes), notes
    assert [t.name for t in bootcamp.tools(bootcamp.generate(None, 0))] == ["add", "submit"]
    schema = bootcamp.tool_schemas(bootcamp.generate(None, 0))[0]["function"]["parameters"]
    assert list(schema["properties"]) == ["amount"]  # the state argument stays hidden, as verifiers hides it

    instances = [bootcamp.generate({"level": 1, "row": r}, 0) for r in range(len(bootcamp.rows[("train", 1)]))]
    episodes = played(bootcamp, instances, counter_moves, store, "vf-counter")
    for instance, episode in zip(instances, episodes, strict=True):
        target = int(instance.data["answer"])
        expected = 1.0 if target % 2 == 0 else 0.0  # odd targets: the answer without the tool's work
        assert (episode.reward, episode.success) == (expected, bool(expected)), episode.transcript
        assert episode.details["metrics"]["add_calls"] == (1.0 if expected else 0.0)
        if expected:
            assert "counter is now" in next(m["content"] for m in episode.transcript if m["role"] == "tool")


@pytest.mark.slow
def test_a_rubric_that_rewards_any_reply_is_refused_naming_the_exploit(workspace) -> None:
    _, store = workspace
    with pytest.raises(ImportSourceError, match=r"rewards a non-solution.*empty"):
        imported(workspace, "any_reply.py", "vf-any", [])
    assert not store.query("SELECT name FROM imported_bootcamps WHERE name = 'vf-any'")


def test_bad_input_is_one_line_exit_2_and_starts_nothing(tmp_path) -> None:
    from tests.conftest import run_cli

    ws = str(tmp_path / "ws")
    for args, says in (
        (["--kwargs", "{bad"], "--kwargs '{bad' is not JSON"),
        (["--kwargs", "[1]"], "expected a JSON object"),
    ):
        done = run_cli(
            "import", "verifiers", str(ENVS / "math_single_turn.py"), "--name", "x", *args, "--workspace", ws
        )
        assert done.returncode == 2 and says in done.stderr + done.stdout, (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
    missing = run_cli("import", "verifiers", str(tmp_path / "nope.py"), "--workspace", ws)
    assert missing.returncode == 2 and "nope.py: no such file" in missing.stderr + missing.stdout
    assert not (tmp_path / "ws" / "campflow.duckdb").exists()
