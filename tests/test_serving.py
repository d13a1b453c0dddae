"""Serving checkpoints: a server launched from ``serving.command`` evaluates like the in-process policy,
never outlives its evaluation (not even a SIGKILLed one), and each way it can fail is one clear error."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from campflow.config import load_config
from campflow.errors import ServingError
from campflow.serving import CheckpointServers, serve_checkpoint
from campflow.testing.tiny import untrained_tiny

TEST_SERVER = "{python} -m campflow.testing.serve_model {path} --port {port} --served-model-name {name}"
TINY = untrained_tiny(2048)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny calculator model, saved as a checkpoint folder."""
    from campflow.training.tinymodel import build_tiny_model

    out = tmp_path_factory.mktemp("ckpt") / "tiny"
    build_tiny_model(out, TINY, ["calculator"])
    return out


def _config(workspace: Path, checkpoint: Path, kind: str = "inprocess", **extra):
    overrides = {
        "workspace.path": str(workspace),
        "policy.kind": "local",
        "policy.model": str(checkpoint),
        "policy.max_tokens": 24,
        "policy.max_retries": 0,
        "policy.timeout": 60,
        "eval.bootcamps": ["calculator"],
        "eval.n": 6,
        "eval.levels": [1],
        "rollout.concurrency": 8,
        "rollout.max_turns": 3,
        "rollout.workers": 1,
        "serving.kind": kind,
        "serving.command": TEST_SERVER,
        "serving.startup_timeout": 120,
    }
    overrides.update(extra)
    return load_config(None, overrides)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def _servers_of(checkpoint: Path) -> list[int]:
    """Pids of test servers serving ``checkpoint`` or a model under it (from /proc, so nothing the code under test reports)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                b"campflow.testing.serve_model" in cmdline
                and any(str(checkpoint).encode() in a for a in cmdline)
                and _alive(int(entry.name))
            ):
                pids.append(int(entry.name))
    return pids


def _gone(pid: int, wait: float = 60.0) -> bool:
    deadline = time.monotonic() + wait  # the kernel delivers the parent-death signal asynchronously
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def _exited(child: int, wait: float = 60.0) -> bool:
    """Whether this process's child ``child`` has exited, every thread of it (a zombie leader whose threads
    still end cannot be waited for yet), within ``wait`` s; looked for without a pause and without reaping it."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, child, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped already (by the server's own thread)
            return True
    return False


@pytest.mark.usefixtures("prefect_harness")
def test_a_launched_test_server_evaluates_every_episode_as_the_inprocess_policy_does(tmp_path, checkpoint) -> None:
    from campflow.flows.evaluate import evaluate
    from campflow.storage.store import Store

    outcomes = {}
    for kind in ("inprocess", "launch"):
        cfg = _config(tmp_path / kind, checkpoint, kind)
        summary = evaluate(cfg, run_id=f"eval-{kind}")
        rows = Store(cfg.workspace.db_path).query(
            "SELECT instance_id, termination, reward, turns, transcript FROM episodes ORDER BY instance_id"
        )
        outcomes[kind] = (
            summary.pass_rates,
            [
                (
                    r["instance_id"],
                    r["termination"],
                    r["reward"],
                    r["turns"],
                    [(m.get("content") or "").strip() for m in json.loads(r["transcript"]) if m["role"] == "assistant"],
                )
                for r in rows
            ],
        )
        assert summary.ran == 6
        rates = summary.throughput  # what evaluating cost, kept in the run's summary for `campflow runs`
        assert rates["episodes_per_s"] > 0 and rates["tokens_per_s"] > 0 and rates["latency_per_turn_s"] > 0
    assert outcomes["launch"] == outcomes["inprocess"]
    from tests.conftest import run_cli

    listed = run_cli(
        "runs",
        "--json",
        "--db",
        str(tmp_path / "launch" / "campflow.duckdb"),
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["run_id"] == "eval-launch")
    assert all(row[col] is not None for col in ("ep_per_s", "tok_per_s", "ms_per_turn")), row
    assert "infra_error" not in {o[1] for o in outcomes["launch"][1]}
    assert _servers_of(checkpoint) == []
    logs = list((tmp_path / "launch" / "serving-logs").glob("*.log"))
    assert len(logs) == 1 and "campflow.testing.serve_model" in logs[0].read_text()


def test_one_server_per_checkpoint_is_shared_by_the_steps_and_stopped_at_close(tmp_path, checkpoint) -> None:
    cfg = _config(tmp_path, checkpoint, "launch")
    with CheckpointServers(cfg) as servers:
        first = servers.policy(checkpoint)
        assert servers.policy(str(checkpoint)) == first  # the second step reuses the first one's server
        assert first.kind == "openai" and first.base_url.startswith("http://127.0.0.1:")
        pids = _servers_of(checkpoint)
        assert len(pids) == 1
    assert not _alive(pids[0])


