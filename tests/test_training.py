"""Training: the embedded model, datasets from episodes, SFT and RL through TRL (small sizes)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import pytest

from campflow.agents.oracle import NoisyOraclePolicy, OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances, train_instances
from campflow.config import FilterConfig, load_config
from campflow.errors import SplitLeakError
from campflow.hardware import resolve_hardware
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage.store import Store
from campflow.training.base import ensure_base
from campflow.training.filtering import build_sft_dataset, export_verl
from tests.numerics import assert_same_weights

TEXT = [e.name for e in registry.entries() if e.modality == "text" and e.origin == "builtin"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A workspace with a small base model and oracle + noisy episodes on train and eval instances."""
    ws = tmp_path_factory.mktemp("train")
    cfg = load_config(
        None,
        {
            "workspace.path": str(ws),
            "training.tiny.corpus_per_level": 8,
            "training.tiny.pretrain.steps": 40,
            "training.levels": [1, 2],
        },
        env={},
    )
    store = Store(cfg.workspace.db_path)
    base = ensure_base(store, cfg)
    train = [i for b in ("calculator", "maze") for i in train_instances(registry.make(b), 24, levels=[1, 2])]
    evals = [i for b in ("calculator", "maze") for i in eval_instances(registry.make(b), 4)]
    store.write_instances(train, split="train")
    store.write_instances(evals, split="eval")
    specs = [EpisodeSpec(registry.make(i.bootcamp), i) for i in train + evals]
    for run_id, policy in (("teacher", OraclePolicy()), ("noisy", NoisyOraclePolicy(0.3, 0.3, 0.3, seed=2))):
        store.start_run(run_id, "collect", {}, policy.model_id)
        store.write_episodes(asyncio.run(run_episodes(specs, policy, run_id=run_id)))
    return cfg, store, base


@pytest.mark.parametrize("name", TEXT)
def test_the_schema_trl_renders_from_an_environment_equals_the_tool_schema(name: str) -> None:
    from transformers.utils import get_json_schema

    from campflow.training.environments import environment_class

    env = environment_class(name)()
    bootcamp = registry.make(name)
    for tool in bootcamp.tools(bootcamp.generate(None, 0)):
        assert get_json_schema(getattr(env, tool.name)) == tool.schema()


@pytest.mark.numeric
def test_the_tiny_model_builds_offline_in_range_and_deterministically(small, tmp_path) -> None:
    from transformers import AutoConfig

    from campflow.training.tinymodel import build_tiny_model

    cfg, _, base = small
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert 1_000_000 <= base.metrics["parameters"] <= 10_000_000
    again = build_tiny_model(tmp_path / "again", cfg.training.tiny, sorted(cfg.training.bootcamps))
    assert again.init_fingerprint == base.metrics["init_fingerprint"]  # the same bits before training, anywhere
    assert_same_weights(again.path, base.path)  # copy-pretrained: equal within float tolerance
    assert AutoConfig.from_pretrained(base.path).model_type == "qwen3"


def test_the_base_is_copy_pretrained_and_says_so(small) -> None:
    import torch
    from transformers import AutoTokenizer

    from campflow.training.copying import SEPARATOR, copy_batch

    _, _, base = small
    m = base.metrics
    assert m["copy_steps"] == 40 and m["copy_final_loss"] < m["copy_first_loss"] - 0.5, m
    saved = json.loads((base.path / "campflow.json").read_text())["pretraining"]
    assert saved == {k: m[k] for k in saved} and len(saved) == 4

    tok = AutoTokenizer.from_pretrained(base.path)
    batch = copy_batch(tok, torch.Generator().manual_seed(0), batch=64, length=12)
    ids, labels = batch["input_ids"], batch["labels"]
    n = (ids.shape[1] - 1) // 2
    assert 4 <= n <= 12 and (ids[:, n] == tok.convert_tokens_to_ids(SEPARATOR)).all()
    assert torch.equal(ids[:, :n], ids[:, n + 1 :]) and torch.equal(labels[:, n + 1 :], ids[:, n + 1 :])
    assert (labels[:, : n + 1] == -100).all()
    specials = set(tok.all_special_ids) | set(tok.get_added_vocab().values())
    assert not specials & set(ids[:, :n].flatten().tolist())
    digits = set(tok.convert_tokens_to_ids([str(d) for d in range(10)]))
    share = sum(t in digits for t in ids[:, :n].flatten().tolist()) / ids[:, :n].numel()
    assert 0.35 < share < 0.65


