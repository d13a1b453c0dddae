"""Any Hugging Face model as the starting point: the chat format is read from the model's own template.

A second tiny model speaks TRL's Qwen3 template (thinking: ``<think>`` blocks) and goes through
evaluation, the SFT dataset, SFT and RL; Llama 3 replies are parsed by TRL's parser for that template.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from campflow.agents.templates import chat_format, parse_reply
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances, train_instances
from campflow.config import load_config
from tests import fixed_chats


def _trl_template(name: str) -> str:
    from trl import chat_template_utils

    return getattr(chat_template_utils, f"{name}_chat_template")


@pytest.mark.parametrize(
    "template, family, tool_calls, thinking",
    [
        ("qwen2_5", "qwen2.5", "text", False),
        ("qwen3", "qwen3", "text", True),
        ("qwen3_instruct_2507", "qwen3-instruct", "text", False),
        ("llama3_1", "llama3", "parsed", False),
        ("llama3_2", "llama3", "parsed", False),
    ],
)
def test_the_chat_format_is_read_from_the_templates_text(template, family, tool_calls, thinking) -> None:
    fmt = chat_format(_trl_template(template))
    assert (fmt.family, fmt.tool_calls, fmt.thinking) == (family, tool_calls, thinking)


def test_an_unknown_template_that_writes_tool_call_blocks_is_read_as_hermes_text() -> None:
    custom = _trl_template("qwen2_5").replace("You are Qwen", "You are a custom model")
    assert chat_format(custom).family == "hermes" and chat_format(custom).tool_calls == "text"
    assert chat_format(None).family == "unknown"


@pytest.fixture(scope="module")
def llama_tokenizer(tmp_path_factory):
    """The fixed-chat tokenizer speaking TRL's Llama 3.1 template (the template, not the vocabulary, is tested)."""
    from campflow.training.tinymodel import build_tokenizer, chat_template

    tok = build_tokenizer(fixed_chats.corpus(chat_template()), 400)
    tok.chat_template = _trl_template("llama3_1")
    return tok


@pytest.mark.parametrize(
    "reply, content, calls",
    [
        (
            '{"name": "calculate", "parameters": {"expression": "2 + 3"}}<|eot_id|>',
            "",
            [("calculate", {"expression": "2 + 3"})],
        ),
        ("The answer is 5.<|eot_id|>", "The answer is 5.", []),
        ('{"name": "calculate", "parameters": {"expression": <|eot_id|>', None, []),
    ],
)
def test_a_llama3_reply_is_parsed_by_trls_parser_for_its_template(llama_tokenizer, reply, content, calls) -> None:
    prompt = llama_tokenizer.apply_chat_template(
        fixed_chats.conversations(1)[0][:2], tools=fixed_chats.TOOLS, add_generation_prompt=True, tokenize=False
    )
    parsed = parse_reply(llama_tokenizer, reply, prompt, fixed_chats.TOOLS)
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed["tool_calls"] or []]
    assert got == calls
    if content is not None:
        assert parsed["content"] == content
    else:  # a malformed call is the model's text, for the engine to count as its format error
        assert parsed["tool_calls"] is None and '"calculate"' in parsed["content"]


@pytest.fixture(scope="module")
def thinking(tmp_path_factory):
    """A tiny model with TRL's Qwen3 (thinking) template, oracle episodes on calculator, the store."""
    from campflow.agents.oracle import OraclePolicy
    from campflow.rollout.engine import EpisodeSpec, run_episodes
    from campflow.storage.store import Store
    from campflow.training.base import ensure_base

    ws = tmp_path_factory.mktemp("thinking")
    cfg = load_config(
        None,
        {
            "workspace.path": str(ws),
            "training.bootcamps": ["calculator"],
            "training.levels": [1],
            "training.tiny": {
                "corpus_per_level": 4,
                "vocab_size": 600,
                "hidden_size": 64,
                "intermediate_size": 128,
                "layers": 2,
                "heads": 2,
                "kv_heads": 1,
                "max_positions": 1024,
                "chat_template": "qwen3",
                "pretrain": {"steps": 0},
            },
        },
        env={},
    )
    store = Store(cfg.workspace.db_path)
    base = ensure_base(store, cfg)
    calc = registry.make("calculator")
    train = train_instances(calc, 16, levels=[1])
    store.write_instances(train, split="train")
    store.write_instances(eval_instances(calc, 4, levels=[1]), split="eval")
    store.start_run("teacher", "collect", {}, "oracle")
    store.write_episodes(
        asyncio.run(run_episodes([EpisodeSpec(calc, i) for i in train], OraclePolicy(), run_id="teacher"))
    )
    return cfg, store, base


