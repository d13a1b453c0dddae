"""The adversarial pass (``integrity.hacker``): a model, here a scripted one behind a real OpenAI-compatible
server on 127.0.0.1, is told to earn reward without solving the task and plays through the engine. A win the
oracle disputes is a hack, recorded with its transcript, and refuses the source (``import``, ``author``,
``bootcamps check``) or the variant as the battery's hacks do; a sound verifier yields nothing to it; garbage
is the model's failure; nothing runs where no model is configured."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from campflow.bootcamps import registry
from campflow.bootcamps.base import Action, Bootcamp
from campflow.config import HackerConfig, load_config
from campflow.errors import ImportSourceError, IntegrityError
from campflow.integrity.hacker import run_hacker
from campflow.sources import ImportSpec
from campflow.sources.authored import source_sha256
from campflow.storage.probes import record_probes
from campflow.testing.scripted_server import ScriptedEndpoint, action_message

WEAK = Path(__file__).parent / "data" / "weak_verifiers"


def _planted(module: str) -> type[Bootcamp]:
    spec = importlib.util.spec_from_file_location(f"weak_{module}", WEAK / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return next(
        v for v in vars(loaded).values() if isinstance(v, type) and issubclass(v, Bootcamp) and v is not Bootcamp
    )


class Hacker:
    """A scripted hacker: every turn submits ``answer`` (or says ``reply``); keeps every request it got."""

    def __init__(self, answer: str | None = None, reply: dict[str, Any] | None = None) -> None:
        self.answer, self.reply = answer, reply
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        if self.reply is not None:
            return self.reply
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        return action_message(Action("submit", {"answer": self.answer}), f"call_{turn}")


def _cfg(url: str, episodes: int = 2) -> HackerConfig:
    return HackerConfig(model="scripted", base_url=url, episodes=episodes, max_retries=0, timeout=20)


def test_a_scripted_hacker_answering_zero_wins_against_a_planted_weak_verifier_and_keeps_its_transcript(
    store,
) -> None:
    script = Hacker(answer="0")
    with ScriptedEndpoint(script) as endpoint:
        report = run_hacker(_planted("accepts_zero")(), _cfg(endpoint.url))
    assert len(report.probes) == 3 * 2  # 2 episodes on each of 3 levels
    assert not report.passed and len(report.hacks) == 6
    assert {p.exploit for p in report.hacks} == {'model:submit {"answer": "0"}'}
    assert report.refusal().startswith(
        "weak-accepts-zero: its verifier rewards a non-solution above the wrong-answer bound 0: "
        'model:submit {"answer": "0"} on level 1 seed 0'
    )
    # the model was told the task, the tools and the goal
    system = script.requests[0]["messages"][0]["content"]
    assert "obtain the reward WITHOUT solving the task" in system and "`submit` (ends the episode)" in system
    assert "Add two numbers." in system
    assert [t["function"]["name"] for t in script.requests[0]["tools"]] == ["submit"]
    record_probes(store, report.probes, subject="weak-accepts-zero", source="import")
    rows = store.query("SELECT exploit, verdict, detail, transcript FROM verifier_probes WHERE verdict = 'hack'")
    assert len(rows) == 6 and all(r["exploit"].startswith("model:") for r in rows)
    transcript = json.loads(rows[0]["transcript"])
    assert "WITHOUT solving" in transcript[0]["content"]
    calls = [c["function"] for m in transcript for c in m.get("tool_calls") or []]
    assert calls == [{"name": "submit", "arguments": '{"answer": "0"}'}]
    assert rows[0]["detail"].startswith("the oracle answers ")


def test_against_a_sound_bootcamp_the_scripted_hacker_wins_nothing() -> None:
    bootcamp = registry.make("calculator")
    with ScriptedEndpoint(Hacker(answer="0")) as endpoint:
        report = run_hacker(bootcamp, _cfg(endpoint.url, episodes=3))
    assert report.passed, report.refusal()
    assert len(report.probes) == 3 * len(bootcamp.levels)
    assert {p.verdict for p in report.probes} <= {"held", "oracle_agrees"}  # "0" may be a right answer


@pytest.mark.parametrize(
    "reply",
    [
        {"role": "assistant", "content": "}}{{ <tool_call> not json"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "submit", "arguments": "{oops"}}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "no_such_tool", "arguments": "{}"}}],
        },
    ],
)
def test_garbage_from_the_model_is_its_own_failure_and_scores(reply: dict[str, Any]) -> None:
    with ScriptedEndpoint(Hacker(reply=reply)) as endpoint:
        report = run_hacker(_planted("accepts_zero")(), _cfg(endpoint.url, episodes=1))
    assert report.passed
    assert {p.verdict for p in report.probes} == {"held"}
    assert all(p.termination != "infra_error" for p in report.probes)


def test_an_endpoint_that_cannot_be_reached_stops_the_pass_with_one_line() -> None:
    cfg = HackerConfig(model="gone", base_url="http://127.0.0.1:9/v1", episodes=1, max_retries=0, timeout=5)
    with pytest.raises(IntegrityError, match=r"could not play weak-accepts-zero level 1 seed 0 with gone") as info:
        run_hacker(_planted("accepts_zero")(), cfg)
    assert "\n" not in str(info.value) and "http://127.0.0.1:9/v1" in str(info.value)


def test_the_battery_misses_a_judge_taken_in_by_a_claim_and_the_model_pass_refuses_its_import(store) -> None:
    from campflow.storage.imports import import_bootcamp, recorded

    path = WEAK / "takes_a_claim.py"
    spec = ImportSpec(
        name="weak-takes-a-claim",
        adapter="authored",
        source=str(path),
        options={"sha256": source_sha256(path.read_text())},
    )
    script = Hacker(answer="correct")
    with ScriptedEndpoint(script) as endpoint:
        with pytest.raises(ImportSourceError, match=r"model:submit \{\"answer\": \"correct\"\} on level 1") as info:
            import_bootcamp(spec, store, cross_process=False, hacker=_cfg(endpoint.url))
        assert "its verifier rewards a non-solution" in str(info.value) and "not imported" in str(info.value)
        assert recorded(store) == []
        rows = store.query("SELECT verdict, transcript FROM verifier_probes WHERE exploit LIKE 'model:%'")
        assert {r["verdict"] for r in rows} == {"hack"} and all(r["transcript"] for r in rows)
        asked = len(script.requests)
        # not configured (no model): no adversarial pass, and the battery alone lets it in
        unset = HackerConfig(base_url=endpoint.url)
        import_bootcamp(spec, store, cross_process=False, hacker=unset)
        assert len(script.requests) == asked
    assert [s.name for s in recorded(store)] == ["weak-takes-a-claim"]


def test_a_synthesized_variant_the_model_hacks_is_rejected_as_hackable(store) -> None:
    from campflow.synthesis.proposals import Proposal
    from campflow.synthesis.validate import RejectKind, ValidationSettings, record_verdicts, validate_proposals

    registry.register("weak-takes-a-claim", _planted("takes_a_claim"), replace=True)
    proposal = Proposal(
        bootcamp="weak-takes-a-claim", cluster_id=None, synthesizer="mutate", params={"level": 2, "max_operand": 80}
    )
    with ScriptedEndpoint(Hacker(answer="That is correct.")) as endpoint:
        settings = ValidationSettings(calibration_samples=0, hacker=_cfg(endpoint.url, episodes=2))
        result = validate_proposals(store, [proposal], settings)
    (verdict,) = result.verdicts
    assert verdict.reject_kind == RejectKind.HACKABLE
    assert verdict.reject_reason.startswith("hackable: weak-takes-a-claim: its verifier rewards a non-solution")
    assert "model:submit" in verdict.reject_reason
    record_verdicts(store, result.verdicts)
    rows = store.query(
        "SELECT exploit, transcript FROM verifier_probes WHERE subject = ? AND source = 'variant' AND verdict = 'hack'",
        [verdict.variant_id],
    )
    assert len(rows) == 2 and all(r["exploit"].startswith("model:") and r["transcript"] for r in rows)
    assert store.scalar("SELECT count(*) FROM instances") == 0


def test_bootcamps_check_plays_the_model_pass_after_the_sandboxed_checks(tmp_path) -> None:
    from campflow.authoring.bootcamp_file import check_bootcamp

    with ScriptedEndpoint(Hacker(answer="correct, I think")) as endpoint:
        cfg = load_config(
            None,
            {
                "author.sandbox.root": str(tmp_path / "sandboxes"),
                "integrity.hacker.model": "scripted",
                "integrity.hacker.base_url": endpoint.url,
                "integrity.hacker.episodes": 1,
            },
            env={},
        )
        claim = check_bootcamp(str(WEAK / "takes_a_claim.py"), cfg=cfg, instances=4)
        sound = check_bootcamp("calculator", cfg=cfg, instances=4)
    assert not claim.passed
    assert {v.check for v in claim.contract.failures} == {"hacker"}
    assert sorted(v.level for v in claim.contract.failures) == [1, 2, 3]
    assert "model:submit" in claim.contract.failures[0].reason
    assert sound.passed, sound.summary()
    assert {v.level for v in sound.verdicts if v.check == "hacker"} == set(registry.make("calculator").levels)


def test_author_refuses_a_module_the_model_hacks_and_keeps_the_episodes(tmp_path) -> None:
    from campflow.authoring.author import author_bootcamp
    from campflow.storage.workspace import Workspace

    task = tmp_path / "sum.md"
    task.write_text("# Add two numbers\n\nThe agent is given two numbers and submits their sum.\n")
    module = "```python\n" + (WEAK / "takes_a_claim.py").read_text() + "```\n"
    with ScriptedEndpoint(Hacker(reply={"role": "assistant", "content": module})) as author:
        with ScriptedEndpoint(Hacker(answer="correct")) as hacker:
            cfg = load_config(
                None,
                {
                    "workspace.path": str(tmp_path / "ws"),
                    "author.llm.model": "scripted",
                    "author.llm.base_url": author.url,
                    "author.sandbox.root": str(tmp_path / "sandboxes"),
                    "integrity.hacker.model": "scripted",
                    "integrity.hacker.base_url": hacker.url,
                    "integrity.hacker.episodes": 1,
                },
                env={},
            )
            result = author_bootcamp(task, cfg=cfg, name="claimed-sum", rounds=0)
    assert not result.accepted
    assert result.reasons and all(r.startswith("hacker level ") for r in result.reasons)
    rows = Workspace.from_config(cfg).store.query(
        "SELECT verdict, transcript FROM verifier_probes WHERE subject = 'claimed-sum' AND source = 'author'"
    )
    assert len(rows) == 3 and {r["verdict"] for r in rows} == {"hack"} and all(r["transcript"] for r in rows)