def test_trl_parses_a_tool_call_the_tokenizer_renders(small) -> None:
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    _, _, base = small
    tok = add_response_schema(AutoTokenizer.from_pretrained(base.path))
    call = {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "12 + 305"}}}
    prompt = [{"role": "user", "content": "add"}]
    full = tok.apply_chat_template(
        prompt + [{"role": "assistant", "content": "", "tool_calls": [call]}], tokenize=False
    )
    head = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    completion = tok(full[len(head) :])["input_ids"]
    parsed = tok.parse_response(completion, prefix="")
    assert parsed["tool_calls"][0]["function"] == call["function"]
    digits = [tok.decode([i]) for i in tok("305")["input_ids"]]
    assert digits == ["3", "0", "5"]


def test_the_sft_dataset_loads_from_disk_and_renders_with_tools_exactly(small) -> None:
    import datasets
    from transformers import AutoTokenizer

    cfg, store, base = small
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter)
    ds = datasets.load_from_disk(str(build.path))
    assert len(ds) == build.rows == 48 and set(build.per_bootcamp) == {"calculator", "maze"}
    tok = AutoTokenizer.from_pretrained(base.path)
    for row in ds:
        text = tok.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=False)
        assert "null" not in text, "arguments of one tool must not pick up keys of another"
        assert "<tools>" in text and '"name": "submit"' in text
    calc = next(r for r in ds if r["bootcamp"] == "calculator")
    call = next(m for m in calc["messages"] if m.get("tool_calls"))["tool_calls"][0]["function"]
    assert set(call["arguments"]) == {"expression"}
    assert build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter).reused


def test_the_filter_keeps_eval_instances_failures_and_duplicates_out(small) -> None:
    cfg, store, _ = small
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher", "noisy"], FilterConfig(balance=False))
    assert build.dropped["eval_split"] == 16  # 8 eval instances, planted in both runs
    assert build.dropped["duplicate"] > 0  # the noisy oracle often plays the oracle's exact moves
    assert build.dropped.get("not_solved", 0) + build.dropped.get("invalid_calls", 0) > 0


def test_a_dataset_limited_to_chosen_episodes_holds_exactly_those_that_pass_the_filter(small) -> None:
    cfg, store, _ = small
    full = build_sft_dataset(store, cfg.workspace.path, ["teacher"], FilterConfig(balance=False))
    rows = _rows(full.path)
    chosen = sorted(r["episode_id"] for r in rows)[:5]
    cut = build_sft_dataset(
        store, cfg.workspace.path, ["teacher", "noisy"], FilterConfig(balance=False), episode_ids=chosen
    )
    assert cut.rows == 5 and sorted(r["episode_id"] for r in _rows(cut.path)) == chosen
    assert cut.dataset_id != full.dataset_id


def test_an_eval_instance_recorded_as_train_is_still_caught_by_its_seed(small) -> None:
    cfg, store, _ = small
    leak = eval_instances(registry.make("calculator"), 6)[5]  # never recorded as eval in this store
    store.write_instances([leak], split="train")  # a wrong record: an eval-range seed marked as train
    store.start_run("leaky", "collect", {}, "oracle")
    store.write_episodes(
        asyncio.run(run_episodes([EpisodeSpec(registry.make("calculator"), leak)], OraclePolicy(), run_id="leaky"))
    )
    build = build_sft_dataset(store, cfg.workspace.path, ["leaky", "teacher"], cfg.training.filter)
    assert build.dropped["eval_split"] == 8 + 1  # the planted eval instances, and the mislabelled one
    assert leak.id not in {r["instance_id"] for r in _rows(build.path)}


def _rows(path: Path) -> list[dict]:
    import datasets

    return list(datasets.load_from_disk(str(path)))


def test_the_split_check_refuses_a_dataset_with_an_eval_instance() -> None:
    from campflow.bootcamps.splits import assert_not_eval

    with pytest.raises(SplitLeakError, match="eval-split instance"):
        assert_not_eval(["a", "b"], {"b"}, what="the SFT dataset")


