"""Validation of proposals: only verified, new, learnable variants become training instances.

Every proposal passes these checks in order; the first it fails is its reject reason:

1. ``invalid_json`` / ``not_an_object``: the synthesizer's output could not be read as a params object;
2. ``invalid_params``: it does not validate against the bootcamp's params model (bounds, types, keys);
3. ``eval_split``: its params equal those of an eval-split instance, or an instance it generates is one;
4. ``duplicate``: its params equal those of a recorded instance, an accepted variant or an earlier
   proposal of the same batch;
   ``above_curriculum``: its level is above the bootcamp's curriculum level (``max_levels``), which the
   cycle does not train at yet;
5. ``unsolvable``: generation with fresh train seeds raises, or the oracle does not solve an instance;
   ``hackable``: the hack battery (:mod:`campflow.integrity.battery`) finds a scripted non-solution that
   the variant's verifier rewards above the bootcamp's wrong-answer bound, on its first
   ``battery_instances`` instances (the probes are recorded in ``verifier_probes``); where
   ``integrity.hacker`` names a model, its adversarial pass on the same instances too
   (:mod:`campflow.integrity.hacker`: its episodes recorded with their transcripts);
6. ``too_easy`` / ``too_hard`` (``uncalibrated`` when no episode could be measured): the current
   model's pass rate on a few episodes lies outside the learnable band.

Seeds derive from the variant id, so validating the same proposal again gives the same instances.
An accepted variant also gets ``probes_per_variant`` probe instances from fresh seeds of its own
(:func:`probe_seeds`), recorded in split ``probe``: never trained on, they measure what training on
the variant taught (the cycle runs its starting model and its candidate on them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import orjson
import pyarrow as pa

from campflow.agents.base import Policy
from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp, Instance, Params
from campflow.bootcamps.splits import TRAIN_SEED_LIMIT
from campflow.config import HackerConfig, SynthesisConfig
from campflow.errors import CampflowError
from campflow.integrity.battery import Probe, run_battery
from campflow.integrity.hacker import run_hacker
from campflow.rollout.engine import EpisodeSpec, RolloutSettings, rollout
from campflow.serialization import canonical_json, to_json
from campflow.storage.probes import probes_table
from campflow.storage.store import Store, instances_to_arrow, now
from campflow.synthesis.proposals import Proposal


class RejectKind(StrEnum):
    """Why a proposal was rejected (``variants.reject_kind``)."""

    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    INVALID_PARAMS = "invalid_params"
    EVAL_SPLIT = "eval_split"
    DUPLICATE = "duplicate"
    ABOVE_CURRICULUM = "above_curriculum"
    UNSOLVABLE = "unsolvable"
    HACKABLE = "hackable"
    TOO_EASY = "too_easy"
    TOO_HARD = "too_hard"
    UNCALIBRATED = "uncalibrated"


@dataclass
class Verdict:
    """The outcome for one proposal: accepted with its instances, or rejected with a reason."""

    proposal: Proposal
    reject_kind: RejectKind | None = None
    reject_reason: str | None = None  # "<kind>: <what exactly>"
    params: Params | None = None
    instances: list[Instance] = field(default_factory=list)
    probes: list[Instance] = field(default_factory=list)
    pass_rate: float | None = None
    battery: list[Probe] = field(default_factory=list)  # the hack battery's probes of its instances

    @property
    def accepted(self) -> bool:
        """Whether the proposal became a variant with training instances."""
        return self.reject_kind is None

    @property
    def status(self) -> str:
        """``accepted`` or ``rejected``."""
        return "accepted" if self.accepted else "rejected"

    @property
    def variant_id(self) -> str:
        """The proposal's variant id."""
        return self.proposal.variant_id

    def reject(self, kind: RejectKind, detail: str) -> Verdict:
        """Mark rejected (the first reason sticks) and return self."""
        if self.reject_kind is None:
            self.reject_kind, self.reject_reason = kind, f"{kind.value}: {detail}"
            self.instances, self.probes = [], []
        return self


@dataclass(frozen=True)
class ValidationSettings:
    """How proposals are checked and calibrated (mirrors part of ``SynthesisConfig``)."""

    instances_per_variant: int = 4
    probes_per_variant: int = 2
    calibration_samples: int = 4
    band_min: float = 0.1
    band_max: float = 0.9
    concurrency: int = 32
    rollout: RolloutSettings = RolloutSettings()
    max_levels: dict[str, int] | None = None  # bootcamp -> highest level trained at now; None: no limit
    battery_instances: int = 2  # instances of each variant the hack battery plays; 0: none (not advised)
    hacker: HackerConfig | None = None  # integrity.hacker: the model's pass on the same instances, where set

    @classmethod
    def from_config(
        cls,
        cfg: SynthesisConfig,
        rollout: RolloutSettings | None = None,
        concurrency: int = 32,
        max_levels: dict[str, int] | None = None,
        hacker: HackerConfig | None = None,
    ) -> ValidationSettings:
        """Settings from the ``synthesis`` config section (and ``integrity.hacker``)."""
        return cls(
            cfg.instances_per_variant,
            cfg.probes_per_variant,
            cfg.calibration_samples,
            cfg.band_min,
            cfg.band_max,
            concurrency,
            rollout or RolloutSettings(),
            max_levels,
            hacker=hacker,
        )


