"""Looking at episodes: Inspect logs read back with inspect-ai, `campflow show` in the terminal."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from campflow.agents.oracle import NoisyOraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.errors import ExportError, RunNotFoundError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.storage.workspace import Workspace
from campflow.synthesis.pipeline import analyze_run
from tests.conftest import run_cli

BOOTCAMPS = ("calculator", "chart")  # a text bootcamp and an image one
THOUGHT = "Five minus four: one operation, then submit."


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Workspace:
    """A workspace with run ``r1``: a noisy oracle on calculator and chart (4 instances each), failures mined."""
    ws = Workspace(tmp_path_factory.mktemp("viewing") / "ws")
    store = ws.store
    for name in BOOTCAMPS:
        bootcamp = registry.make(name)
        instances = eval_instances(bootcamp, 4)
        store.write_instances(instances, split="eval")
        policy = NoisyOraclePolicy(p_wrong_answer=0.5, p_malformed=0.2, seed=3)
        episodes = asyncio.run(run_episodes([EpisodeSpec(bootcamp, i) for i in instances], policy, run_id="r1"))
        if name == "calculator":  # the engine keeps a reasoning model's thoughts beside the content
            reply = next(m for m in episodes[0].transcript if m["role"] == "assistant")
            reply["reasoning_content"] = THOUGHT
        store.write_episodes(episodes)
    analyze_run(store, "r1")
    return ws


def _transcripts(ws: Workspace) -> dict[str, dict]:
    return {
        r["episode_id"]: {**r, "transcript": json.loads(r["transcript"])}
        for r in ws.store.query("SELECT episode_id, transcript, reward, termination, bootcamp FROM episodes")
    }


def test_a_run_exported_as_an_inspect_log_reads_back_one_sample_per_episode_with_its_messages(
    recorded: Workspace, tmp_path: Path
) -> None:
    from inspect_ai.log import read_eval_log, resolve_sample_attachments
    from inspect_ai.model import ContentImage, ContentReasoning, ContentText

    from campflow.report.inspect_log import export_runs

    (path,) = export_runs(recorded.store, ["r1"], tmp_path / "logs")
    log = read_eval_log(str(path))
    stored = _transcripts(recorded)
    assert log.status == "success" and log.eval.run_id == "r1"
    assert sorted(s.id for s in log.samples) == sorted(stored)
    seen = {"image": 0, "reasoning": 0, "calls": 0, "failures": 0}
    for sample in map(resolve_sample_attachments, log.samples):  # images are stored once, as attachments
        episode = stored[sample.id]
        assert sample.scores["reward"].value == pytest.approx(episode["reward"])
        assert sample.metadata["termination"] == episode["termination"]
        assert sample.metadata["bootcamp"] == episode["bootcamp"] and sample.metadata["split"] == "eval"
        assert {"level", "instance_id", "model", "reason", "failure_category", "failure_cluster"} <= set(
            sample.metadata
        )
        if episode["termination"] != "solved":
            seen["failures"] += 1
            assert sample.metadata["failure_category"].startswith(episode["termination"])
            assert sample.metadata["failure_cluster"]
        assert [m.role for m in sample.messages] == [m["role"] for m in episode["transcript"]]
        for got, want in zip(sample.messages, episode["transcript"]):
            content = want.get("content")
            if isinstance(content, str):
                texts = [c.text for c in got.content if isinstance(c, ContentText)]
                assert (got.content if isinstance(got.content, str) else "".join(texts)) == content
            elif isinstance(content, list):
                urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
                assert [c.image for c in got.content if isinstance(c, ContentImage)] == urls
                seen["image"] += len(urls)
            if want.get("reasoning_content"):
                assert [c.reasoning for c in got.content if isinstance(c, ContentReasoning)] == [THOUGHT]
                seen["reasoning"] += 1
            if want["role"] == "assistant":
                calls = [(c.function, c.arguments) for c in got.tool_calls or []]
                wanted = []
                for c in want.get("tool_calls") or []:
                    try:
                        arguments = json.loads(c["function"]["arguments"])
                    except ValueError:
                        arguments = {}
                    wanted.append((c["function"]["name"], arguments if isinstance(arguments, dict) else {}))
                assert calls == wanted
                seen["calls"] += len(calls)
            if want["role"] == "tool":
                assert got.tool_call_id == want["tool_call_id"] and got.function == want["name"]
    assert seen["image"] >= 4 and seen["reasoning"] == 1 and seen["calls"] > 8 and seen["failures"] > 0


def test_export_names_the_missing_extra_and_an_unknown_run_writes_nothing(
    recorded: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from campflow.report.inspect_log import export_runs

    with pytest.raises(RunNotFoundError, match="'nope'"):
        export_runs(recorded.store, ["r1", "nope"], tmp_path / "logs")
    assert not (tmp_path / "logs").exists()
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # what an environment without the extra sees
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)
    with pytest.raises(ExportError, match=r"pip install 'campflow\[view\]'"):
        export_runs(recorded.store, ["r1"], tmp_path / "logs")


def test_show_prints_an_episodes_turns_and_ending_and_writes_its_images_beside_it(
    recorded: Workspace, tmp_path: Path
) -> None:
    chart = recorded.store.query(
        "SELECT episode_id, termination, reward FROM episodes WHERE bootcamp = 'chart' "
        "ORDER BY termination = 'solved', episode_id LIMIT 1"
    )[0]
    out = run_cli("show", chart["episode_id"], "--db", str(recorded.db_path), "--images", str(tmp_path / "img"))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"episode {chart['episode_id']}" in text and "─── assistant" in text and "─── tool " in text
    assert "→ " in text and f"ended: {chart['termination']}" in text and f"reward {chart['reward']:.2f}" in text
    images = sorted((tmp_path / "img" / chart["episode_id"]).glob("*.png"))
    assert images and images[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"[image: {images[0]}]" in text.replace("\n", "")


def test_show_a_runs_failures_by_cluster_and_refuses_an_unknown_cluster(recorded: Workspace, tmp_path: Path) -> None:
    cluster = recorded.store.query(
        "SELECT cluster_id, label, size FROM clusters WHERE run_id = 'r1' ORDER BY size DESC LIMIT 1"
    )[0]
    db = str(recorded.db_path)
    out = run_cli("show", "--run", "r1", "--cluster", cluster["cluster_id"][:8], "--limit", "0", "--db", db)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("ended: ") == cluster["size"]
    assert out.stdout.count(f"cluster {cluster['cluster_id'][:8]}") == cluster["size"]
    bad = run_cli("show", "--run", "r1", "--cluster", "zzz", "--db", db)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --cluster 'zzz'") and bad.stdout == ""
    neither = run_cli("show", "--run", "r1", "--db", db)
    assert neither.returncode == 2 and "--failed" in neither.stderr
