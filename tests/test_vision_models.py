"""Vision-language models: the tiny VLM built offline, image observations through the local policy and its
processor, datasets that keep their images (SFT rows and the verl export), SFT through TRL, and the
observation mode chosen from what a model can see."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from campflow.agents.local import LocalPolicy
from campflow.agents.oracle import DemonstratorPolicy
from campflow.agents.vision import encode_conversation, is_vision_model, load_processor, observation_mode
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances, train_instances
from campflow.config import load_config
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage.store import Store
from campflow.training.base import ensure_vision_base
from campflow.training.filtering import build_sft_dataset, export_verl
from tests.numerics import assert_same_weights

VISION = ["gridworld", "chart", "gui"]
# Small sizes: the tests build, run and train the model in seconds.
TINY_VL = {
    "training.tiny_vl.corpus_per_level": 2,
    "training.tiny_vl.vocab_size": 600,
    "training.tiny_vl.hidden_size": 64,
    "training.tiny_vl.intermediate_size": 128,
    "training.tiny_vl.layers": 2,
    "training.tiny_vl.heads": 2,
    "training.tiny_vl.kv_heads": 1,
    "training.tiny_vl.vision_hidden_size": 32,
    "training.tiny_vl.vision_intermediate_size": 64,
    "training.tiny_vl.vision_layers": 1,
    "training.tiny_vl.vision_heads": 2,
    "training.tiny_vl.max_image_pixels": 128 * 128,
    "training.tiny_vl.pretrain.steps": 10,  # the language model's copy pretraining runs, briefly
    "training.tiny_vl.read.steps": 6,  # and its reading pretraining
    "training.tiny_vl.read.instances": 4,
}


def _cfg(ws, **more):
    return load_config(
        None,
        {"workspace.path": str(ws), "training.bootcamps": VISION, "training.levels": [1], **TINY_VL, **more},
        env={},
    )


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    """A workspace with the tiny VLM and grounded-demonstrator episodes on image-mode train instances."""
    ws = tmp_path_factory.mktemp("vision")
    cfg = _cfg(ws)
    store = Store(cfg.workspace.db_path)
    base = ensure_vision_base(store, cfg)
    train = [i for b in VISION for i in train_instances(registry.make(b), 4, levels=[1], observation="image")]
    store.write_instances(train, split="train")
    store.start_run("teacher", "collect", {}, "demonstrator")
    specs = [EpisodeSpec(registry.make(i.bootcamp), i) for i in train]
    store.write_episodes(asyncio.run(run_episodes(specs, DemonstratorPolicy(), run_id="teacher")))
    return cfg, store, base


@pytest.mark.numeric
def test_the_tiny_vlm_builds_offline_deterministically_for_a_seed(vl, tmp_path) -> None:
    from transformers import AutoConfig
    from trl.chat_template_utils import qwen3_vl_chat_template

    from campflow.training.tinyvlm import build_tiny_vlm

    cfg, _, base = vl
    config = AutoConfig.from_pretrained(base.path)
    assert config.model_type == "qwen3_vl" and base.metrics["vision"]
    assert base.metrics["copy_steps"] == 10 and base.metrics["copy_final_loss"] < base.metrics["copy_first_loss"]
    assert base.metrics["read_steps"] == 6 and base.metrics["read_examples"] == 3 * 4  # 4 of each vision bootcamp
    assert is_vision_model(base.path)
    processor = load_processor(base.path)
    assert processor.chat_template == qwen3_vl_chat_template  # TRL's, byte for byte
    image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert image_pad == config.image_token_id != processor.tokenizer.unk_token_id
    small = cfg.training.tiny_vl.model_copy(update={"corpus_per_level": 1})
    first, again = (build_tiny_vlm(tmp_path / name, small, ["gridworld"]) for name in ("first", "again"))
    assert first.init_fingerprint == again.init_fingerprint  # the same bits before training, anywhere
    assert_same_weights(first.path, again.path)  # copy- and reading-pretrained: equal within float tolerance
    other = small.model_copy(update={"seed": 1})
    assert build_tiny_vlm(tmp_path / "other", other, ["gridworld"]).init_fingerprint != first.init_fingerprint


@pytest.mark.parametrize("name", VISION)
def test_a_prompt_renders_one_image_token_group_per_image_with_the_grids_tokens(vl, name: str) -> None:
    _, _, base = vl
    processor = load_processor(base.path)
    b = registry.make(name)
    instance = b.generate({**b.levels[1].model_dump(), "observation": "image"}, 3)
    encoded = encode_conversation(processor, b.prompt(instance), b.tool_schemas(instance))
    ids, grid = encoded["input_ids"], encoded["image_grid_thw"]
    start = processor.tokenizer.convert_tokens_to_ids("<|vision_start|>")
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert ids.count(start) == len(grid) == 1
    assert ids.count(pad) == int(grid.prod(dim=-1).sum()) // 4  # 2x2 patches per image token


def test_a_gridworld_episode_in_image_mode_runs_through_the_local_policy_batched_as_alone(vl) -> None:
    _, _, base = vl
    b = registry.make("gridworld")
    instances = eval_instances(b, 2, levels=[1], observation="image")
    specs = [EpisodeSpec(b, i) for i in instances]

    def play(batch_size: int):
        policy = LocalPolicy(base.path, max_new_tokens=8, batch_size=batch_size, device="cpu")
        return asyncio.run(run_episodes(specs, policy, run_id="vision")), policy

    together, policy = play(2)
    assert policy._batches < sum(e.turns for e in together)  # episodes shared batches
    assert all(e.termination.is_model_failure for e in together)  # an untrained model fails, never infra_error
    assert any(p.get("type") == "image_url" for p in together[0].transcript[1]["content"])
    alone, _ = play(1)
    assert [e.transcript for e in alone] == [e.transcript for e in together]


def test_the_local_policy_gives_the_model_the_image_tokens_of_the_prompt(vl) -> None:
    from campflow.agents.base import TurnContext

    _, _, base = vl
    b = registry.make("gridworld")
    instance = eval_instances(b, 1, levels=[1], observation="image")[0]
    messages, tools = b.prompt(instance), b.tool_schemas(instance)
    policy = LocalPolicy(base.path, max_new_tokens=4, device="cpu")
    reply = asyncio.run(policy.respond(messages, tools, TurnContext(b, instance, b.new_state(instance), 0, 0)))
    encoded = encode_conversation(load_processor(base.path), messages, tools)
    pad = load_processor(base.path).tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert reply.prompt_tokens == len(encoded["input_ids"]) and encoded["input_ids"].count(pad) > 0


def test_observation_mode_follows_what_the_model_can_see(vl, tmp_path) -> None:
    from campflow.config import TinyModelConfig
    from campflow.training.tinymodel import build_tiny_model

    _, _, base = vl
    text_model = tmp_path / "text"
    build_tiny_model(
        text_model,
        TinyModelConfig(
            vocab_size=300, hidden_size=32, intermediate_size=64, layers=1, heads=2, kv_heads=1, pretrain={"steps": 0}
        ),
        [],
        texts=["a b c 1 2 3"] * 4,
    )
    assert not is_vision_model(text_model)
    assert observation_mode("auto", "local", str(text_model)) == "text"
    assert observation_mode("auto", "local", str(base.path)) == "image"
    assert observation_mode("auto", "openai", "Qwen/Qwen3-VL-8B-Instruct") == "image"
    assert observation_mode("auto", "demonstrator", None) is None
    assert observation_mode("text", "local", str(base.path)) == "text"
    b = registry.make("gridworld")
    text_split = eval_instances(b, 2, levels=[1], observation="text")
    image_split = eval_instances(b, 2, levels=[1], observation="image")
    assert [i.seed for i in text_split] == [i.seed for i in image_split]
    assert {i.params.observation for i in text_split} == {"text"} and text_split[0].id != image_split[0].id
    assert eval_instances(registry.make("calculator"), 2, observation="text") == eval_instances(
        registry.make("calculator"), 2
    )


def test_a_saved_vision_row_reloads_and_renders_as_many_image_groups_as_images(vl) -> None:
    import datasets
    from PIL import Image

    cfg, store, base = vl
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter)
    assert set(build.per_bootcamp) == set(VISION)
    ds = datasets.load_from_disk(str(build.path))
    assert isinstance(ds.features["images"].feature, datasets.Image)
    processor = load_processor(base.path)
    start = processor.tokenizer.convert_tokens_to_ids("<|vision_start|>")
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for row in ds:
        episode = json.loads(store.scalar("SELECT transcript FROM episodes WHERE episode_id = ?", [row["episode_id"]]))
        sent = sum(
            1 for m in episode if isinstance(m.get("content"), list) for p in m["content"] if p["type"] == "image_url"
        )
        images = row["images"]
        assert len(images) == sent > 0 and all(isinstance(i, Image.Image) for i in images)
        if row["bootcamp"] == "gridworld":
            assert sent > 1  # the prompt's image and those the moves returned
        from trl.data_utils import prepare_multimodal_messages

        messages = prepare_multimodal_messages(row["messages"], images=images)
        out = processor.apply_chat_template(
            messages, tools=json.loads(row["tools"]), tokenize=True, return_dict=True, return_tensors="pt"
        )
        ids = out["input_ids"][0].tolist()
        assert ids.count(start) == len(images) == len(out["image_grid_thw"])
        assert ids.count(pad) == int(out["image_grid_thw"].prod(dim=-1).sum()) // 4


def test_the_verl_export_writes_image_placeholders_and_the_images_beside_them(vl, tmp_path) -> None:
    import pyarrow.parquet as pq
    from PIL import Image

    cfg, store, _ = vl
    out = tmp_path / "verl.parquet"
    export_verl(store, ["teacher"], cfg.training.filter, out)
    rows = pq.read_table(out).to_pylist()
    assert {r["extra_info"]["bootcamp"] for r in rows} == set(VISION)
    for r in rows:
        marks = sum(m["content"].count("<image>") for m in r["prompt"])
        assert marks == len(r["images"]) == 1
        Image.open(io.BytesIO(r["images"][0]["bytes"])).verify()


@pytest.mark.numeric
def test_sft_of_the_tiny_vlm_on_image_episodes_lowers_the_loss_and_keeps_the_processor(vl) -> None:
    from campflow.training.sft import train_sft

    cfg, store, base = vl
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter)
    sft_cfg = cfg.training.sft.model_copy(update={"max_steps": 4, "batch_size": 4, "learning_rate": 3e-3})
    result = train_sft(store, cfg.workspace.path, base.model_id, build.dataset_id, sft_cfg)
    losses = [loss for _, loss in result.metrics["loss_curve"]]
    assert losses[-1] < losses[0]
    assert result.metrics["device"] == "cpu" and result.metrics["precision"] == "fp32"
    assert is_vision_model(result.checkpoint.path)
    assert load_processor(result.checkpoint.path).chat_template == load_processor(base.path).chat_template


def test_a_text_model_refuses_a_dataset_with_images_in_one_line(vl, tmp_path) -> None:
    from campflow.errors import CampflowError
    from campflow.training.base import ensure_base
    from campflow.training.sft import train_sft

    cfg, store, _ = vl
    text_cfg = cfg.model_copy(deep=True)
    text_cfg.training.bootcamps = ["gridworld"]
    text_cfg.training.tiny = text_cfg.training.tiny.model_copy(
        update={
            "corpus_per_level": 1,
            "vocab_size": 400,
            "hidden_size": 32,
            "intermediate_size": 64,
            "layers": 1,
            "heads": 2,
            "kv_heads": 1,
        }
    )
    text_base = ensure_base(store, text_cfg)
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter)
    with pytest.raises(CampflowError, match="holds images but .* reads text only"):
        train_sft(store, cfg.workspace.path, text_base.model_id, build.dataset_id, cfg.training.sft)


def test_the_environments_give_a_vision_model_the_prompts_and_tools_images() -> None:
    from PIL import Image

    from campflow.training.environments import environment_class

    b = registry.make("gridworld")
    row = {"params": json.dumps({**b.levels[1].model_dump(), "observation": "image"}), "seed": 5}
    seeing, blind = environment_class("gridworld", images=True)(), environment_class("gridworld")()
    prompt = seeing.reset(**row)
    assert [p["type"] for p in prompt] == ["text", "image"] and isinstance(prompt[1]["image"], Image.Image)
    assert isinstance(blind.reset(**row), str)
    for env in (seeing, blind):
        action = b.oracle(env.instance, env.state)
        result = getattr(env, action.name)(**action.arguments)
        if env is seeing:
            assert result[0]["text"].startswith("Moved") and isinstance(result[2]["image"], Image.Image)
            assert result[1]["text"] == "Image returned by call call_0_0:"  # as the engine notes it
        else:
            assert result.startswith("Moved")


def test_an_rl_rollout_renders_a_tools_image_where_sft_and_evaluation_show_it(vl) -> None:
    """TRL renders a tool's image inside the tool turn; campflow's engine, and so every SFT row and every
    evaluation, in a user message after it. RL's rollouts are rendered as the engine's episodes are."""
    from campflow.agents.vision import vision_conversation
    from campflow.training.environments import environment_class
    from campflow.training.rl import as_evaluated

    cfg, store, base = vl
    processor = load_processor(base.path)
    row = store.query(
        """SELECT e.transcript, i.params, i.seed FROM episodes e JOIN instances i USING (instance_id)
           WHERE e.run_id = 'teacher' AND e.bootcamp = 'gridworld' LIMIT 1"""
    )[0]
    episode, params, seed = json.loads(row["transcript"]), row["params"], row["seed"]
    env = environment_class("gridworld", images=True)()
    env.reset(params=params, seed=seed)
    rollout = vision_conversation(episode[:2])  # system and prompt, as TRL's row and reset give them
    for message in episode[2:]:
        if message["role"] != "assistant":
            continue
        rollout += vision_conversation([message])
        tools = []
        for call in message["tool_calls"]:
            name, arguments = call["function"]["name"], json.loads(call["function"]["arguments"])
            tools.append({"role": "tool", "name": name, "content": getattr(env, name)(**arguments)})
        rollout += as_evaluated(tools)

    def rendered(messages):  # noqa: ANN001, ANN202
        return processor.apply_chat_template(messages, tokenize=False)

    assert sum(m["role"] == "user" for m in rollout) > 2  # frames came back from the tools
    assert rendered(rollout) == rendered(vision_conversation(episode))


def test_an_endpoint_vlm_receives_the_image_parts_and_solves_through_the_existing_policy() -> None:
    from campflow.agents.openai_policy import EndpointPolicy
    from campflow.testing.scripted_server import OracleScript, ScriptedEndpoint

    b = registry.make("gridworld")
    instances = eval_instances(b, 3, levels=[1], observation="image")
    oracle, images_seen = OracleScript(instances), []

    def script(request: dict) -> dict:
        images_seen.append(
            sum(
                1
                for m in request["messages"]
                if isinstance(m["content"], list)
                for p in m["content"]
                if p["type"] == "image_url"
            )
        )
        return oracle(request)

    with ScriptedEndpoint(script) as server:
        policy = EndpointPolicy("Qwen/Qwen3-VL-8B-Instruct", base_url=server.url, transport="httpx")
        episodes = asyncio.run(run_episodes([EpisodeSpec(b, i) for i in instances], policy))
    assert all(e.success for e in episodes)
    assert min(images_seen) >= 1 and max(images_seen) > 1  # the prompt's image, then those moves returned


def test_improve_with_the_embedded_vlm_runs_a_cycle_on_gridworld_in_image_mode(tmp_path) -> None:
    import duckdb

    from campflow.flows.improve import improve
    from tests.loop_config import write_tiny_config

    tiny_vl: dict = {}
    for key, value in TINY_VL.items():  # "training.tiny_vl.read.steps" -> {"read": {"steps": ...}}
        *sections, name = key.split(".")[2:]
        node = tiny_vl
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    path = write_tiny_config(
        tmp_path / "ws",
        eval__bootcamps=["gridworld"],
        eval__levels=[1],
        eval__n=2,
        policy__max_tokens=12,
        synthesis__calibration_samples=0,
        synthesis__probes_per_variant=1,
        training__levels=[1],
        training__collect_n=4,
        training__tiny_vl={**tiny_vl, "corpus_per_level": 1},
        training__sft={"max_steps": 2, "batch_size": 4},
        training__rl__instances_per_bootcamp=1,
        training__rl__band_samples=2,
        improve__model="embedded-vl",
        improve__curriculum_n=1,
        improve__variant_eval_n=2,
    )
    cfg = load_config(path, env={})
    summary = improve(cfg, cycle_id="v1")
    con = duckdb.connect(str(cfg.workspace.db_path), read_only=True)
    status, candidate = con.execute("SELECT status, candidate_model_id FROM cycles").fetchone()
    assert status == "completed" and candidate == summary.candidate_id
    modes = {json.loads(p)["observation"] for (p,) in con.execute("SELECT params FROM instances").fetchall()}
    assert modes == {"image"}  # eval, collection, band and curriculum instances alike
    dataset = con.execute("SELECT path FROM datasets WHERE kind = 'sft'").fetchone()[0]
    base_path = con.execute("SELECT path FROM checkpoints WHERE kind = 'base'").fetchone()[0]
    con.close()
    import datasets

    assert "images" in datasets.load_from_disk(dataset).column_names
    assert is_vision_model(base_path) and summary.report.exists()


def test_every_prompt_the_local_policy_renders_is_a_prefix_of_the_training_row(vl) -> None:
    """What SFT trains on and what the model is asked at inference agree token for token, so the model
    continues a prompt exactly as it learned to (the assistant turns' tool calls included)."""
    import datasets
    from trl.chat_template_utils import get_training_chat_template

    from campflow.training.vision_sft import VisionToolsCollator

    cfg, store, base = vl
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter)
    processor = load_processor(base.path)
    collator = VisionToolsCollator(processor, get_training_chat_template(processor))
    rows = datasets.load_from_disk(str(build.path))
    batch = collator([dict(r) for r in rows])
    for i, row in enumerate(rows):
        trained = batch["input_ids"][i][batch["attention_mask"][i] == 1].tolist()
        learned = processor.tokenizer.decode(batch["input_ids"][i][batch["labels"][i] != -100])
        assert learned.count("<tool_call>") == sum(1 for m in row["messages"] if m["role"] == "assistant")
        episode = json.loads(store.scalar("SELECT transcript FROM episodes WHERE episode_id = ?", [row["episode_id"]]))
        for k, message in enumerate(episode):
            if message["role"] == "assistant":
                asked = encode_conversation(processor, episode[:k], json.loads(row["tools"]))["input_ids"]
                assert trained[: len(asked)] == asked