def test_a_sigkilled_evaluating_process_takes_its_server_with_it(tmp_path, checkpoint) -> None:
    script = textwrap.dedent(f"""
        import sys, time, threading
        from campflow.config import load_config
        from campflow.serving import serve_checkpoint
        cfg = load_config(None, {{"workspace.path": {str(tmp_path)!r}, "serving.kind": "launch",
                                  "serving.command": {TEST_SERVER!r}}})
        def step():  # like a flow step: the server is asked for on a thread that ends
            global ctx, policy
            ctx = serve_checkpoint(cfg, {str(checkpoint)!r})
            policy = ctx.__enter__()
        t = threading.Thread(target=step); t.start(); t.join()
        print(policy.base_url, flush=True)
        time.sleep(600)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    flow = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        url = flow.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        (server,) = _servers_of(checkpoint)
        assert _alive(server)  # it outlived the thread that asked for it
        flow.send_signal(signal.SIGKILL)
        flow.wait()
        assert _gone(server)
    finally:
        flow.kill()
        flow.wait()
        for pid in _servers_of(checkpoint):
            os.kill(pid, signal.SIGKILL)


def test_a_command_that_cannot_run_is_one_error_naming_it(tmp_path, checkpoint) -> None:
    cfg = _config(tmp_path, checkpoint, "launch", **{"serving.command": "no-such-server-binary --port {port}"})
    with pytest.raises(
        ServingError,
        match=r"cannot start the server `no-such-server-binary --port \d+`.*"
        r"No such file or directory",
    ):
        with serve_checkpoint(cfg, checkpoint):
            pass


def test_an_unknown_placeholder_is_one_error_listing_the_known_ones(tmp_path, checkpoint) -> None:
    cfg = _config(tmp_path, checkpoint, "launch", **{"serving.command": "vllm serve {model}"})
    with pytest.raises(ServingError, match=r"unknown placeholder \{model\}; expected some of \{path\}"):
        with serve_checkpoint(cfg, checkpoint):
            pass


def test_a_busy_port_is_one_error_naming_the_port(tmp_path, checkpoint) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        cfg = _config(tmp_path, checkpoint, "launch", **{"serving.port": port})
        with pytest.raises(ServingError, match=rf"serving.port = {port}: port {port} on 127.0.0.1 is already in use"):
            with serve_checkpoint(cfg, checkpoint):
                pass


def test_a_server_that_exits_at_startup_is_one_error_quoting_its_log(tmp_path, checkpoint) -> None:
    command = "{python} -c \"import sys; print('cannot load {name}'); sys.exit(3)\""
    cfg = _config(tmp_path, checkpoint, "launch", **{"serving.command": command})
    with pytest.raises(
        ServingError,
        match=r"exited with code 3 before it answered; log .*serving-logs/.*\.log: .*"
        r"cannot load tiny",
    ):
        with serve_checkpoint(cfg, checkpoint):
            pass


def test_a_server_that_never_answers_times_out_naming_the_timeout_and_log_and_is_stopped(tmp_path, checkpoint) -> None:
    command = "{python} -c \"import time; print('loading {name}', flush=True); time.sleep(600)\""
    cfg = _config(tmp_path, checkpoint, "launch", **{"serving.command": command, "serving.startup_timeout": 1})
    with pytest.raises(
        ServingError,
        match=r"did not answer GET http://127.0.0.1:\d+/v1/models within "
        r"serving.startup_timeout = 1s; log .*: .*loading tiny",
    ):
        with serve_checkpoint(cfg, checkpoint):
            pass
    log = next((tmp_path / "serving-logs").glob("*.log")).read_text()
    pid_free = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    assert all(
        b"loading tiny" not in (p / "cmdline").read_bytes()
        for p in pid_free
        if (p / "cmdline").exists() and _alive(int(p.name))
    ), log


def test_a_server_killed_mid_run_makes_infra_errors_and_one_error_after_the_step(tmp_path, checkpoint) -> None:
    from campflow.agents.factory import build_policy
    from campflow.bootcamps import registry
    from campflow.bootcamps.splits import eval_instances
    from campflow.rollout.engine import EpisodeSpec, RolloutSettings, rollout

    cfg = _config(tmp_path, checkpoint, "launch")
    bootcamp = registry.make("calculator")
    specs = [EpisodeSpec(bootcamp, inst, 0) for inst in eval_instances(bootcamp, 3, [1])]
    with CheckpointServers(cfg) as servers:
        policy = servers.policy(checkpoint)
        (pid,) = _servers_of(checkpoint)
        os.kill(pid, signal.SIGKILL)
        dead = (
            rf"the server for tiny \(pid {pid}\) exited with code -9 during the "
            r"run; its episodes are infra_error and the step runs again on resume"
        )
        # check() the moment the server can be waited for: a thread that had reaped it then could still hold
        # the Popen's wait lock, and check() took the dead server for a live one
        assert _exited(pid)
        with pytest.raises(ServingError, match=dead):
            servers.check()
        episodes = rollout(specs, build_policy(policy), RolloutSettings.from_config(cfg.rollout), run_id="dead")
        assert {e.termination for e in episodes} == {"infra_error"}
        with pytest.raises(ServingError, match=dead):  # and after the step, which is then not marked done
            servers.check()


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_a_cycle_with_launched_servers_gives_the_pass_rates_of_an_inprocess_cycle_and_leaves_no_server(
    tmp_path,
) -> None:
    from campflow.flows.improve import improve
    from campflow.storage.store import Store
    from tests.loop_config import write_tiny_config

    results = {}
    for kind in ("inprocess", "launch"):
        ws = tmp_path / kind
        cfg = load_config(
            # the pass rates must agree whatever the budgets: the smallest that still trains and evaluates both
            write_tiny_config(
                ws,
                improve__rl=False,
                serving__kind=kind,
                serving__command=TEST_SERVER,
                eval__n=4,
                training__collect_n=4,
                training__sft__max_steps=4,
            ),
            env={},
        )
        summary = improve(cfg, cycle_id="c1")
        results[kind] = (summary.pass_before, summary.pass_after)
        served = Store(cfg.workspace.db_path).query(
            "SELECT DISTINCT run_id, json_extract_string(config, '$.policy.kind') AS kind FROM runs "
            "WHERE run_id IN ('c1-before', 'c1-after') ORDER BY run_id"
        )
        assert {r["kind"] for r in served} == {"local" if kind == "inprocess" else "openai"}
        assert _servers_of(ws) == []
    assert results["launch"] == results["inprocess"]
    logs = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "launch" / "serving-logs").glob("*.log"))
    assert len(logs) == 2  # one server for the start model (evaluate + calibration), one for the candidate


def test_the_live_display_shows_episodes_and_tokens_per_second_and_the_policys_latency() -> None:
    import io

    from rich.console import Console

    from campflow.cli.display import RichReporter

    reporter = RichReporter(Console(file=io.StringIO(), force_terminal=False))
    reporter.start("episodes", "episodes", 4)
    reporter.episode("episodes", 120, 2, 0.5)
    reporter.episode("episodes", 80, 2, 0.3)
    task = reporter.progress.tasks[0]
    assert task.completed == 2
    assert task.description.startswith("episodes (") and " ep/s, " in task.description
    assert " tok/s, 200 ms/turn)" in task.description


@pytest.mark.usefixtures("prefect_harness")
def test_an_adapter_checkpoint_on_a_running_endpoint_is_loaded_evaluated_under_its_name_and_unloaded(tmp_path) -> None:
    from campflow.bootcamps import registry
    from campflow.bootcamps.splits import eval_instances
    from campflow.flows.evaluate import evaluate
    from campflow.testing.scripted_server import OracleScript, ScriptedEndpoint

    adapter = tmp_path / "models" / "sft-lora"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": "/models/base", "peft_type": "LORA"})
    )
    (adapter / "campflow.json").write_text(json.dumps({"model_id": "sft-abc123"}))
    script = OracleScript(eval_instances(registry.make("calculator"), 4, [1]))
    with ScriptedEndpoint(script, model="base", strict_models=True) as server:
        cfg = _config(tmp_path, adapter, "endpoint", **{"serving.base_url": server.url, "eval.n": 4})
        summary = evaluate(cfg, run_id="lora")
        assert server.lora_log == [("load", "sft-abc123", str(adapter.resolve())), ("unload", "sft-abc123", None)]
        assert set(server.served_as) == {"sft-abc123"} and server.adapters == {}
    assert summary.model_id == "sft-abc123" and summary.pass_rates == {"calculator": 1.0}


def test_a_full_checkpoint_a_running_endpoint_does_not_serve_is_one_error_listing_what_it_serves(
    tmp_path, checkpoint
) -> None:
    from campflow.testing.scripted_server import ReplyScript, ScriptedEndpoint

    with ScriptedEndpoint(ReplyScript(["hi"]), model="Qwen/Qwen3-8B") as server:
        cfg = _config(tmp_path, checkpoint, "endpoint", **{"serving.base_url": server.url})
        with pytest.raises(ServingError, match=r"serves \['Qwen/Qwen3-8B'\], not checkpoint tiny"):
            with serve_checkpoint(cfg, checkpoint):
                pass
        cfg.serving.model = "Qwen/Qwen3-8B"  # the user says this server serves the checkpoint
        with serve_checkpoint(cfg, checkpoint) as policy:
            assert (policy.kind, policy.model, policy.base_url) == ("openai", "Qwen/Qwen3-8B", server.url)


def test_a_server_that_dies_of_an_exception_names_the_root_cause_before_its_last_lines(tmp_path, checkpoint) -> None:
    command = (
        "{python} -c \"import sys; print('[core.py:9] ValueError: not enough memory for {name}'); "
        "[print('unwinding', i) for i in range(20)]; print('RuntimeError: see root cause above'); sys.exit(1)\""
    )
    cfg = _config(tmp_path, checkpoint, "launch", **{"serving.command": command})
    with pytest.raises(
        ServingError,
        match=r"exited with code 1 before it answered; log .*: \[core.py:9\] ValueError: "
        r"not enough memory for tiny \| \.\.\. \| unwinding 16 .* RuntimeError: see "
        r"root cause above$",
    ):
        with serve_checkpoint(cfg, checkpoint):
            pass