def test_verl_export_has_prompt_ground_truth_and_extra_info(small, tmp_path) -> None:
    import pyarrow.parquet as pq

    cfg, store, _ = small
    build = export_verl(store, ["teacher"], cfg.training.filter, tmp_path / "rl.parquet")
    table = pq.read_table(tmp_path / "rl.parquet").to_pylist()
    assert len(table) == build.rows == 48
    row = table[0]
    identity = json.loads(row["reward_model"]["ground_truth"])
    inst = registry.make(identity["bootcamp"]).generate(identity["params"], identity["seed"])
    assert inst.id == identity["instance_id"] == row["extra_info"]["instance_id"]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]


def test_local_policy_generates_in_batches_and_its_calls_go_through_the_engine_parser(small) -> None:
    from campflow.agents.local import LocalPolicy

    _, _, base = small
    policy = LocalPolicy(base.path, batch_size=8, max_new_tokens=8)
    calc = registry.make("calculator")
    specs = [EpisodeSpec(calc, i) for i in eval_instances(calc, 8, levels=[1])]
    episodes = asyncio.run(run_episodes(specs, policy, concurrency=8))
    assert len(episodes) == 8 and policy.model_id == base.model_id
    assert all(e.turns >= 1 and e.completion_tokens > 0 for e in episodes)
    assert policy._batches < sum(e.turns for e in episodes), "turns of different episodes share batches"


@pytest.mark.numeric
def test_sft_then_rl_record_the_lineage_base_sft_rl(small) -> None:
    from campflow.training.rl import rl_instances, train_rl
    from campflow.training.sft import train_sft

    cfg, store, base = small
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter)
    sft_cfg = cfg.training.sft.model_copy(update={"max_steps": 3, "batch_size": 4})
    sft = train_sft(store, cfg.workspace.path, base.model_id, build.dataset_id, sft_cfg)
    assert sft.metrics["loss_curve"][-1][1] < sft.metrics["loss_curve"][0][1]
    rl_cfg = cfg.training.rl.model_copy(
        update={
            "max_steps": 1,
            "num_generations": 2,
            "prompts_per_step": 2,
            "instances_per_bootcamp": 2,
            "max_completion_length": 48,
        }
    )
    rl = train_rl(store, cfg.workspace.path, sft.checkpoint.model_id, ["calculator", "maze"], rl_cfg, [1])
    rows = {r["kind"]: r for r in store.query("SELECT * FROM checkpoints")}
    assert rows["sft"]["parent_model_id"] == base.model_id and rows["sft"]["dataset_id"] == build.dataset_id
    assert rows["rl"]["parent_model_id"] == sft.checkpoint.model_id
    assert Path(rows["rl"]["path"]).exists() and not Path(rows["rl"]["path"] + ".partial").exists()
    again = train_sft(store, cfg.workspace.path, base.model_id, build.dataset_id, sft_cfg)
    assert again.reused and again.checkpoint.model_id == sft.checkpoint.model_id
    assert rl.metrics["steps"] == 1
    # tool rounds default to the bootcamps' turn budget, as evaluation plays them
    prompts = rl_instances(store, ["calculator", "maze"], 2, rl_cfg.seed, [1])
    assert rl.metrics["max_tool_calling_iterations"] == max(registry.make(i.bootcamp).max_turns(i) for i in prompts)
    assert rl.metrics["max_completion_length"] == 48 and 0 <= rl.metrics["clipped_ratio"] <= 1


def test_an_rl_episode_fits_the_bootcamps_turn_budget_and_twice_its_demonstration(small) -> None:
    from transformers import AutoTokenizer

    from campflow.training.rl import demonstration_tokens, episode_limits

    cfg, _, base = small
    tokenizer = AutoTokenizer.from_pretrained(base.path)
    maze = registry.make("maze")
    long = train_instances(maze, 3, levels=[2])
    short = train_instances(registry.make("calculator"), 3, levels=[1])
    demo = {i.id: demonstration_tokens(tokenizer, i, vision=False) for i in long + short}
    # the level-2 maze's demonstrations, tool results included, run past the old fixed 256 tokens
    assert max(demo[i.id] for i in long) > 256 > max(demo[i.id] for i in short) > 0
    limits = episode_limits(cfg.training.rl, tokenizer, long + short, vision=False)
    assert limits.tool_rounds == max(maze.max_turns(i) for i in long)
    assert limits.completion_tokens % 64 == 0
    assert 2 * max(demo.values()) <= limits.completion_tokens < 2 * max(demo.values()) + 64
    fixed = cfg.training.rl.model_copy(update={"max_completion_length": 100, "max_tool_calling_iterations": 3})
    assert episode_limits(fixed, tokenizer, long, vision=False) == type(limits)(100, 3)


