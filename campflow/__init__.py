"""campflow: executable agent environments and a continuous-improvement pipeline for LLM agents.

The Python API mirrors the command line: each command is a thin call of one function here, which is
also what a flow or a script calls (heavy packages load on first use, so ``import campflow`` is cheap)::

    import campflow

    cfg = campflow.load_config("configs/default.yaml")
    summary = campflow.evaluate(cfg)                  # campflow eval
    print(summary.pass_rates)
    campflow.improve(cfg)                             # campflow improve
    campflow.run_sql(cfg.workspace.db_path, "SELECT * FROM pass_rates")   # campflow sql

=====================  ============================  ==============================================
function               command                       defined in
=====================  ============================  ==============================================
``load_config``        ``--config`` of every command ``campflow.config``
``Workspace``          ``--db`` / ``workspace.path`` ``campflow.storage.workspace``
``evaluate``           ``campflow eval``             ``campflow.flows.evaluate``
``collect``            ``campflow collect``          ``campflow.flows.collect``
``improve``            ``campflow improve``          ``campflow.flows.improve``
``watch``              ``campflow watch``            ``campflow.flows.watch`` (``watch_flow``)
``serve``              ``campflow serve``            ``campflow.flows.serve``
``analyze_run``        ``campflow failures``         ``campflow.synthesis.pipeline``
``synthesize``         ``campflow synthesize``       ``campflow.synthesis.pipeline``
``build_sft_dataset``  ``campflow dataset build``    ``campflow.training.filtering``
``export_verl``        ``campflow export``           ``campflow.training.filtering``
``ensure_base``        ``campflow train base``       ``campflow.training.base``
``train_sft``          ``campflow train sft``        ``campflow.training.sft``
``train_rl``           ``campflow train rl``         ``campflow.training.rl``
``import_bootcamp``    ``campflow import``           ``campflow.storage.imports``
``check``              ``campflow bootcamps check``  ``campflow.authoring.bootcamp_file``
``import_own``         ``campflow import bootcamp``  ``campflow.authoring.bootcamp_file``
``author_bootcamp``    ``campflow author``           ``campflow.authoring.author``
``run_sql``            ``campflow sql``              ``campflow.storage.query``
``write_report``       ``campflow report``           ``campflow.report.page``
=====================  ============================  ==============================================
"""

from __future__ import annotations

import importlib
from typing import Any


def _installed_version() -> str:
    """The version of the installed distribution (pyproject.toml's), as ``campflow --version`` prints it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("campflow")
    except PackageNotFoundError:  # a source tree on sys.path that was never installed
        return "0+unknown"


__version__ = _installed_version()

# name -> (module, attribute): one table, read by __getattr__ and by the test that holds the CLI to it
API: dict[str, tuple[str, str]] = {
    "load_config": ("campflow.config", "load_config"),
    "Workspace": ("campflow.storage.workspace", "Workspace"),
    "evaluate": ("campflow.flows.evaluate", "evaluate"),
    "collect": ("campflow.flows.collect", "collect"),
    "improve": ("campflow.flows.improve", "improve"),
    "watch": ("campflow.flows.watch", "watch_flow"),
    "serve": ("campflow.flows.serve", "serve"),
    "analyze_run": ("campflow.synthesis.pipeline", "analyze_run"),
    "synthesize": ("campflow.synthesis.pipeline", "synthesize"),
    "build_sft_dataset": ("campflow.training.filtering", "build_sft_dataset"),
    "export_verl": ("campflow.training.filtering", "export_verl"),
    "ensure_base": ("campflow.training.base", "ensure_base"),
    "train_sft": ("campflow.training.sft", "train_sft"),
    "train_rl": ("campflow.training.rl", "train_rl"),
    "import_bootcamp": ("campflow.storage.imports", "import_bootcamp"),
    "check": ("campflow.authoring.bootcamp_file", "check_bootcamp"),
    "import_own": ("campflow.authoring.bootcamp_file", "import_own_bootcamp"),
    "author_bootcamp": ("campflow.authoring.author", "author_bootcamp"),
    "run_sql": ("campflow.storage.query", "run_sql"),
    "write_report": ("campflow.report.page", "write_report"),
}

__all__ = ["API", "__version__", *API]


def __getattr__(name: str) -> Any:
    """Load an API function on first use (PEP 562), so ``import campflow`` stays light."""
    try:
        module, attribute = API[name]
    except KeyError:
        raise AttributeError(f"module 'campflow' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
