"""campflow's optional parts, and the one line that names the extra a missing one comes with.

``pip install campflow`` is the core: bootcamps, evaluation through any OpenAI-compatible endpoint, the
store, ``campflow sql`` and failure mining. Training, imports of other people's tasks, OpenEnv serving,
Ray and DataFrames are extras (``pyproject.toml``). Their libraries are imported inside the functions
that use them, so a command meets a missing one only when it runs; :func:`missing_extra` turns that
``ModuleNotFoundError`` into an error that says what to install.
"""

from __future__ import annotations

from campflow.errors import CampflowError

# top-level module -> the extra that installs it (one table: pyproject.toml's extras list the same)
EXTRA_OF_MODULE: dict[str, str] = {
    "torch": "train",
    "transformers": "train",
    "trl": "train",
    "peft": "train",
    "accelerate": "train",
    "datasets": "train",
    "matplotlib": "view",
    "pandas": "view",
    "inspect_ai": "view",
    "reasoning_gym": "imports",
    "gymnasium": "imports",
    "openenv": "openenv",
    "mcp": "mcp",
    "prefect_ray": "scale",
    "ray": "scale",
}


class MissingExtraError(CampflowError):
    """A library of one of campflow's extras is not installed."""

    exit_code = 2


def missing_extra(exc: ModuleNotFoundError) -> MissingExtraError | None:
    """The error naming the extra that installs the module ``exc`` could not find; None for a module
    that no extra provides (a real bug or a broken environment, which should surface as it is)."""
    module = (exc.name or "").split(".")[0]
    return _missing(module) if module in EXTRA_OF_MODULE else None


def _missing(module: str) -> MissingExtraError:
    extra = EXTRA_OF_MODULE[module]
    return MissingExtraError(
        f"this needs campflow's '{extra}' extra ({module} is not installed): pip install 'campflow[{extra}]'"
    )


def require(extra: str) -> None:
    """Raise :class:`MissingExtraError` now if a library of ``extra`` is not installed: for a command to
    say so before it starts a flow, rather than from inside one of its tasks.

    Raises:
        KeyError: no module of :data:`EXTRA_OF_MODULE` belongs to ``extra``.
    """
    import importlib.util

    modules = [m for m, e in EXTRA_OF_MODULE.items() if e == extra]
    if not modules:
        raise KeyError(f"extra {extra!r}: expected one of {sorted(set(EXTRA_OF_MODULE.values()))}")
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise _missing(module)
