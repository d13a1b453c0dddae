"""Teachers: the current model (best-of-k) or a stronger one writes the SFT data, the oracle fills in
where no sample passed, every row names its teacher, and a thinking model keeps its reasoning."""

from __future__ import annotations

import json

import pytest

from campflow.bootcamps import registry
from campflow.bootcamps.splits import train_instances
from campflow.config import load_config
from campflow.serving import CheckpointServers
from campflow.testing.scripted_server import OracleScript, ScriptedEndpoint

pytestmark = pytest.mark.usefixtures("prefect_harness")

TINY_QWEN3 = {
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
}


class ThinkingScript:
    """The oracle's moves with a distinct thought before each: as ``reasoning_content`` on even turns and as a
    leading ``<think>`` block in the content on odd ones (the two ways servers return reasoning)."""

    def __init__(self, oracle: OracleScript) -> None:
        self.oracle = oracle

    def __call__(self, request):
        message = dict(self.oracle(request))
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        thought = f"thought {turn} about {abs(hash(user)) % 10_000}: the next step is this one"
        if turn % 2 == 0:
            message["reasoning_content"] = thought
        else:
            message["content"] = f"<think>{thought}</think>" + (message.get("content") or "")
        return message


def _cfg(ws, url: str, teacher: str, **extra):
    overrides = {
        "workspace.path": str(ws),
        "training.bootcamps": ["calculator"],
        "training.levels": [1],
        "training.collect_n": 6,
        "training.teacher": teacher,
        "training.self_samples": 2,
        "training.tiny": TINY_QWEN3,
        "serving.kind": "endpoint",
        "serving.base_url": url,
        "serving.model": "scripted",
        "eval.bootcamps": ["calculator"],
        "rollout.workers": 1,
    }
    overrides.update(extra)
    return load_config(None, overrides, env={})


def test_self_teacher_rows_keep_each_turns_reasoning_as_a_qwen3_template_renders_it(tmp_path) -> None:
    import datasets
    from transformers import AutoTokenizer

    from campflow.flows.teachers import collect_teachers
    from campflow.storage.workspace import Workspace
    from campflow.tasks.training import build_dataset_task
    from campflow.training.base import ensure_base

    calc = registry.make("calculator")
    train = train_instances(calc, 6, seed=0, levels=[1])
    known = train[::2]  # the model "solves" half of them; the oracle must teach the rest
    with ScriptedEndpoint(ThinkingScript(OracleScript(known))) as server:
        cfg = _cfg(tmp_path / "ws", server.url, "self+oracle")
        store = Workspace.from_config(cfg).store
        base = ensure_base(store, cfg)
        with CheckpointServers(cfg) as servers:
            runs = collect_teachers(cfg, servers, base.path, "c1", None)
        assert server.requests > 0
    assert runs == ["c1-collect", "c1-collect-oracle"]
    oracle_ids = {
        r["instance_id"]
        for r in store.query("SELECT DISTINCT instance_id FROM episodes WHERE run_id = 'c1-collect-oracle'")
    }
    assert oracle_ids == {i.id for i in train} - {i.id for i in known}

    def dataset_rows():  # the dataset the task builds, from the folder the store records
        built = build_dataset_task(cfg, runs, str(base.path))
        return datasets.load_from_disk(
            store.stored_path(store.query("SELECT path FROM datasets WHERE dataset_id = ?", [built])[0]["path"])
        )

    rows = list(dataset_rows())
    teachers = {r["instance_id"]: (r["teacher"], r["oracle_no_reasoning"]) for r in rows}
    assert {i: t for i, t in teachers.items() if i in oracle_ids} == {
        i: ("demonstrator", True) for i in oracle_ids
    }  # the oracle teacher plays grounded
    assert {t for i, t in teachers.items() if i not in oracle_ids} == {("scripted", False)}
    tok = AutoTokenizer.from_pretrained(base.path)
    checked = 0
    for row in rows:
        if row["teacher"] != "scripted":
            continue
        rendered = tok.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=False)
        for m in row["messages"]:
            if m["role"] == "assistant":
                thought = m.get("reasoning_content")
                assert thought and thought.startswith("thought "), m  # a <think> block was moved out of content
                assert "<think>" not in (m.get("content") or "")
                assert f"<think>\n{thought}\n</think>" in rendered
                checked += 1
    assert checked >= 2 * len(known)  # every kept assistant turn, a call and an answer per episode at least

    cfg.training.exclude_oracle_for_thinking = True
    without = dataset_rows()
    assert set(without["teacher"]) == {"scripted"}


def test_an_endpoint_teacher_without_a_model_is_one_config_error(tmp_path) -> None:
    from campflow.errors import ConfigError
    from campflow.flows.teachers import teacher_config

    cfg = _cfg(tmp_path / "ws", "http://127.0.0.1:9/v1", "endpoint")
    with pytest.raises(ConfigError, match=r"training.teacher_endpoint.model and .base_url are required"):
        teacher_config(cfg, CheckpointServers(cfg), tmp_path, "endpoint")