def test_a_vlms_text_mode_rows_train_on_exactly_the_prompts_it_is_given(vl) -> None:
    """TRL renders a VLM's text rows through the processor (strings made text parts); the rows SFT hands
    it still begin with every prompt the local policy renders."""
    import datasets
    from trl.chat_template_utils import get_training_chat_template
    from trl.data_utils import _tokenize

    from campflow.training.sft import _empty_turns_as_parts

    cfg, store, base = vl
    b = registry.make("gridworld")
    train = train_instances(b, 3, seed=9, levels=[1], observation="text")
    store.write_instances(train, split="train")
    store.start_run("teacher-text", "collect", {}, "demonstrator")
    store.write_episodes(
        asyncio.run(run_episodes([EpisodeSpec(b, i) for i in train], DemonstratorPolicy(), run_id="teacher-text"))
    )
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher-text"], cfg.training.filter)
    processor = load_processor(base.path)
    template = get_training_chat_template(processor)
    for row in datasets.load_from_disk(str(build.path)):
        assert "images" not in row
        tools = json.loads(row["tools"])
        trained = list(
            _tokenize(processor, _empty_turns_as_parts(row)["messages"], chat_template=template, tools=tools)[
                "input_ids"
            ]
        )
        episode = json.loads(store.scalar("SELECT transcript FROM episodes WHERE episode_id = ?", [row["episode_id"]]))
        for k, message in enumerate(episode):
            if message["role"] == "assistant":
                asked = encode_conversation(processor, episode[:k], tools)["input_ids"]
                assert trained[: len(asked)] == asked


