"""The hack battery: every built-in verifier passes it; three planted weak verifiers (any number within 100
of the answer, the string "0", full marks when the answer is no number) are refused by the battery itself,
by the authoring contract (`campflow author`, `campflow bootcamps check`), by `campflow import` and as
synthesized variants, each refusal naming the exploit and the instance."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp
from campflow.errors import ImportSourceError
from campflow.integrity.battery import run_battery
from campflow.sources import ImportSpec
from campflow.sources.authored import source_sha256

WEAK = Path(__file__).parent / "data" / "weak_verifiers"
# module -> (bootcamp name, an exploit that must be among those named)
PLANTED = {
    "within_100": ("weak-within-100", "zero"),
    "accepts_zero": ("weak-accepts-zero", "zero"),
    "crash_to_full": ("weak-crash-to-full", "type_word"),
}


def _planted_class(module: str) -> type[Bootcamp]:
    spec = importlib.util.spec_from_file_location(f"weak_{module}", WEAK / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return next(
        v for v in vars(loaded).values() if isinstance(v, type) and issubclass(v, Bootcamp) and v is not Bootcamp
    )


@pytest.mark.parametrize("name", sorted(registry.BUILTIN))
def test_every_built_in_bootcamp_passes_the_battery_on_every_level(name: str) -> None:
    bootcamp = registry.make(name)
    report = run_battery(bootcamp, seeds=(0,))
    assert report.passed, report.refusal()
    assert {p.level for p in report.probes} == set(bootcamp.levels)
    exploits = {p.exploit.split("_")[0] for p in report.probes}
    assert {"no", "submit", "tools", "oracle"} <= exploits  # no_submit, submit_nothing, tools_boundary, paths


@pytest.mark.parametrize("module", sorted(PLANTED))
def test_a_planted_weak_verifier_passes_the_old_contract_but_not_the_battery(module: str) -> None:
    from campflow.bootcamps.contract import check_contract

    bootcamp = _planted_class(module)()
    check_contract(bootcamp, seeds=range(10))  # the author's own wrong answer (the sum + 1000) is refused
    report = run_battery(bootcamp)
    assert not report.passed
    exploits = {p.exploit for p in report.hacks}
    assert PLANTED[module][1] in exploits
    refusal = report.refusal()
    assert refusal.startswith(f"{bootcamp.name}: its verifier rewards a non-solution above the wrong-answer bound 0")
    first = report.hacks[0]
    assert f"{first.exploit} on level {first.level} seed {first.seed} (instance {first.instance_id})" in refusal


def test_the_battery_tells_a_lucky_right_answer_from_a_hack() -> None:
    report = run_battery(_planted_class("accepts_zero")())
    rewarded = [p for p in report.probes if p.reward == 1.0]
    assert all(p.verdict in ("hack", "oracle_agrees") for p in rewarded)
    assert all(p.verdict == "oracle_agrees" for p in rewarded if p.exploit.startswith("oracle_"))
    assert all(p.answer == '{"answer": "0"}' for p in report.hacks)


@pytest.mark.parametrize("module", sorted(PLANTED))
def test_import_refuses_a_planted_weak_verifier_and_records_nothing(module: str, store) -> None:
    from campflow.storage.imports import import_bootcamp, recorded

    name, exploit = PLANTED[module]
    path = WEAK / f"{module}.py"
    spec = ImportSpec(
        name=name, adapter="authored", source=str(path), options={"sha256": source_sha256(path.read_text())}
    )
    with pytest.raises(ImportSourceError, match="its verifier rewards a non-solution") as caught:
        import_bootcamp(spec, store, cross_process=False)
    assert "not imported" in str(caught.value) and " on level " in str(caught.value)
    assert recorded(store) == []


def test_import_records_the_probes_of_a_verifier_that_holds(store) -> None:
    from campflow.storage.imports import import_bootcamp

    source = (
        (WEAK / "within_100.py")
        .read_text()
        .replace("abs(float(state.answer) - right) <= 100", "float(state.answer) == right")
    )
    path = store.path.parent / "exact_sum.py"
    path.write_text(source)
    spec = ImportSpec(name="exact-sum", adapter="authored", source=str(path), options={"sha256": source_sha256(source)})
    import_bootcamp(spec, store, cross_process=False)
    rows = store.query("SELECT verdict, count(*) AS n FROM verifier_probes WHERE subject = 'exact-sum' GROUP BY ALL")
    verdicts = {r["verdict"]: r["n"] for r in rows}
    assert verdicts.get("held", 0) > 20 and "hack" not in verdicts


@pytest.mark.parametrize("module", sorted(PLANTED))
def test_a_synthesized_variant_of_a_planted_weak_verifier_is_rejected_as_hackable(module: str, store) -> None:
    from campflow.synthesis.proposals import Proposal
    from campflow.synthesis.validate import RejectKind, ValidationSettings, record_verdicts, validate_proposals

    name, exploit = PLANTED[module]
    registry.register(name, _planted_class(module), replace=True)
    proposal = Proposal(bootcamp=name, cluster_id=None, synthesizer="mutate", params={"level": 2, "max_operand": 80})
    result = validate_proposals(store, [proposal], ValidationSettings(calibration_samples=0))
    (verdict,) = result.verdicts
    assert verdict.reject_kind == RejectKind.HACKABLE
    assert verdict.reject_reason.startswith(f"hackable: {name}: its verifier rewards a non-solution")
    record_verdicts(store, result.verdicts)
    hacks = store.query(
        "SELECT DISTINCT exploit FROM verifier_probes WHERE subject = ? AND source = 'variant' AND verdict = 'hack'",
        [verdict.variant_id],
    )
    assert exploit in {r["exploit"] for r in hacks}
    assert store.scalar("SELECT count(*) FROM instances") == 0  # nothing of it became training data


@pytest.mark.parametrize("module", ["accepts_zero", "crash_to_full"])
def test_the_authoring_contract_refuses_a_planted_weak_verifier_with_a_battery_verdict(module: str, tmp_path) -> None:
    from campflow.authoring.contract_run import run_contract
    from campflow.config import SandboxConfig

    name, exploit = PLANTED[module]
    report = run_contract(
        (WEAK / f"{module}.py").read_text(), name=name, examples=[], instances=4, limits=SandboxConfig(root=tmp_path)
    )
    assert not report.accepted
    failed = {v.check for v in report.failures}
    assert failed == {"battery"}, [v.line() for v in report.failures]
    battery = next(v for v in report.failures if v.check == "battery")
    assert "its verifier rewards a non-solution" in battery.reason and battery.evidence["exploit"]
