"""Bootcamps exported as a verifiers environment package and run by verifiers' own ``vf-eval``.

One export (``campflow export --format verifiers --variants``) of two bootcamps: ``calculator``, with an
accepted synthesized variant on record, and an MCP task bootcamp imported from task rows on the standard
library's notes server (docs/mcp.md's, from tests/test_bootcamp_subclasses.py: it starts in milliseconds,
and every rollout starts one). The package is not installed: ``vf-eval`` finds its module on
``PYTHONPATH``, so verifiers' environment is left as it was. One ``vf-eval`` process runs two evaluations
of a TOML config side by side against scripted OpenAI-compatible endpoints:

- the oracle (every rollout twice, the MCP rollouts of one task side by side, each on its own server):
  mean reward 1.0 as vf-eval reports it, every rollout solved;
- a noisy oracle that gives up on every other calculator row and answers an MCP task's question wrong
  (partial credit, a metric of its own): per row the rewards campflow's own evaluation of those
  instances through the same endpoint gives.

No process of the run (the campflow processes playing the rows, a notes server) outlives ``vf-eval``.

The dataset holds the variant's train instances and never an eval or probe instance (the first train
draws, recorded as eval, are drawn past; a row edited to pose one is refused); a bootcamp whose episodes
share one URL server is not exported. The verifiers environment is built by ``make verifiers``; where it
is not built the tests skip, except in CI.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from campflow.bootcamps import registry
from campflow.bootcamps.base import Action
from campflow.bootcamps.splits import eval_instances
from campflow.config import load_config
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, run_episodes
from campflow.storage.store import Store
from campflow.testing.scripted_server import OracleScript, ScriptedEndpoint, action_message
from tests.conftest import REPO

VENV = REPO / ".venv-verifiers"
SETTINGS = RolloutSettings(episode_timeout=120.0)
NOTES_TASKS = [
    {
        "id": "two-notes",
        "level": 1,
        "prompt": "Add the note 'milk', then the note 'eggs'. Your notes are kept in {workdir}.",
        "reference": [
            {"tool": "add_note", "arguments": {"text": "milk"}},
            {"tool": "add_note", "arguments": {"text": "eggs"}},
        ],
        # exactly these two: a server shared with another rollout of the task would hold four
        "checks": [{"call": {"tool": "list_notes"}, "path": ["notes"], "equals": ["milk", "eggs"]}],
    },
    {
        "id": "count",
        "level": 2,
        "prompt": "Add the note 'tea', read the notes back, and answer how many there are.",
        "reference": [
            {"tool": "add_note", "arguments": {"text": "tea"}},
            {"tool": "list_notes", "arguments": {}},
        ],
        "answer": "1",
        "checks": [
            {"call": {"tool": "list_notes"}, "path": ["notes"], "equals": ["tea"]},
            {"answer": True, "equals": "1"},
        ],
    },
]


def asks(request: dict) -> str:
    """The task a chat request poses: its user message, up to the episode's folder where it names one
    (the exported row says ``{workdir}``, the rollout's episode its own folder)."""
    return task(next(m["content"] for m in request["messages"] if m["role"] == "user"))


def task(prompt: str) -> str:
    """A prompt up to the folder it names."""
    return prompt.split(" Your notes are kept in ")[0]


class ReferenceScript:
    """The oracle of MCP task instances at an endpoint: the task's reference calls in turn, then ``submit``
    with its answer (the server's state lives in campflow's episode, so the calls made so far say where it is)."""

    def __init__(self, bootcamp, instances, *, answer: str | None = None) -> None:
        self.by_prompt = {task(bootcamp.prompt(i)[-1]["content"]): i for i in instances}
        self.answer = answer  # submitted instead of the task's own, where given

    def __call__(self, request: dict) -> dict:
        instance = self.by_prompt[asks(request)]
        made = sum(len(m.get("tool_calls") or []) for m in request["messages"] if m["role"] == "assistant")
        reference = instance.data["reference"]
        if made < len(reference):
            action = Action(reference[made]["tool"], reference[made]["arguments"])
        else:
            action = Action("submit", {"answer": self.answer or instance.data["answer"]})
        return action_message(action, f"call_{made}")


def survivors(marker: str, wait_s: float = 0.0) -> list[str]:
    """Command lines of live processes naming ``marker`` (this module's temporary folder), waiting up to
    ``wait_s`` for them to exit."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:  # exited meanwhile
                continue
            if marker in cmdline:
                found.append(cmdline)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A workspace with the notes tasks imported, a calculator variant accepted and eval instances recorded,
    exported with ``--variants``: the workspace's config and store, the bootcamps, the package (folder, module,
    CONFIG), its rows' instances, the variant and the planted eval instances."""
    from typer.testing import CliRunner

    from campflow.cli import COMMAND_MODULES, app
    from campflow.envserve.server import train_stream
    from campflow.mcp.server import ServerSpec
    from campflow.mcp.tasks import parse_tasks
    from campflow.storage.imports import import_mcp_tasks
    from campflow.synthesis.proposals import Proposal
    from campflow.synthesis.validate import ValidationSettings, record_verdicts, validate_proposals
    from tests.test_bootcamp_subclasses import NOTES_SERVER

    if not (VENV / "bin" / "vf-eval").exists():
        if os.environ.get("CI") or os.environ.get("CAMPFLOW_REQUIRE_VLLM"):
            pytest.fail("CI builds .venv-verifiers (make verifiers); it is missing")
        pytest.skip("verifiers' environment is made by `make verifiers`")
    root = tmp_path_factory.mktemp("vfx")
    cfg = load_config(None, {"workspace.path": str(root / "ws")}, env={})
    store = Store(cfg.workspace.db_path)
    server = root / "notes_server.py"
    server.write_text(NOTES_SERVER)
    rows = parse_tasks([json.dumps(t) for t in NOTES_TASKS], "notes.jsonl")
    spec = ServerSpec(command=[sys.executable, str(server), "--db", "{workdir}/notes.json"])
    notes_spec, notes = import_mcp_tasks("mcp-notes", spec, rows, store)

    proposal = Proposal("calculator", "c1", "test", {"steps": 2, "max_operand": 40, "operations": "+-", "level": 1})
    settings = ValidationSettings(instances_per_variant=2, probes_per_variant=2, calibration_samples=0)
    result = validate_proposals(store, [proposal], settings)
    record_verdicts(store, result.verdicts, "synth")
    (variant,) = result.accepted
    planted = []  # the first train draw of each, recorded as eval: the export must draw past it
    for bootcamp in (registry.make("calculator"), notes):
        planted.append(train_stream(cfg, bootcamp.name).draw(0))
        store.write_instances([*eval_instances(bootcamp, 4), planted[-1]], split="eval")

    out = root / "pkg"
    (root / "campflow.yaml").write_text(f"workspace:\n  path: {root / 'ws'}\n")
    for command in COMMAND_MODULES:  # as `campflow` does: every command registered
        importlib.import_module(f"campflow.cli.{command}")
    done = CliRunner().invoke(
        app,
        [
            *("export", "--format", "verifiers", "--bootcamps", "calculator,mcp-notes", "--n", "2", "--variants"),
            *("--out", str(out), "--config", str(root / "campflow.yaml")),
        ],
        env={"COLUMNS": "200"},
    )
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    assert "calculator 4 (2 of variants), mcp-notes 2 (0 of variants)" in said, said
    wrong = CliRunner().invoke(app, ["export", "--format", "hf", "--runs", "r", "--variants", "--out", str(root / "x")])
    assert wrong.exit_code == 2 and "--variants goes with --format verifiers" in wrong.output, wrong.output
    assert not (root / "x").exists()
    module = next(out.glob("campflow_*.py"))
    config = json.loads(re.search(r'r"""(.*?)"""', module.read_text(), re.S).group(1))
    by_name = {"calculator": registry.make("calculator"), "mcp-notes": notes}
    instances = [by_name[r["bootcamp"]].generate(r["params"], r["seed"]) for r in config["rows"]]
    return SimpleNamespace(
        cfg=cfg,
        store=store,
        bootcamps=by_name,
        notes_spec=notes_spec,
        out=out,
        module=module.stem,
        config=config,
        instances=instances,
        variant=variant,
        planted=planted,
    )


def test_the_export_holds_the_variants_train_instances_and_never_an_eval_or_probe_instance(exported) -> None:
    from campflow.envserve.verifiers_play import Player

    store, config, instances, variant, planted = (
        exported.store,
        exported.config,
        exported.instances,
        exported.variant,
        exported.planted,
    )
    ids = [r["instance_id"] for r in config["rows"]]
    assert ids == [i.id for i in instances]  # each row poses its instance again, as recorded
    held_out = store.eval_ids() | store.probe_ids()
    assert len(store.eval_ids()) == 10 and len(store.probe_ids()) == 2
    assert not set(ids) & held_out and {i.id for i in planted} <= held_out
    assert [r["instance_id"] for r in config["rows"] if r["variant_id"] == variant.variant_id] == sorted(
        i.id for i in variant.instances
    )
    assert not {i.id for i in variant.probes} & set(ids)
    notes = [r for r in config["rows"] if r["bootcamp"] == "mcp-notes"]
    assert sorted(r["level"] for r in notes) == [1, 2]
    tools = {t["name"]: t["parameters"] for t in notes[0]["tool_defs"]}  # the server's own schemas, and submit
    assert set(tools) == {"add_note", "list_notes", "submit"} and tools["add_note"]["required"] == ["text"]

    # a row edited to pose a held-out instance is refused by the process that plays the rows
    player = Player(config["db"], None, "verifiers-refusals", config["workspace"])
    probe = variant.probes[0]
    for instance in (planted[0], probe):
        with pytest.raises(ValueError, match=f"instance {instance.id} of calculator is held out"):
            player.open(instance.bootcamp, instance.params.model_dump(mode="json"), instance.seed)
    assert not store.query("SELECT * FROM episodes WHERE run_id = 'verifiers-refusals'")


def test_a_bootcamp_whose_episodes_share_one_server_is_not_exported(exported) -> None:
    from campflow.envserve.verifiers_export import ExportError, export_verifiers
    from campflow.mcp.tasks import build
    from campflow.sources import ImportSpec

    url = "http://127.0.0.1:9/mcp"  # never reached: refused before any episode
    server = {"url": url, "reset": {"tool": "reset"}}
    spec = ImportSpec(
        name="mcp-notes-shared", adapter="mcp", source=url, options={**exported.notes_spec.options, "server": server}
    )
    registry.register("mcp-notes-shared", lambda: build(spec))
    out = exported.out.parent / "shared"
    with pytest.raises(ExportError, match=f"every episode of the server {url} shares its one state"):
        export_verifiers(exported.cfg, ["mcp-notes-shared"], out)
    assert not out.exists()


@pytest.mark.slow
def test_vf_eval_runs_the_export_the_oracle_earns_1_and_the_noisy_oracle_campflows_own_rewards(exported) -> None:
    from campflow.agents.openai_policy import EndpointPolicy

    bootcamps, store, out, module = exported.bootcamps, exported.store, exported.out, exported.module
    config, instances = exported.config, exported.instances
    asked = {task(bootcamps[i.bootcamp].prompt(i)[-1]["content"]): i.bootcamp for i in instances}
    folders: list[str] = []  # where the model was told the notes are kept
    by_bootcamp = {
        "calculator": OracleScript([i for i in instances if i.bootcamp == "calculator"]),
        "mcp-notes": ReferenceScript(bootcamps["mcp-notes"], [i for i in instances if i.bootcamp == "mcp-notes"]),
    }

    def oracle(request: dict) -> dict:
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        folders.extend(re.findall(r"Your notes are kept in (\S+)\.$", user))
        return by_bootcamp[asked[asks(request)]](request)

    errs = {task(bootcamps[i.bootcamp].prompt(i)[-1]["content"]) for i in instances[1::2]}
    wrong_answer = ReferenceScript(
        bootcamps["mcp-notes"], [i for i in instances if i.bootcamp == "mcp-notes"], answer="7"
    )

    def noisy(request: dict) -> dict:
        """The oracle on every other row; on the rest prose without a call (calculator), or the task's work
        with a wrong answer (an MCP task: partial credit where the answer is checked)."""
        if asks(request) not in errs:
            return oracle(request)
        if asked[asks(request)] == "mcp-notes":
            return wrong_answer(request)
        return {"role": "assistant", "content": "I give up."}

    with ScriptedEndpoint(oracle) as exact, ScriptedEndpoint(noisy) as wrong:
        results = out.parent / "vf-results"
        toml = out.parent / "evals.toml"
        common = 'model = "scripted"\napi_key_var = "CAMPFLOW_NO_MODEL"\ndisable_env_server = true\n'
        toml.write_text(
            f"{common}num_examples = -1\ndisable_tui = true\nsave_results = true\n\n"
            f'[[eval]]\nid = "{module}"\nname = "exact"\napi_base_url = "{exact.url}"\nrollouts_per_example = 2\n'
            f'output_dir = "{results}/exact"\n\n'
            f'[[eval]]\nid = "{module}"\nname = "noisy"\napi_base_url = "{wrong.url}"\nrollouts_per_example = 1\n'
            f'output_dir = "{results}/noisy"\n'
        )
        try:
            done = subprocess.run(
                [str(VENV / "bin" / "vf-eval"), str(toml)],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=out.parent,
                env={**os.environ, "PYTHONPATH": str(out), "CAMPFLOW_NO_MODEL": "none"},
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"vf-eval did not finish: {str(exc.stdout)[-3000:]}{str(exc.stderr)[-5000:]}")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        policy = EndpointPolicy("scripted", base_url=wrong.url, max_retries=0)
        specs = [EpisodeSpec(bootcamps[i.bootcamp], i) for i in instances]
        own = asyncio.run(run_episodes(specs, policy, SETTINGS))

    # the campflow processes vf-eval's environments started, and every episode's notes server, are gone with it
    assert not survivors(str(out.parent), wait_s=60), survivors(str(out.parent))

    # vf-eval's own report: one block per evaluation, its endpoint and its mean reward
    reported = {
        url: float(mean) for url, mean in re.findall(r"Provider: (\S+).*?\nreward: avg - ([0-9.]+)", done.stdout, re.S)
    }
    assert reported[exact.url] == 1.0 and reported[wrong.url] < 1.0, done.stdout[-3000:]
    # the row says {workdir}; each rollout's model was told its own episode's folder
    assert any("{workdir}" in json.dumps(r["prompt"]) for r in config["rows"])
    assert folders and all(f.startswith("/") for f in folders) and len(set(folders)) >= 3, folders

    def saved(name: str) -> list[dict]:
        (path,) = (results / name).rglob("results.jsonl")
        return [json.loads(line) for line in path.read_text().splitlines()]

    solved = saved("exact")
    assert len(solved) == 2 * len(instances)
    assert {(o["reward"], o["solved"]) for o in solved} == {(1.0, 1.0)}, solved
    noisy_run = {o["example_id"]: o for o in saved("noisy")}
    assert [noisy_run[k]["reward"] for k in range(len(instances))] == [e.reward for e in own]
    # the noisy rows did fail: two calculator rows given up, the MCP task that asks a count answered wrong
    assert [(i.bootcamp, i.level, e.reward) for i, e in zip(instances, own, strict=True)][1::2] == [
        ("calculator", 2, 0.0),
        ("calculator", 1, 0.0),
        ("mcp-notes", 2, 0.5),
    ]
    assert (noisy_run[5]["solved"], noisy_run[5]["partial_credit"]) == (0.0, 0.5)  # the metrics beside the reward
    # every rollout is a campflow episode in the store, under the export's run
    recorded = store.query(
        "SELECT bootcamp, reward, model_id FROM episodes WHERE run_id = ? ORDER BY bootcamp", [config["run_id"]]
    )
    assert len(recorded) == 3 * len(instances) and {r["model_id"] for r in recorded} == {"verifiers"}
    assert sorted(r["reward"] for r in recorded) == sorted([1.0] * 2 * len(instances) + [e.reward for e in own])
    assert sum(r["bootcamp"] == "mcp-notes" for r in recorded) == 3 * sum(i.bootcamp == "mcp-notes" for i in instances)
