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

Install it where verifiers is (``pip install -e OUT``) and run ``vf-eval MODULE``, or load it by path.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campflow.config import CampflowConfig
from campflow.errors import CampflowError

TEMPLATE = Path(__file__).with_name("verifiers_template.py")


class ExportError(CampflowError):
    """What was asked cannot be exported (a vision bootcamp, a served one, an unusable name)."""

    exit_code = 2


@dataclass
class VerifiersPackage:
    """What an export wrote: the folder, the module's name, the rows per bootcamp and the run id of its episodes."""

    path: Path
    module: str
    rows: dict[str, int]
    run_id: str


def export_verifiers(cfg: CampflowConfig, names: list[str], out: Path, per_bootcamp: int = 64) -> VerifiersPackage:
    """Write the package for ``names`` to ``out`` (replacing a package written there before).

    Raises:
        ExportError: a bootcamp is a vision bootcamp (verifiers' rollout carries no tool images here).
        UnknownBootcampError: a name is not a bootcamp of the workspace.
    """
    from campflow.envserve.server import train_stream

    rows: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    max_turns = 1
    for name in names:
        stream = train_stream(cfg, name)
        bootcamp = stream.bootcamp
        if bootcamp.modality != "text":
            raise ExportError(f"{name} is a {bootcamp.modality} bootcamp; the verifiers export plays text bootcamps")
        for seed in range(per_bootcamp):
            instance = stream.draw(seed)
            rows.append(
                {
                    "bootcamp": name,
                    "params": instance.params.model_dump(mode="json"),
                    "seed": instance.seed,
                    "level": instance.level,
                    "instance_id": instance.id,
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
            )
            max_turns = max(max_turns, cfg.rollout.max_turns or bootcamp.max_turns(instance))
        counts[name] = per_bootcamp
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
    return VerifiersPackage(out, module, counts, run_id)