@dataclass
class ValidationResult:
    """Verdicts of the new proposals, and how many were left alone as already decided or repeated."""

    verdicts: list[Verdict]
    already_recorded: int = 0
    repeated: int = 0

    @property
    def accepted(self) -> list[Verdict]:
        """The accepted verdicts."""
        return [v for v in self.verdicts if v.accepted]


def validate_proposals(
    store: Store,
    proposals: Iterable[Proposal],
    settings: ValidationSettings = ValidationSettings(),
    policy: Policy | None = None,
) -> ValidationResult:
    """Check every proposal (see the module docstring) and calibrate the survivors with ``policy``.

    A proposal whose variant is already recorded is not validated again (re-runs are idempotent), except
    one left ``uncalibrated`` by infrastructure failures. Without a policy, or with
    ``calibration_samples`` 0, survivors are accepted uncalibrated.
    """
    unique: dict[str, Proposal] = {}
    repeated = 0
    for p in proposals:
        if p.variant_id in unique:
            repeated += 1
        else:
            unique[p.variant_id] = p
    decided = _decided(store, list(unique))
    todo = [p for vid, p in unique.items() if vid not in decided]
    known = _KnownParams(store)
    verdicts = [_check(p, known, settings) for p in todo]
    survivors = [v for v in verdicts if v.accepted]
    if survivors and policy is not None and settings.calibration_samples > 0:
        calibrate(survivors, policy, settings)
    return ValidationResult(verdicts, len(unique) - len(todo), repeated)


def _decided(store: Store, variant_ids: Sequence[str]) -> set[str]:
    if not variant_ids:
        return set()
    marks = ", ".join("?" for _ in variant_ids)
    rows = store.query(
        f"SELECT variant_id FROM variants WHERE variant_id IN ({marks}) "
        "AND coalesce(reject_kind, '') <> 'uncalibrated'",
        list(variant_ids),
    )
    return {r["variant_id"] for r in rows}


