"""``campflow export --format verifiers``: bootcamps as an installable verifiers environment package.

The package (``pyproject.toml`` and one module with ``load_environment(**kwargs)``, written from
:mod:`campflow.envserve.verifiers_template`) is a ``vf.MultiTurnEnv`` whose dataset is train-split
instances of the bootcamps (never an eval or probe instance: :class:`~campflow.envserve.stream.TrainStream`
draws them, as ``campflow env serve`` does), each row's prompt the bootcamp's and its tools in
``info["tool_defs"]`` with their JSON schemas. Each rollout is one campflow episode played by a campflow
process (:mod:`campflow.envserve.verifiers_play`, started with the exporting Python): the model's turns
go through campflow's engine, so the tools (a world per rollout), the turn budget, the ending and the
reward are the bootcamp's. The rubric: ``bootcamp_reward`` (weight 1, the episode's reward), ``solved``
and ``partial_credit`` (metrics, weight 0). Episodes are written to the workspace's store under a run of
their own (model ``verifiers``).

On request (``variants=True``, ``--variants``) the train instances of the bootcamps' accepted synthesized
variants join the dataset too; a variant's probe instances, like every eval and probe instance, never do.

Install it where verifiers is (``pip install -e OUT``) and run ``vf-eval MODULE``, or load it by path.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campflow.bootcamps.base import Bootcamp, Instance
from campflow.bootcamps.served import ServedTools
from campflow.config import CampflowConfig
from campflow.errors import CampflowError

TEMPLATE = Path(__file__).with_name("verifiers_template.py")


class ExportError(CampflowError):
    """What was asked cannot be exported (a vision bootcamp, a served one, an unusable name)."""

    exit_code = 2


@dataclass
class VerifiersPackage:
    """What an export wrote: the folder, the module's name, the rows per bootcamp (variants' rows
    included, and counted apart in ``variants``) and the run id of its episodes."""

    path: Path
    module: str
    rows: dict[str, int]
    run_id: str
    variants: dict[str, int] = field(default_factory=dict)


def export_verifiers(
    cfg: CampflowConfig, names: list[str], out: Path, per_bootcamp: int = 64, *, variants: bool = False
) -> VerifiersPackage:
    """Write the package for ``names`` to ``out`` (replacing a package written there before):
    ``per_bootcamp`` generated train instances of each, and with ``variants`` every train instance of
    its accepted variants on record.

    Raises:
        ExportError: a bootcamp is a vision bootcamp (verifiers' rollout carries no tool images here), or
            its episodes share one server (a URL MCP server: verifiers' rollouts overlap).
        UnknownBootcampError: a name is not a bootcamp of the workspace.
    """
    from campflow.envserve.server import train_stream

    rows: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    synthesized: dict[str, int] = {}
    max_turns = 1
    for name in names:
        stream = train_stream(cfg, name)
        bootcamp = stream.bootcamp
        if bootcamp.modality != "text":
            raise ExportError(f"{name} is a {bootcamp.modality} bootcamp; the verifiers export plays text bootcamps")
        chosen = [(stream.draw(seed), None) for seed in range(per_bootcamp)]
        shared = bootcamp.shared_server(chosen[0][0]) if isinstance(bootcamp, ServedTools) else None
        if shared is not None:
            raise ExportError(
                f"{name}: verifiers plays several rollouts at once, and every episode of the server {shared} shares "
                "its one state; import it with a server command (a fresh server per episode) to export it"
            )
        if variants:
            chosen += variant_instances(cfg, bootcamp, stream.held_out)
        seen: set[str] = set()
        for instance, variant_id in chosen:
            if instance.id in seen:
                continue
            seen.add(instance.id)
            rows.append(_row(bootcamp, instance, variant_id))
            max_turns = max(max_turns, cfg.rollout.max_turns or bootcamp.max_turns(instance))
            if variant_id is not None:
                synthesized[name] = synthesized.get(name, 0) + 1
        counts[name] = len(seen)
    module = "campflow_" + re.sub(r"[^a-z0-9_]", "_", "_".join(names).lower())[:60]
    run_id = f"verifiers-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}"
    config = {
        "python": sys.executable,
        "db": str(cfg.workspace.db_path.resolve()),
        "workspace": str(cfg.workspace.path.resolve()),
        "run_id": run_id,
        "max_turns": max_turns + 1,  # the engine ends the episode first; verifiers' own limit is the backstop
        "bootcamps": names,
        "rows": rows,
    }
    text = TEMPLATE.read_text().replace("__NAMES__", ", ".join(names)).replace("__CONFIG__", json.dumps(config))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{module}.py").write_text(text)
    (out / "pyproject.toml").write_text(
        "[project]\n"
        f'name = "{module.replace("_", "-")}"\n'
        'version = "0.1.0"\n'
        f'description = "campflow bootcamps {", ".join(names)} as a verifiers environment"\n'
        'requires-python = ">=3.10"\n'
        'dependencies = ["verifiers>=0.2", "datasets"]\n\n'
        "[build-system]\n"
        'requires = ["setuptools>=61"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[tool.setuptools]\n"
        f'py-modules = ["{module}"]\n'
    )
    return VerifiersPackage(out, module, counts, run_id, synthesized)


def variant_instances(cfg: CampflowConfig, bootcamp: Bootcamp, held_out: set[str]) -> list[tuple[Instance, str]]:
    """The train instances of ``bootcamp``'s accepted variants on record, rebuilt from their params and
    seed, with their variant's id; none that is held out (``held_out``: the eval and probe ids) or whose
    seed is in the eval range, and none at all from a workspace without a store."""
    from campflow.bootcamps.splits import is_eval_seed
    from campflow.storage.workspace import Workspace

    ws = Workspace.from_config(cfg)
    if not ws.db_path.exists():
        return []
    found = ws.store.query(
        "SELECT i.instance_id, i.params, i.seed, i.variant_id FROM instances i JOIN variants v USING (variant_id) "
        "WHERE i.bootcamp = ? AND i.split = 'train' AND v.status = 'accepted' ORDER BY i.variant_id, i.instance_id",
        [bootcamp.name],
    )
    out = []
    for r in found:
        instance = bootcamp.generate(json.loads(r["params"]), int(r["seed"]))
        if instance.id in held_out or r["instance_id"] in held_out or is_eval_seed(instance.seed):
            continue
        out.append((instance, r["variant_id"]))
    return out


def _row(bootcamp: Bootcamp, instance: Instance, variant_id: str | None) -> dict[str, Any]:
    """One dataset row: what the campflow process needs to pose the instance again, its prompt and its tools."""
    return {
        "bootcamp": bootcamp.name,
        "params": instance.params.model_dump(mode="json"),
        "seed": instance.seed,
        "level": instance.level,
        "instance_id": instance.id,
        "variant_id": variant_id,
        "prompt": bootcamp.prompt(instance),
        "tool_defs": [
            {
                "name": s["function"]["name"],
                "description": s["function"].get("description", ""),
                "parameters": s["function"].get("parameters") or {"type": "object", "properties": {}},
            }
            for s in bootcamp.tool_schemas(instance)
        ],
    }
