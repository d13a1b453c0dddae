"""campflow's deployments as a team runs them: `prefect server start`, a `process` work pool, `prefect deploy
--all` from the repository's prefect.yaml and `prefect worker start`, the worker running triggered runs of
campflow-improve and campflow-watch on a tiny workspace. One server, one worker and one cycle for the module.
The prefect commands are read from docs/beyond-one-machine.md, so the page shows what runs here."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from campflow.storage.lock import Holder, read_holder
from tests.conftest import REPO
from tests.loop_config import write_tiny_config
from tests.test_docs import blocks

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
NOBODY = Holder(None, 0, "", "")


@dataclass
class Team:
    """What a team has after following docs/beyond-one-machine.md: a server, deployments and a worker."""

    api: str
    env: dict[str, str]  # what the team's shell has: PREFECT_API_URL, and PWD at the repository
    config: Path
    db: Path
    worker_log: Path

    def prefect(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A ``prefect`` command in the repository, as the docs give it; fails the test if it fails."""
        done = subprocess.run(
            [str(BIN / "prefect"), *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"prefect {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        return done

    def client(self):  # noqa: ANN201
        """Prefect's client on this server (the session's own API stays where it is)."""
        from prefect.client.orchestration import SyncPrefectClient

        return SyncPrefectClient(self.api)

    def worker_tail(self) -> str:
        return self.worker_log.read_text(errors="replace")[-4000:]


def documented() -> dict[str, list[str]]:
    """The page's prefect commands (the block the page marks as run here), by subcommand: ``deploy``,
    ``work-pool``, ``worker``, ``server``, ``deployment``."""
    (block,) = [
        b for b in blocks(REPO / "docs" / "beyond-one-machine.md") if b.marker == "runs-in: tests/test_deployments.py"
    ]
    commands = [shlex.split(line) for line in block.code.splitlines() if line.startswith("prefect ")]
    return {argv[1]: argv[1:] for argv in commands}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        args, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group (a worker stops its flow runs), SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=15)
            break
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def team(tmp_path_factory) -> Iterator[Team]:
    """`prefect server start` (its own home; the scheduler off, so only triggered runs run, and a run
    refused a deployment's slot retries after 1 s), the `campflow` pool, the deployments and a worker."""
    root = tmp_path_factory.mktemp("deployments")
    docs = documented()
    port = _free_port()
    server_args = docs["server"]
    for option, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        server_args[server_args.index(option) + 1] = value
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    base |= {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    server_env = base | {
        "PREFECT_HOME": str(root / "server-home"),
        "PREFECT_UI_ENABLED": "false",
        "PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED": "false",
        "PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS": "1",
        # SQLite under a loaded machine: wait for the database rather than answer 503
        "PREFECT_SERVER_DATABASE_TIMEOUT": "60",
        "PREFECT_SERVER_DATABASE_CONNECTION_TIMEOUT": "60",
    }
    server = _start([str(BIN / "prefect"), *server_args], server_env, root / "server.log")
    api = f"http://127.0.0.1:{port}/api"
    worker = None
    try:
        deadline = time.monotonic() + 300  # minutes on a loaded machine; seconds on an idle one
        while True:
            try:
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (root / "server.log").read_text()[-3000:]
            time.sleep(0.5)
        # the cheapest real cycle: one bootcamp, one level, two eval instances, SFT without RL; watch's
        # threshold out of reach, so a watch run after the cycle starts no second one
        config = write_tiny_config(
            root / "ws",
            eval__bootcamps=["calculator"],
            eval__n=2,
            eval__levels=[1],
            training__levels=[1],
            training__sft__max_steps=2,
            improve__rl=False,
            improve__curriculum_n=0,
            improve__eval_variants=False,
            watch__threshold=1000,
        )
        # the repository's prefect.yaml with the team's one edit: the config its deployments run
        project = yaml.safe_load((REPO / "prefect.yaml").read_text())
        for deployment in project["deployments"]:
            deployment["parameters"]["cfg"] = str(config)
        prefect_file = root / "prefect.yaml"
        prefect_file.write_text(yaml.safe_dump(project, sort_keys=False))
        env = base | {
            "PREFECT_API_URL": api,
            "PREFECT_HOME": str(root / "client-home"),
            "PWD": str(REPO),
            "PREFECT_CLIENT_MAX_RETRIES": "10",
        }
        team = Team(api, env, config, root / "ws" / "campflow.duckdb", root / "worker.log")
        team.prefect(*docs["work-pool"])
        worker_env = env | {
            "PREFECT_HOME": str(root / "worker-home"),
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PREFECT_LOGGING_LEVEL": "INFO",  # the flow runs' info lines reach the API
        }
        worker = _start([str(BIN / "prefect"), *docs["worker"]], worker_env, team.worker_log)
        team.prefect(*docs["deploy"], "--prefect-file", str(prefect_file))
        yield team
    finally:
        if worker is not None:
            _stop(worker)
        _stop(server)


def _wait(what: str, check, team: Team, timeout: float = 600):  # noqa: ANN001, ANN202
    """Poll ``check`` until it returns something true; fail with the worker's log after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s; worker:\n{team.worker_tail()}"
        time.sleep(0.5)
    return found


def test_the_deployments_are_prefect_yamls(team: Team) -> None:
    with team.client() as client:
        deployments = {d.name: d for d in client.read_deployments()}
        pool = client.read_work_pool("campflow")
    assert pool.type == "process"
    assert set(deployments) == {"campflow-improve", "campflow-watch"}
    for d in deployments.values():
        assert (d.work_pool_name, d.global_concurrency_limit.limit) == ("campflow", 1)
        assert d.parameters == {"cfg": str(team.config)}
        assert d.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]
    improve, watch = deployments["campflow-improve"], deployments["campflow-watch"]
    assert improve.entrypoint == "campflow/flows/improve.py:improve_flow"
    assert [s.schedule.cron for s in improve.schedules] == ["0 3 * * *"]
    assert watch.entrypoint == "campflow/flows/watch.py:watch_flow"
    assert [s.schedule.interval.total_seconds() for s in watch.schedules] == [3600]


def test_a_worker_runs_a_cycle_and_a_second_run_waits_for_the_deployments_slot_and_the_workspace_lock(
    team: Team,
) -> None:
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterKey,
        FlowRunFilter,
        FlowRunFilterDeploymentId,
        LogFilter,
        LogFilterFlowRunId,
    )

    from campflow.storage.query import run_sql

    client = team.client()
    with client:
        deployments = {d.name: d for d in client.read_deployments()}
        improve, watch = deployments["campflow-improve"], deployments["campflow-watch"]
        team.prefect(*documented()["deployment"])  # a run now, as the page starts one
        (cycle_run,) = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(deployment_id=FlowRunFilterDeploymentId(any_=[improve.id]))
        )
        _wait("the worker's cycle holds the workspace lock", lambda: (read_holder(team.db) or NOBODY).cycle_id, team)
        assert client.read_flow_run(cycle_run.id).state.type.value == "RUNNING"

        # while the cycle runs: a second cycle, and two watch runs
        second = client.create_flow_run_from_deployment(improve.id)
        watches = [client.create_flow_run_from_deployment(watch.id) for _ in range(2)]

        def state(run_id):  # noqa: ANN001, ANN202
            return client.read_flow_run(run_id).state

        _wait(
            "the second cycle waits for the deployment's slot",
            lambda: state(second.id).name == "AwaitingConcurrencySlot",
            team,
        )
        assert state(cycle_run.id).type.value == "RUNNING", "it waits while the first one runs"
        history = sorted(client.read_flow_run_states(second.id), key=lambda s: s.timestamp)
        shown = [(s.name, s.timestamp.isoformat(), s.message) for s in history]
        assert not {"Pending", "Running"} & {s.name for s in history}, f"the second cycle never started: {shown}"
        # one cycle is enough here: the run is deleted, not cancelled, because a worker that read it while it
        # waited proposes Pending, and Prefect's slot rule turns that into AwaitingConcurrencySlot again even
        # from Cancelled (seen on a CI run): a cancelled waiting run can come back and run
        client.delete_flow_run(second.id)

        def finished():  # noqa: ANN202
            runs = [client.read_flow_run(r.id) for r in (cycle_run, *watches)]
            return runs if all(r.state.type.value in TERMINAL for r in runs) else None

        cycle_run, *watches = _wait("the cycle and both watch runs end", finished, team)
        assert [r.state.type.value for r in (cycle_run, *watches)] == ["COMPLETED"] * 3, team.worker_tail()

        others = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(deployment_id=FlowRunFilterDeploymentId(any_=[improve.id]))
        )
        assert [r.id for r in others] == [cycle_run.id], "the deleted waiting cycle stayed gone and never ran"

        # the two watch runs: one held the deployment's slot, the other waited for it and ran after
        first, later = sorted(watches, key=lambda r: r.start_time)
        assert "AwaitingConcurrencySlot" in [s.name for s in client.read_flow_run_states(later.id)]
        assert later.start_time >= first.end_time

        # a watch run during the cycle was refused by the workspace lock, and its page says so
        cycle_id = cycle_run.name  # the run is named after its cycle once the cycle is known
        lines = [
            log.message
            for log in client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[first.id])))
        ]
        refusal = f"no cycle could start: cycle {cycle_id} has held this workspace since "
        assert any(line.startswith(refusal) for line in lines), lines

        # the cycle's artifacts are in the API, on its flow run; its evaluations left theirs
        keys = [f"cycle-{cycle_id}", f"cycle-{cycle_id}-levels", f"cycle-{cycle_id}-report"]
        runs = [f"run-{cycle_id}-before", f"run-{cycle_id}-after"]
        artifacts = {
            a.key: a
            for a in client.read_latest_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys + runs))
            )
        }
    assert set(artifacts) == set(keys + runs)
    assert all(artifacts[k].flow_run_id == cycle_run.id for k in keys)
    assert artifacts[f"cycle-{cycle_id}"].data.startswith(f"# Cycle {cycle_id}: ")

    def sql(query: str) -> list[tuple]:
        return run_sql(team.db, query, wait_s=30).rows

    assert sql("SELECT cycle_id, status FROM cycles") == [(cycle_id, "completed")]
    assert sql("SELECT count(*), count(started_cycle_id) FROM watch_decisions") == [(2, 0)]
