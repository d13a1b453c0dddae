"""Shared fixtures. Prefect runs against a temporary home; nothing touches the user's ~/.prefect."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

_PREFECT_HOME = tempfile.mkdtemp(prefix="campflow-prefect-")
os.environ.setdefault("PREFECT_HOME", _PREFECT_HOME)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parent.parent

# pytest-xdist's workers start with SIGINT ignored, and an ignored signal stays ignored in every process
# they start: the commands the tests stop with Ctrl-C would never see it (a campflow command started as
# a background job honours that too). A handler is reset to the default on exec, so the commands start
# as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with long end-to-end tests (marker ``slow``) first, the most such tests first.

    `make test` gives each of its two workers whole files, in this order (with ``--no-loadscope-reorder``:
    pytest-xdist would otherwise send the files with the most tests first, and a file of two long tests,
    such as the real vLLM's, last, where it ran alone for minutes while the other worker had finished).
    Longest first is what keeps two workers busy to the end.
    """
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])  # stable: a file's tests stay together and in order


@pytest.fixture(scope="module", autouse=True)
def _registry_as_found():
    """Each test module leaves the process's bootcamp registry as it found it: bootcamps a module
    imported or authored, and the workspace resolver it installed, do not reach the next module (where
    ``all`` would count them)."""
    from campflow.bootcamps import registry

    names, resolver = set(registry.names()), registry.current_resolver()
    yield
    for name in set(registry.names()) - names:
        registry.unregister(name)
    registry.set_resolver(resolver)


@pytest.fixture(scope="session")
def prefect_harness():
    """A temporary Prefect API for the whole test session (started once, ~10 s)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session", autouse=True)
def _commands_share_the_sessions_prefect_api(prefect_harness):
    """The ``campflow`` commands the tests start use this test process's Prefect API.

    Without ``PREFECT_API_URL`` each command that runs a flow starts an API server of its own, ~12 s of CPU
    on these 2-core machines (a command's flow takes ~3.5 s against a running API, ~16 s alone), and the
    suite starts dozens. The embedded default's own server is still what the tests of stopping, of the
    README and of the server a command starts exercise: they drop ``PREFECT_API_URL`` from their env.
    """
    from prefect.settings import PREFECT_API_URL

    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
    yield
    if before is None:
        os.environ.pop("PREFECT_API_URL", None)
    else:
        os.environ["PREFECT_API_URL"] = before


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace folder."""
    return tmp_path / "ws"


@pytest.fixture
def store(workspace: Path):
    """A fresh store in the temporary workspace."""
    from campflow.storage.store import Store

    return Store(workspace / "campflow.duckdb")


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300):
    """Run the installed ``campflow`` console script in a subprocess."""
    import subprocess

    exe = Path(sys.executable).parent / "campflow"
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, env=full_env, timeout=timeout)