class _KnownParams:
    """The params already taken, per bootcamp: eval-split instances, other instances, accepted variants."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._loaded: dict[str, tuple[dict[str, str], dict[str, str], set[str]]] = {}
        self.batch: dict[str, str] = {}  # canonical params -> variant id, within this validation

    def of(self, bootcamp: str) -> tuple[dict[str, str], dict[str, str], set[str]]:
        """(eval params -> an instance id, other params -> a description, eval instance ids)."""
        if bootcamp not in self._loaded:
            eval_params: dict[str, str] = {}
            taken: dict[str, str] = {}
            for r in self.store.query(
                "SELECT params, split, min(instance_id) AS iid FROM instances "
                "WHERE bootcamp = ? GROUP BY params, split",
                [bootcamp],
            ):
                key = canonical_json(orjson.loads(r["params"]))
                if r["split"] == "eval":
                    eval_params[key] = r["iid"]
                else:
                    taken.setdefault(key, f"instance {r['iid']}")
            for r in self.store.query(
                "SELECT variant_id, params FROM variants WHERE bootcamp = ? AND status = 'accepted'", [bootcamp]
            ):
                taken[canonical_json(orjson.loads(r["params"]))] = f"accepted variant {r['variant_id']}"
            self._loaded[bootcamp] = (eval_params, taken, self.store.eval_ids(bootcamp))
        return self._loaded[bootcamp]


def _check(proposal: Proposal, known: _KnownParams, settings: ValidationSettings) -> Verdict:
    """Checks 1-5 of the module docstring for one proposal."""
    verdict = Verdict(proposal)
    if proposal.unreadable:
        kind, _, detail = proposal.unreadable.partition(": ")
        known_kind = kind in (RejectKind.INVALID_JSON, RejectKind.NOT_AN_OBJECT)
        return verdict.reject(
            RejectKind(kind) if known_kind else RejectKind.INVALID_JSON, detail if known_kind else proposal.unreadable
        )
    if not isinstance(proposal.params, dict):
        return verdict.reject(
            RejectKind.NOT_AN_OBJECT, f"params must be a JSON object, got {type(proposal.params).__name__}"
        )
    try:
        bootcamp = registry.make(proposal.bootcamp)
        verdict.params = bootcamp.params(proposal.params)
    except CampflowError as exc:
        return verdict.reject(RejectKind.INVALID_PARAMS, str(exc))
    key = canonical_json(verdict.params.model_dump(mode="json"))
    eval_params, taken, eval_ids = known.of(proposal.bootcamp)
    if key in eval_params:
        return verdict.reject(RejectKind.EVAL_SPLIT, f"params equal those of eval-split instance {eval_params[key]}")
    if key in taken:
        return verdict.reject(RejectKind.DUPLICATE, f"params equal those of {taken[key]}")
    if key in known.batch:
        return verdict.reject(RejectKind.DUPLICATE, f"params equal those of proposal {known.batch[key]} in this batch")
    known.batch[key] = proposal.variant_id
    ceiling = (settings.max_levels or {}).get(proposal.bootcamp)
    if ceiling is not None and verdict.params.level > ceiling:
        return verdict.reject(
            RejectKind.ABOVE_CURRICULUM,
            f"level {verdict.params.level} is above {proposal.bootcamp}'s curriculum level {ceiling}",
        )
    for seed in variant_seeds(proposal.variant_id, settings.instances_per_variant):
        problem = _solvable(bootcamp, verdict.params, seed, eval_ids, verdict)
        if problem is not None:
            return verdict.reject(*problem)
    report = run_battery(bootcamp, instances=verdict.instances[: settings.battery_instances])
    verdict.battery = report.probes
    if not report.passed:
        return verdict.reject(RejectKind.HACKABLE, report.refusal())
    if settings.hacker is not None and settings.hacker.enabled:
        played = run_hacker(
            bootcamp, settings.hacker, instances=verdict.instances[: max(1, settings.battery_instances)]
        )
        verdict.battery += played.probes
        if not played.passed:
            return verdict.reject(RejectKind.HACKABLE, played.refusal())
    taken = {i.id for i in verdict.instances}
    for seed in probe_seeds(proposal.variant_id, settings.probes_per_variant):
        probe = _probe(bootcamp, verdict.params, seed)
        if probe is not None and probe.id not in eval_ids and probe.id not in taken:
            verdict.probes.append(probe)
            taken.add(probe.id)
    return verdict


def _probe(bootcamp: Bootcamp, params: Params, seed: int) -> Instance | None:
    """A probe instance the oracle solves, or None (a probe that cannot be verified is left out, the
    variant itself having passed its checks)."""
    try:
        instance = bootcamp.generate(params, seed)
        return instance if bootcamp.solve(instance)[1].success else None
    except Exception:  # noqa: BLE001  (same as _solvable: any failure makes this seed unusable)
        return None


def _solvable(
    bootcamp: Bootcamp, params: Params, seed: int, eval_ids: set[str], verdict: Verdict
) -> tuple[RejectKind, str] | None:
    try:
        instance = bootcamp.generate(params, seed)
    except Exception as exc:  # noqa: BLE001  (any failure to generate makes the params unusable)
        return RejectKind.UNSOLVABLE, f"generation failed for seed {seed}: {type(exc).__name__}: {exc}"
    if instance.id in eval_ids:
        return RejectKind.EVAL_SPLIT, f"seed {seed} generates eval-split instance {instance.id}"
    try:
        _, score = bootcamp.solve(instance)
    except Exception as exc:  # noqa: BLE001  (RuntimeError when the oracle runs out of turns, or a bug)
        return RejectKind.UNSOLVABLE, f"the oracle failed on seed {seed}: {type(exc).__name__}: {exc}"
    if not score.success:
        return RejectKind.UNSOLVABLE, f"the oracle scored {score.reward:g} on seed {seed}"
    verdict.instances.append(instance)
    return None


def variant_seeds(variant_id: str, n: int) -> list[int]:
    """``n`` fresh train-split seeds for a variant, fixed by its id."""
    return [int(hashlib.sha256(f"{variant_id}:{i}".encode()).hexdigest()[:15], 16) % TRAIN_SEED_LIMIT for i in range(n)]


def probe_seeds(variant_id: str, n: int) -> list[int]:
    """``n`` train-range seeds for a variant's probes, fixed by its id and apart from its training seeds."""
    return [
        int(hashlib.sha256(f"{variant_id}:probe:{i}".encode()).hexdigest()[:15], 16) % TRAIN_SEED_LIMIT
        for i in range(n)
    ]