def test_the_thinking_model_speaks_trls_qwen3_template(thinking) -> None:
    from transformers import AutoTokenizer

    _, _, base = thinking
    tok = AutoTokenizer.from_pretrained(base.path)
    assert tok.chat_template == _trl_template("qwen3")
    assert chat_format(tok.chat_template).thinking


def test_the_thinking_model_is_evaluated_and_sees_its_reasoning_as_its_template_renders_it(thinking) -> None:
    from transformers import AutoTokenizer

    from campflow.agents.chat import template_messages
    from campflow.agents.local import LocalPolicy
    from campflow.rollout.engine import EpisodeSpec, run_episodes

    _, _, base = thinking
    calc = registry.make("calculator")
    policy = LocalPolicy(base.path, batch_size=4, max_new_tokens=8)
    episodes = asyncio.run(run_episodes([EpisodeSpec(calc, i) for i in eval_instances(calc, 4, levels=[1])], policy))
    assert len(episodes) == 4 and all(e.turns >= 1 and e.completion_tokens > 0 for e in episodes)
    assert policy.send_reasoning, "a thinking template decides where earlier reasoning shows"
    tok = AutoTokenizer.from_pretrained(base.path)
    call = {"id": "c0", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "1 + 2"}'}}
    transcript = [
        {"role": "user", "content": "add"},
        {"role": "assistant", "content": "", "reasoning_content": "add them first", "tool_calls": [call]},
        {"role": "tool", "name": "calculate", "content": "3"},
    ]
    text = tok.apply_chat_template(template_messages(transcript), add_generation_prompt=True, tokenize=False)
    assert "<think>\nadd them first\n</think>" in text  # within the current turn, Qwen3 shows the reasoning


@pytest.mark.numeric
def test_the_thinking_model_trains_with_trls_qwen3_training_template_through_sft_and_rl(thinking) -> None:
    from transformers import AutoTokenizer
    from trl import chat_template_utils

    from campflow.training.filtering import build_sft_dataset
    from campflow.training.rl import train_rl
    from campflow.training.sft import train_sft
    from campflow.training.templates import check_rl_template

    cfg, store, base = thinking
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter)
    assert build.rows == 16
    tok = AutoTokenizer.from_pretrained(base.path)
    assert chat_template_utils.get_training_chat_template(tok) == chat_template_utils.qwen3_training_chat_template
    sft = train_sft(
        store,
        cfg.workspace.path,
        base.model_id,
        build.dataset_id,
        cfg.training.sft.model_copy(update={"max_steps": 12, "batch_size": 4, "learning_rate": 5e-3}),
    )
    curve = sft.metrics["loss_curve"]
    assert curve[-1][1] < curve[0][1]
    check_rl_template(tok, base.path)
    assert tok.response_template == chat_template_utils.qwen3_template
    rl_cfg = cfg.training.rl.model_copy(
        update={
            "max_steps": 1,
            "num_generations": 2,
            "prompts_per_step": 1,
            "instances_per_bootcamp": 2,
            "max_completion_length": 24,
        }
    )
    rl = train_rl(store, cfg.workspace.path, sft.checkpoint.model_id, ["calculator"], rl_cfg, [1])
    assert rl.metrics["steps"] == 1 and rl.checkpoint.parent_model_id == sft.checkpoint.model_id


def test_a_model_folder_trl_cannot_train_is_refused_in_one_line(tmp_path) -> None:
    from transformers import AutoTokenizer

    from campflow.training.templates import UnsupportedTemplateError, check_rl_template, check_sft_template
    from campflow.training.tinymodel import build_tokenizer, chat_template

    tok = build_tokenizer(fixed_chats.corpus(chat_template()), 400)
    tok.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    tok.save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    with pytest.raises(UnsupportedTemplateError, match="no training version of this chat template"):
        check_sft_template(tok, tmp_path)
    with pytest.raises(UnsupportedTemplateError, match="cannot render tool calls"):
        check_rl_template(tok, tmp_path)


def test_a_model_folder_the_user_brings_is_adopted_as_the_base_of_sft(thinking, tmp_path) -> None:
    import shutil

    from campflow.training.filtering import build_sft_dataset
    from campflow.training.sft import train_sft

    cfg, store, base = thinking
    folder = tmp_path / "my-qwen3"
    shutil.copytree(base.path, folder, ignore=shutil.ignore_patterns("campflow.json"))  # a plain save_pretrained
    build = build_sft_dataset(store, cfg.workspace.path, ["teacher"], cfg.training.filter)
    sft = train_sft(
        store,
        cfg.workspace.path,
        str(folder),
        build.dataset_id,
        cfg.training.sft.model_copy(update={"max_steps": 1, "batch_size": 2}),
    )
    parent = store.query("SELECT kind, path FROM checkpoints WHERE model_id = ?", [sft.checkpoint.parent_model_id])[0]
    assert (parent["kind"], parent["path"]) == ("base", str(folder.resolve()))