def test_what_the_model_writes_after_the_final_tool_is_masked_out_of_rl() -> None:
    from campflow.training.rl import final_round, final_tools, mask_after_round

    assert final_tools(["maze"]) == {"maze": {"submit"}}
    call = {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "move"}}]}
    messages = [
        call,
        {"role": "tool", "name": "move", "content": "You moved south to (3, 2)."},
        call,
        {"role": "tool", "name": "submit", "content": "Error: invalid arguments for submit: ..."},
        call,
        {"role": "tool", "name": "submit", "content": "Submitted at (1, 2)."},
        call,
        {"role": "tool", "name": "move", "content": "Error: the episode has already ended."},
        {"role": "assistant", "content": "<tool_call>"},
    ]
    assert final_round(messages, {"submit"}) == 3  # the rejected submit did not end the episode
    assert final_round(messages[:4], {"submit"}) is None
    # rounds: model 1 1, tool 0 0, model 1, tool 0, model 1 1, tool 0 0 (submit's result), model 1, tool 0, model 1 1
    mask = [1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 1]
    assert mask_after_round(mask, 3) == [1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    assert mask_after_round(mask, 9) == mask  # no such round: nothing masked


def test_the_models_own_loss_equals_trls_fused_loss_on_the_same_batch(small, tmp_path) -> None:
    """campflow's default SFT loss (the model's cross-entropy) is TRL's objective, not a different one."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig

    from campflow.hardware import resolve_hardware
    from campflow.training.sft import checkpointing_arg, sft_trainer

    cfg, store, base = small
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter)
    train = datasets.load_from_disk(str(build.path))
    tokenizer = AutoTokenizer.from_pretrained(base.path)
    model = AutoModelForCausalLM.from_pretrained(base.path)
    args = SFTConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        report_to=[],
        assistant_only_loss=True,
        disable_tqdm=True,
        **resolve_hardware("cpu").trainer_args,
        **checkpointing_arg(SFTConfig, False),
    )
    ours = sft_trainer(False, model=model, args=args, train_dataset=train, processing_class=tokenizer)
    trls = sft_trainer(True, model=model, args=args, train_dataset=train, processing_class=tokenizer)
    batch = next(iter(ours.get_train_dataloader()))
    assert (batch["labels"] == -100).any() and (batch["labels"] != -100).any()  # assistant-only labels
    model.train()
    with torch.no_grad():
        a = ours.compute_loss(model, dict(batch))
        b = trls.compute_loss(model, dict(batch))
    assert torch.isfinite(a) and abs(float(a) - float(b)) < 1e-4 * max(1.0, float(b)), (float(a), float(b))
    assert ours.tokens_seen == trls.tokens_seen == int(batch["attention_mask"].sum())


@pytest.mark.parametrize("grouped, strategy", [(True, "group_by_length"), (False, "random")])
def test_sft_batches_sequences_of_similar_length_when_asked(tmp_path, grouped, strategy):
    from campflow.config import SFTSettings
    from campflow.training.sft import sft_arguments

    args = sft_arguments(
        SFTSettings(group_by_length=grouped),
        resolve_hardware("cpu"),
        tmp_path,
        512,
    )
    assert args.train_sampling_strategy == strategy


@pytest.mark.slow
def test_models_and_datasets_built_with_a_relative_workspace_are_found_from_another_folder(
    prefect_harness, tmp_path, monkeypatch
) -> None:
    """`make run` writes into ./campflow-data; a later command from elsewhere names that workspace by its path.

    The base and the dataset are built here in this process, as `campflow train base` and `campflow dataset
    build` build them (a workspace config naming the relative folder, run from the project's folder); the
    commands that must find them from another folder run as a user runs them."""
    import re

    from prefect.settings import PREFECT_API_URL

    from campflow.storage.workspace import Workspace
    from tests.conftest import run_cli

    def ok(*argv: str, cwd: Path, workspace: str) -> str:
        out = run_cli(*argv, "-w", workspace, "-c", str(config), cwd=cwd, env=env)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return out.stdout

    env = {"PREFECT_API_URL": str(PREFECT_API_URL.value())}
    config = tmp_path / "tiny.yaml"
    config.write_text(
        "training:\n  tiny:\n    vocab_size: 600\n    hidden_size: 32\n    intermediate_size: 64\n    layers: 1\n"
        "    heads: 2\n    kv_heads: 1\n    corpus_per_level: 4\n    pretrain:\n      steps: 2\n"
    )
    here, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(here)
    cfg = load_config(config, {"workspace.path": "campflow-data", "training.bootcamps": ["calculator"]}, env={})
    ws = Workspace.from_config(cfg)
    assert not ws.path.is_absolute()
    calc = registry.make("calculator")
    teacher = train_instances(calc, 4)
    ws.store.write_instances(teacher, split="train")
    ws.store.start_run("teacher", "collect", {}, "oracle")
    ws.store.write_episodes(
        asyncio.run(run_episodes([EpisodeSpec(calc, i) for i in teacher], OraclePolicy(), run_id="teacher"))
    )
    dataset = build_sft_dataset(ws.store, ws.path, ["teacher"], cfg.training.filter).dataset_id
    base = ensure_base(ws.store, cfg).model_id
    monkeypatch.chdir(tmp_path)

    workspace = str(here / "campflow-data")
    trained = ok(
        "train", "sft", "--from", base, "--dataset", dataset, "--steps", "1", cwd=elsewhere, workspace=workspace
    )
    sft = re.search(r"sft (sft-\S+) \(from", trained).group(1)
    ok(
        "eval",
        "-b",
        "calculator",
        "-p",
        "local",
        "-m",
        sft,
        "-n",
        "1",
        "--run-id",
        "sft-eval",
        cwd=elsewhere,
        workspace=workspace,
    )
    assert not (elsewhere / "campflow-data").exists()
    rows = Store(here / "campflow-data" / "campflow.duckdb").query(
        "SELECT count(*) AS n FROM episodes WHERE run_id = 'sft-eval' AND model_id = ?", [sft]
    )
    assert rows[0]["n"] >= 1


def test_checkpoints_are_recorded_by_absolute_path_and_a_missing_folder_is_one_clear_error(
    tmp_path, monkeypatch
) -> None:
    from campflow.training import checkpoints

    monkeypatch.chdir(tmp_path)
    store = Store(Path("campflow-data") / "campflow.duckdb")
    inside, outside = Path("campflow-data/models/sft-a"), tmp_path / "elsewhere" / "sft-b"
    for folder in (inside, outside):
        folder.mkdir(parents=True)
    checkpoints.register(store, "sft-a", "sft", inside)
    checkpoints.register(store, "sft-b", "sft", outside)
    recorded = {r["model_id"]: r["path"] for r in store.query("SELECT model_id, path FROM checkpoints")}
    assert recorded == {"sft-a": str(tmp_path / inside), "sft-b": str(outside)}  # usable from any folder, SQL's too
    assert checkpoints.get(store, "campflow-data/models/sft-a").model_id == "sft-a"  # named by its path, as given
    assert checkpoints.get(store, str(tmp_path / inside)).model_id == "sft-a"

    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    there = Store(tmp_path / "campflow-data" / "campflow.duckdb")
    with there.connection() as con:  # recorded before 2026-12-03: relative to the folder its command ran in
        con.execute("UPDATE checkpoints SET path = 'campflow-data/models/sft-a' WHERE model_id = 'sft-a'")
    assert checkpoints.get(there, "sft-a").path == tmp_path / inside

    shutil.rmtree(outside)  # as `campflow gc` does
    with pytest.raises(checkpoints.UnknownCheckpointError, match=f"sft-b is recorded at {outside}, which does not"):
        checkpoints.get(there, "sft-b")
    assert checkpoints.find(there, "sft-b") is None
