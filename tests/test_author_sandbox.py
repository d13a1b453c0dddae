"""The sandbox an authored module is judged in: what it refuses, and that the host is left as it was.

Each misbehaving module is the good one of :mod:`tests.authored_modules` plus one bad act, at import
or inside ``build`` (first called by the declarations check, which builds an instance to see its tools); the
sandbox must fail the check it happened in with a reason that says what was
refused, leave nothing outside its folder, and leave no process and no folder of its own behind.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from campflow.authoring.author import author_bootcamp
from campflow.authoring.contract_run import run_contract
from campflow.authoring.sandbox import UNSHARE, namespaces_available
from campflow.bootcamps import registry
from campflow.config import SandboxConfig, load_config
from campflow.testing.scripted_server import ReplyScript, ScriptedEndpoint
from tests import authored_modules as modules
from tests.test_bootcamp_subclasses import NOTES_SERVER

# (what it does, where: setup = at import / build = in build, the code, the check that fails, the reason)
MISBEHAVIOURS = [
    (
        "opens a socket",
        "setup",
        "import socket\nsocket.create_connection(('127.0.0.1', PORT), timeout=2)",
        "imports",
        "network access",
    ),
    (
        "opens a raw socket in build",
        "build",
        "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM)",
        "declarations",
        "network access (socket.__new__)",
    ),
    (
        "writes outside its folder",
        "setup",
        "open(WATCHED + '/stray.txt', 'w').write('x')",
        "imports",
        "writing outside its folder",
    ),
    (
        "writes outside through pathlib, swallowing the error",
        "build",
        "import pathlib\ntry:\n    pathlib.Path(WATCHED, 'p.txt').write_text('x')\nexcept OSError:\n    pass",
        "declarations",
        "writing outside its folder",
    ),
    ("makes a folder outside", "setup", "import os\nos.mkdir(WATCHED + '/sub')", "imports", "changing files outside"),
    (
        "moves its own file out",
        "setup",
        "import os\nopen('mine', 'w').close()\nos.rename('mine', WATCHED + '/m')",
        "imports",
        "changing files outside its folder (os.rename",
    ),
    ("forks without end", "setup", "import os\nwhile True:\n    os.fork()", "imports", "starting a process (os.fork)"),
    (
        "starts a subprocess",
        "build",
        "import subprocess\nsubprocess.run(['touch', WATCHED + '/touched'])",
        "declarations",
        "starting a process",
    ),
    (
        "starts a multiprocessing worker",
        "setup",
        "import multiprocessing\nmultiprocessing.Process(target=print).start()",
        "imports",
        "starting a process",
    ),
    (
        "signals another process",
        "setup",
        "import os, signal\nos.kill(HOST_PID, signal.SIGTERM)",
        "imports",
        "signalling another process",
    ),
    ("loads native code", "setup", "import ctypes", "imports", "native code (import ctypes)"),
    (
        "connects a Unix socket",
        "build",
        "import socket\nsocket.socket(socket.AF_UNIX).connect(WATCHED + '/sock')",
        "declarations",
        "network access (socket.connect)",
    ),
    (
        "starts a process through campflow's server guard",
        "build",
        "import subprocess, sys\nfrom campflow.mcp.server import GUARD\n"
        "subprocess.run([sys.executable, '-I', '-S', str(GUARD), 'touch', WATCHED + '/touched'])",
        "declarations",
        "starting a process",
    ),
    (
        "allocates without end",
        "build",
        "hoard = []\nwhile True:\n    hoard.append(bytearray(20_000_000))",
        "declarations",
        "ran out of memory: the sandbox allows 256 MiB",
    ),
    (
        "writes a huge file in its folder",
        "setup",
        "open('big', 'wb').write(b'x' * (40 << 20))",
        "imports",
        "past the sandbox's size limit of 16 MiB",
    ),
]


@pytest.fixture
def listener():
    """A TCP server on 127.0.0.1 that nothing from the sandbox may reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def _accepted_connections(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (the sandbox folders' root)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _fill(code: str, listener: socket.socket, watched: Path) -> str:
    return (
        code.replace("PORT", str(listener.getsockname()[1]))
        .replace("WATCHED", repr(str(watched)))
        .replace("HOST_PID", str(os.getpid()))
    )


@pytest.mark.parametrize(("what", "where", "code", "check", "reason"), MISBEHAVIOURS, ids=[m[0] for m in MISBEHAVIOURS])
def test_the_sandbox_refuses_a_module_that_reaches_outside_and_the_host_is_unharmed(
    tmp_path: Path, listener: socket.socket, what: str, where: str, code: str, check: str, reason: str
) -> None:
    watched, root = tmp_path / "watched", tmp_path / "sandboxes"
    watched.mkdir()
    source = modules.variant(**{where: _fill(code, listener, watched)})
    report = run_contract(
        source, name="au-reverse", examples=[], instances=200, limits=SandboxConfig(root=root, memory_mb=256)
    )
    assert not report.accepted
    first = report.failures[0]
    assert (first.check, reason in first.reason) == (check, True), first.line()
    assert list(watched.iterdir()) == [], "nothing was written outside the sandbox"
    assert _accepted_connections(listener) == 0, "nothing reached the host's network"
    assert list(root.iterdir()) == [], "the sandbox folders are gone"
    assert _processes_mentioning(str(root)) == [], "no process of the sandbox is left"
    assert subprocess.run(["true"], check=False).returncode == 0, "the host can still start processes"


@pytest.mark.parametrize(
    ("code", "limits", "reason"),
    [
        ("while True:\n    pass", {"cpu_s": 1}, "used up its CPU time limit (1 s)"),
        (
            "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
            {"cpu_s": 1},
            "CPU time limit of 1 s and was killed",
        ),
        ("import time\ntime.sleep(3600)", {"wall_s": 3}, "ran past its wall-clock limit of 3 s and was killed"),
    ],
    ids=["spins", "spins and swallows the limit", "sleeps"],
)
def test_a_module_that_never_finishes_is_stopped_by_its_limits(
    tmp_path: Path, code: str, limits: dict[str, Any], reason: str
) -> None:
    root = tmp_path / "sandboxes"
    report = run_contract(
        modules.variant(build=code),
        name="au-reverse",
        examples=[],
        instances=200,
        limits=SandboxConfig(root=root, **limits),
    )
    first = report.failures[0]
    assert first.check == "declarations" and reason in first.reason, first.line()
    assert all(v.passed is None for v in report.verdicts if v.check in ("oracle", "wrong_answer"))
    assert list(root.iterdir()) == [] and _processes_mentioning(str(root)) == []


def test_the_sandboxed_process_sees_only_its_own_folder_and_none_of_this_processes_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAMPFLOW_TEST_SECRET", "hunter2")
    probe = (
        "import os, tempfile\n"
        "if 'CAMPFLOW_TEST_SECRET' in os.environ:\n    raise RuntimeError('saw the parent environment')\n"
        "here = os.path.realpath(os.getcwd())\n"
        "if {os.path.realpath(os.environ['HOME']), os.path.realpath(tempfile.gettempdir())} != {here}:\n"
        "    raise RuntimeError('HOME or TMPDIR is not its folder')\n"
        "open('scratch.txt', 'w').write('inside is fine')\n"
    )
    report = run_contract(
        modules.variant(setup=probe), name="au-reverse", examples=[], instances=200, limits=SandboxConfig(root=tmp_path)
    )
    assert report.accepted, [v.line() for v in report.failures]


@pytest.mark.skipif(not namespaces_available(), reason="unshare -rnp does not work on this machine")
def test_the_namespaces_leave_no_network_and_take_every_process_down_with_the_sandbox(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    code = (
        "import os, socket, sys\n"
        "pid = os.fork()\n"  # no audit hook here: the namespaces alone must hold
        "if pid == 0:\n    import time; time.sleep(3600)\n"
        "try:\n    socket.create_connection(('127.0.0.1', PORT), timeout=2)\n    print('connected')\n"
        "except OSError as exc:\n    print('refused', exc.errno)\n"
        "print(os.getpid(), 'child', pid, flush=True)\n"
    ).replace("PORT", str(port))
    out = subprocess.run(
        [*UNSHARE, sys.executable, "-c", code, "campflow-ns-test"], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.splitlines()[0].startswith("refused") and _accepted_connections(listener) == 0
    assert out.stdout.splitlines()[1].startswith("1 child"), "the sandboxed Python is the PID namespace's init"
    assert _processes_mentioning("campflow-ns-test") == [], "its sleeping child died with it"


def test_a_refusal_goes_back_to_the_llm_and_a_repaired_module_is_accepted(
    tmp_path: Path, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    phoning = modules.variant(setup=f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/words')")
    task = tmp_path / "reverse.md"
    task.write_text("Reverse a word.")
    script_replies = [modules.reply(phoning), modules.reply(modules.GOOD)]
    requests: list[dict] = []

    def script(request: dict) -> dict:
        requests.append(request)
        return ReplyScript(script_replies[len(requests) - 1 :])(request)

    with ScriptedEndpoint(script) as endpoint:
        cfg = load_config(
            None,
            {
                "workspace.path": str(tmp_path / "ws"),
                "author.llm.model": "scripted",
                "author.llm.base_url": endpoint.url,
                "author.sandbox.root": str(tmp_path / "sandboxes"),
            },
            env={},
        )
        try:
            result = author_bootcamp(task, cfg=cfg)
        finally:
            registry.unregister("au-reverse")
    assert [r.accepted for r in result.rounds] == [False, True]
    assert "imports: the sandbox refused network access" in requests[1]["messages"][-1]["content"]
    assert _accepted_connections(listener) == 0


# A served bootcamp (an MCP server as its tools): the sandbox starts its declared server through campflow's
# guard, and nothing else. Each bad act is in tools(), which the declarations check calls once the server
# is permitted, right after the real server was started (and stopped) to list its tools.
SERVED = '''
import sys

from pydantic import Field

from campflow.bootcamps.base import Action, Params, Score
from campflow.mcp.bootcamp import McpBootcamp
from campflow.mcp.server import GUARD, ServerSpec

SERVER = SERVER_PATH


class NotesParams(Params):
    notes: int = Field(1, ge=1, le=3)


class Notes(McpBootcamp[NotesParams]):
    """Add the notes the prompt lists, then submit."""

    name = "au-notes"
    params_model = NotesParams
    levels = {n: NotesParams(level=n, notes=n) for n in (1, 2, 3)}
    server = ServerSpec(command=[sys.executable, SERVER, "--db", "{workdir}/notes.json"])

    def build(self, params, rng):
        return {"notes": ["milk", "eggs", "tea"][: params.notes]}

    def prompt(self, instance):
        return self.chat("Add: " + ", ".join(instance.data["notes"]))

    def tools(self, instance):
        found = super().tools(instance)
        BAD_ACT
        return found

    def oracle(self, instance, state):
        return Action("submit", {})

    def score(self, instance, state, transcript):
        return Score(0.0, False, {})
'''

SERVED_MISBEHAVIOURS = [
    (
        "starts its declared server itself, its notes outside its folder",
        "import subprocess\nsubprocess.run([sys.executable, '-I', '-S', str(GUARD), sys.executable, SERVER, "
        "'--db', WATCHED + '/notes.json'], timeout=30)",
        "starting a process",
    ),
    (
        "starts another command through the guard",
        "import subprocess\nsubprocess.run([sys.executable, '-I', '-S', str(GUARD), 'touch', WATCHED + '/t'])",
        "starting a process",
    ),
    (
        "starts a process another way",
        "import os\nos.system('touch ' + WATCHED + '/t')",
        "starting a process (os.system)",
    ),
    ("opens a TCP socket", "import socket\nsocket.create_connection(('127.0.0.1', PORT), timeout=2)", "network access"),
    (
        "signals a process it did not start",
        "import os, signal\nos.kill(HOST_PID, signal.SIGTERM)",
        "signalling another",
    ),
    ("writes outside its folder", "open(WATCHED + '/stray.txt', 'w').write('x')", "writing outside its folder"),
]


@pytest.mark.parametrize(("what", "code", "reason"), SERVED_MISBEHAVIOURS, ids=[m[0] for m in SERVED_MISBEHAVIOURS])
def test_a_served_bootcamp_may_start_only_its_declared_server_and_only_through_the_guard(
    tmp_path: Path, listener: socket.socket, what: str, code: str, reason: str
) -> None:
    watched, root = tmp_path / "watched", tmp_path / "sandboxes"
    watched.mkdir()
    server = tmp_path / "notes_server.py"
    server.write_text(NOTES_SERVER)
    bad = _fill(code, listener, watched).replace("\n", "\n        ")
    source = SERVED.replace("SERVER_PATH", repr(str(server))).replace("BAD_ACT", bad)
    report = run_contract(
        source, name="au-notes", examples=[], instances=1, limits=SandboxConfig(root=root), served_instances=1
    )
    first = report.failures[0]
    assert (first.check, reason in first.reason) == ("declarations", True), first.line()
    assert report.info["served_seeds"] == 1
    assert list(watched.iterdir()) == [], "nothing was written outside the sandbox"
    assert _accepted_connections(listener) == 0, "nothing reached the host's network"
    assert list(root.iterdir()) == [], "the sandbox folders are gone"
    assert _processes_mentioning(str(root)) == [] and _processes_mentioning(str(server)) == [], "no server is left"