def _walks(name: str, instance) -> list[tuple[bytes, str]]:  # noqa: ANN001
    """(frame, answer) of ``instance`` after 0, 1, ... of the oracle's actions, as reading rows show them."""
    import dataclasses

    from campflow.agents.vision import png_bytes
    from campflow.bootcamps.splits import level_params
    from campflow.training.reading import MAX_WALK, text_view

    bootcamp = registry.make(name)
    twin = dataclasses.replace(instance, params=level_params(bootcamp, instance.level, "text"))
    state, twin_state = bootcamp.new_state(instance), bootcamp.new_state(twin)
    prompt = next(m for m in bootcamp.prompt(instance) if m["role"] == "user")["content"]
    frame = png_bytes(next(p["image_url"]["url"] for p in prompt if p["type"] == "image_url"))
    view = text_view(next(m for m in bootcamp.prompt(twin) if m["role"] == "user")["content"])
    out = [(frame, bootcamp.caption(instance, state) or view)]
    for _ in range(MAX_WALK):
        action = bootcamp.oracle(instance, state)
        if bootcamp.is_final(action.name):
            break
        frame = bootcamp.apply(instance, state, action).image or frame
        view = text_view(bootcamp.apply(twin, twin_state, action).text)
        out.append((frame, bootcamp.caption(instance, state) or view))
    return out