def calibrate(verdicts: Sequence[Verdict], policy: Policy, settings: ValidationSettings) -> None:
    """Estimate ``policy``'s pass rate on each verdict's instances; reject those outside the band.

    Episode ``j`` of a variant plays instance ``j mod m`` as sample ``j div m`` (``m`` instances), all
    variants' episodes in one batch through the rollout engine. Infra-failed and timed-out episodes
    are not counted.
    """
    specs, owner = [], []
    for i, v in enumerate(verdicts):
        bootcamp = registry.make(v.proposal.bootcamp)
        m = len(v.instances)
        for j in range(settings.calibration_samples):
            specs.append(EpisodeSpec(bootcamp, v.instances[j % m], j // m))
            owner.append(i)
    episodes = rollout(specs, policy, settings.rollout, concurrency=settings.concurrency)
    outcomes: list[list[bool]] = [[] for _ in verdicts]
    errors: list[str | None] = [None] * len(verdicts)
    for i, e in zip(owner, episodes):
        if e.termination.is_retryable:
            errors[i] = errors[i] or e.error
        else:
            outcomes[i].append(e.success)
    band = f"the band is {settings.band_min:.0%}-{settings.band_max:.0%}"
    for v, seen, error in zip(verdicts, outcomes, errors):
        if not seen:
            v.reject(
                RejectKind.UNCALIBRATED,
                f"no calibration episode of {policy.model_id} could be measured ({error or 'none ran'})",
            )
            continue
        v.pass_rate = round(sum(seen) / len(seen), 4)
        said = f"{policy.model_id} passed {sum(seen)} of {len(seen)} episodes ({v.pass_rate:.0%}); {band}"
        if v.pass_rate > settings.band_max:
            v.reject(RejectKind.TOO_EASY, said)
        elif v.pass_rate < settings.band_min:
            v.reject(RejectKind.TOO_HARD, said)


def record_verdicts(store: Store, verdicts: Sequence[Verdict], run_id: str | None = None) -> None:
    """Write every verdict to ``variants`` and accepted ones' instances to ``instances`` (train split,
    origin ``synthesized``) with their probes (split ``probe``), in one transaction: nothing is half-written."""
    if not verdicts:
        return
    ts = now()
    variants = pa.table(
        {
            "variant_id": [v.variant_id for v in verdicts],
            "cluster_id": pa.array([v.proposal.cluster_id for v in verdicts], pa.string()),
            "bootcamp": [v.proposal.bootcamp for v in verdicts],
            "params": [_params_json(v) for v in verdicts],
            "rationale": pa.array([v.proposal.rationale for v in verdicts], pa.string()),
            "synthesizer": [v.proposal.synthesizer for v in verdicts],
            "status": [v.status for v in verdicts],
            "reject_reason": pa.array([v.reject_reason for v in verdicts], pa.string()),
            "reject_kind": pa.array([v.reject_kind.value if v.reject_kind else None for v in verdicts], pa.string()),
            "pass_rate": pa.array([v.pass_rate for v in verdicts], pa.float64()),
            "parent_instance_ids": pa.array(
                [list(v.proposal.parent_instance_ids) for v in verdicts], pa.list_(pa.string())
            ),
            "instance_ids": pa.array(
                [[i.id for i in v.instances] if v.accepted else None for v in verdicts], pa.list_(pa.string())
            ),
            "run_id": pa.array([run_id] * len(verdicts), pa.string()),
            "created_at": pa.array([ts] * len(verdicts), pa.timestamp("us")),
        }
    )
    accepted = [(v.variant_id, i) for v in verdicts if v.accepted for i in v.instances]
    instances = instances_to_arrow(
        [i for _, i in accepted], split="train", origin="synthesized", variant_ids=[vid for vid, _ in accepted]
    )
    probed = [(v.variant_id, i) for v in verdicts if v.accepted for i in v.probes]
    probes = instances_to_arrow(
        [i for _, i in probed], split="probe", origin="synthesized", variant_ids=[vid for vid, _ in probed]
    )
    battery = pa.concat_tables([probes_table(v.battery, subject=v.variant_id, source="variant") for v in verdicts])
    with store.transaction(
        _campflow_variants=variants, _campflow_instances=instances, _campflow_probes=probes, _campflow_battery=battery
    ) as con:
        con.execute("INSERT OR REPLACE INTO variants BY NAME SELECT * FROM _campflow_variants")
        con.execute(
            "DELETE FROM verifier_probes WHERE source = 'variant' AND subject IN (SELECT variant_id FROM _campflow_variants)"
        )
        con.execute("INSERT INTO verifier_probes BY NAME SELECT * FROM _campflow_battery")
        if accepted:
            con.execute("INSERT OR IGNORE INTO instances BY NAME SELECT * FROM _campflow_instances")
        if probed:
            con.execute("INSERT OR IGNORE INTO instances BY NAME SELECT * FROM _campflow_probes")


def _params_json(v: Verdict) -> str:
    """The params as validated, else as proposed, else the unreadable text (as a JSON string)."""
    if v.params is not None:
        return to_json(v.params.model_dump(mode="json"))
    if v.proposal.unreadable:
        return to_json((v.proposal.raw or "")[:2000])
    return to_json(v.proposal.params)