@pytest.mark.parametrize("name", VISION)
def test_reading_rows_pair_a_frame_along_the_oracles_path_with_what_it_shows(name: str) -> None:
    from PIL import Image

    from campflow.training.reading import reading_rows

    rows = reading_rows([name, "calculator"], 12, seed=0)
    assert len(rows) == 12  # calculator has no image mode
    steps = []
    for row, instance in zip(rows, train_instances(registry.make(name), 12, seed=0, observation="image")):
        assert [p["type"] for p in row["messages"][0]["content"]] == ["text", "image"]
        assert len(row["images"]) == 1 and row["images"][0].size == tuple(instance.data["image_size"])
        shown = [
            k
            for k, (frame, answer) in enumerate(_walks(name, instance))
            if row["messages"][1]["content"] == answer
            and list(Image.open(io.BytesIO(frame)).convert("RGB").getdata()) == list(row["images"][0].getdata())
        ]
        assert shown, "the answer is what the frame shows, some oracle steps in"
        steps.append(shown[0])
    if name == "gridworld":  # its oracle moves the agent: frames come from along the walk, not only the prompt's
        assert len(set(steps)) > 3, steps


def test_a_gridworld_caption_names_where_the_agent_and_the_goal_stand() -> None:
    gridworld = registry.make("gridworld")
    for instance in train_instances(gridworld, 8, seed=0, levels=[1, 2]):
        state = gridworld.new_state(instance)
        (x, y), (gx, gy) = instance.data["start"], instance.data["goal"]
        caption = gridworld.caption(instance, state)
        assert caption.startswith(f"You ({x}, {y}). Goal ({gx}, {gy}). Walls ")
        if instance.data["doors"]:
            assert " locked" in caption and "Keys " in caption
