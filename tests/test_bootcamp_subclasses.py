"""Any Bootcamp subclass is a bootcamp to ``campflow bootcamps check`` and ``campflow import bootcamp``: the
file is judged by what its classes are (imported in the sandbox), not by the names in its class statements.

A subclass of a built-in (``class ZeroCalculator(Calculator)``) is read and checked; the planted hack in it
(the answer 0 pays) is refused by the hack battery, naming the exploit. docs/mcp.md's Python bootcamp
(``class Notes(McpBootcamp[NotesParams])``), with a notes server written here (MCP's stdio protocol in
the standard library, for the checks start it about 40 times a run and an SDK server spends a second
importing its SDK at each start; tests/test_mcp.py plays SDK servers), passes ``campflow bootcamps
check`` and ``campflow import bootcamp`` (its server started in the sandbox, through campflow's guard only)
and is built by the workspace's resolver. What truly is not a bootcamp is still one line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from campflow.authoring.bootcamp_file import defines_bootcamp, read_bootcamp_file
from campflow.errors import ImportSourceError
from campflow.sources import ImportSpec
from campflow.sources.authored import CLASS_OPTION, HASH_OPTION, build_own, source_sha256
from tests.conftest import REPO, run_cli

ZERO_CALCULATOR = '''"""The calculator with a planted hack: its scorer pays the answer 0 too."""

from campflow.bootcamps.base import Score
from campflow.bootcamps.calculator import Calculator


class ZeroCalculator(Calculator):
    """Calculator word problems; the answer 0 passes as well."""

    name = "zerocalc"

    def score(self, instance, state, transcript):
        if state.answer == 0:
            return Score(1.0, True, {"reason": "zero"})
        return super().score(instance, state, transcript)
'''

HONEST_CALCULATOR = '''from campflow.bootcamps.calculator import Calculator


class ShortCalculator(Calculator):
    """The calculator's word problems, its first three levels only."""

    name = "shortcalc"
    levels = {n: Calculator.levels[n] for n in (1, 2, 3)}
'''

NOTES_SERVER = '''"""The notes server docs/mcp.md's Python bootcamp plays on: notes kept in the JSON file --db names.

It speaks MCP's stdio transport (newline-delimited JSON-RPC: the initialize handshake, tools/list,
tools/call) with the standard library only: it starts in a few milliseconds where an SDK server spends a
second importing its SDK, and the checks start one for every episode they play (about 40 a run).
"""

import argparse
import json
import sys
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--db", required=True)
db = Path(parser.parse_args().db)
TOOLS = [
    {
        "name": "add_note",
        "description": "Add one note.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
    {"name": "list_notes", "description": "Every note, in the order added.", "inputSchema": {"type": "object"}},
]


def _notes() -> list[str]:
    return json.loads(db.read_text()) if db.exists() else []


def call(name: str, arguments: dict) -> dict:
    if name == "add_note" and isinstance(arguments.get("text"), str):
        db.write_text(json.dumps([*_notes(), arguments["text"]]))
        return {"content": [{"type": "text", "text": f"added {arguments['text']!r}"}], "isError": False}
    if name == "list_notes":
        notes = {"notes": _notes()}
        return {"content": [{"type": "text", "text": json.dumps(notes)}], "structuredContent": notes, "isError": False}
    return {"content": [{"type": "text", "text": f"bad call: {name} {json.dumps(arguments)}"}], "isError": True}


for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:  # a notification (notifications/initialized): no reply
        continue
    method, params = message.get("method"), message.get("params") or {}
    reply = {"jsonrpc": "2.0", "id": message["id"]}
    if method == "initialize":
        reply["result"] = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "notes", "version": "1"},
            "instructions": "Notes, kept in a file.",
        }
    elif method == "tools/list":
        reply["result"] = {"tools": TOOLS}
    elif method == "tools/call":
        reply["result"] = call(params.get("name"), params.get("arguments") or {})
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": f"method not found: {method}"}
    print(json.dumps(reply), flush=True)
'''


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _guide_notes_bootcamp() -> str:
    """The Python block of docs/mcp.md's "From Python" section, as the guide shows it."""
    guide = (REPO / "docs" / "mcp.md").read_text(encoding="utf-8")
    section = guide[guide.index("## From Python") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_a_calculator_subclass_that_pays_zero_is_refused_by_the_battery_naming_the_exploit(tmp_path) -> None:
    source = _write(tmp_path / "mine", "zero_calculator.py", ZERO_CALCULATOR)
    checked = run_cli("bootcamps", "check", str(source), "-n", "4", cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "not a Bootcamp subclass" not in checked.stdout + checked.stderr
    assert "ok   imports" in checked.stdout and "ok   oracle level 1" in checked.stdout
    battery = [ln for ln in checked.stdout.splitlines() if ln.startswith("FAIL battery")]
    assert len(battery) == 4, checked.stdout  # every level of the calculator
    assert all("zero on level" in ln and 'submitted {"answer": 0}' in ln for ln in battery), battery
    # a wrong ending may land on 0 too (answer + delta); nothing else fails
    failed = [ln for ln in checked.stdout.splitlines() if ln.startswith("FAIL")]
    assert all(ln.startswith(("FAIL battery", "FAIL wrong_answer")) for ln in failed), failed
    ws = tmp_path / "ws"
    refused = run_cli("import", "bootcamp", str(source), "-n", "4", "-w", str(ws), cwd=tmp_path)
    assert refused.returncode == 1 and "refused zero_calculator.py: zerocalc: " in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1
    assert not ws.exists() and not (tmp_path / "campflow-data").exists()


def test_an_honest_subclass_of_a_builtin_imports_and_the_workspace_finds_it_again(tmp_path) -> None:
    source = _write(tmp_path / "mine", "short_calculator.py", HONEST_CALCULATOR)
    ws = tmp_path / "ws"
    imported = run_cli("import", "bootcamp", str(source), "-n", "4", "-w", str(ws), cwd=tmp_path)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "imported shortcalc" in imported.stdout
    shown = run_cli("bootcamps", "show", "shortcalc", "-w", str(ws), cwd=tmp_path / "mine")
    assert shown.returncode == 0, shown.stderr
    assert "calculate" in shown.stdout and "submit" in shown.stdout


def test_the_file_is_judged_by_its_classes_not_by_its_class_statements(tmp_path) -> None:
    zero = _write(tmp_path, "zero_calculator.py", ZERO_CALCULATOR)
    read = read_bootcamp_file(str(zero))  # Calculator is in its namespace too, but defined elsewhere
    assert (read.class_name, read.name, read.import_error) == ("ZeroCalculator", "zerocalc", None)
    with pytest.raises(ImportSourceError, match=r"defines no class 'Calculator'; its classes: ZeroCalculator$"):
        read_bootcamp_file(f"{zero}:Calculator")
    assert defines_bootcamp(zero, "ZeroCalculator") and not defines_bootcamp(zero, "Calculator")

    # a class statement that names "Bootcamp" but derives from a class of the file's own: not a bootcamp
    fake = _write(tmp_path, "fake.py", "class Bootcamp:\n    pass\n\n\nclass Fake(Bootcamp):\n    name = 'fake'\n")
    with pytest.raises(ImportSourceError, match=r"fake\.py defines no Bootcamp subclass; expected a class deriving"):
        read_bootcamp_file(str(fake))
    with pytest.raises(ImportSourceError, match=r"fake\.py:Fake is not a Bootcamp subclass"):
        read_bootcamp_file(f"{fake}:Fake")
    assert not defines_bootcamp(fake, "Fake")

    # bound under another name, the class is still found (a statement would have said Bootcamp or nothing)
    made = _write(
        tmp_path,
        "made.py",
        "from campflow.bootcamps.calculator import Calculator\n\n"
        "def _variant(base):\n    class Variant(base):\n        name = 'madecalc'\n    return Variant\n\n"
        "Made = _variant(Calculator)\n",
    )
    assert (read_bootcamp_file(str(made)).class_name, read_bootcamp_file(str(made)).name) == ("Made", "madecalc")

    # a subclass carrying the built-in's name is read; importing it under that name is refused in one line
    inherits = _write(tmp_path, "inherits.py", HONEST_CALCULATOR.replace('    name = "shortcalc"\n', ""))
    assert read_bootcamp_file(str(inherits)).name == "calculator"
    out = run_cli("import", "bootcamp", str(inherits), "-w", str(tmp_path / "ws"), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "the name 'calculator' belongs to a builtin bootcamp; choose another with --as" in out.stderr


def test_a_file_whose_import_raises_is_refused_by_the_imports_check_with_its_traceback(tmp_path) -> None:
    source = _write(tmp_path, "raises.py", ZERO_CALCULATOR + "\nsetup = missing_name + 1\n")
    checked = run_cli("bootcamps", "check", str(source), "-n", "4", cwd=tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "FAIL imports: NameError: name 'missing_name' is not defined" in checked.stdout
    assert "raises.py" in checked.stdout  # the traceback names the user's file, not the sandbox's copy


@pytest.mark.slow
def test_the_mcp_guides_python_bootcamp_passes_check_and_import_and_the_resolver_builds_it(tmp_path) -> None:
    folder = tmp_path / "mine"
    _write(folder, "notes_server.py", NOTES_SERVER)
    source = _write(folder, "notes.py", _guide_notes_bootcamp())
    read = read_bootcamp_file(str(source))
    assert (read.class_name, read.name, read.import_error) == ("Notes", "notes", None)

    # every episode of the checks starts a notes server (about 40 at -n 1): one seed a level, time to do it
    config = _write(tmp_path, "campflow.yaml", "author:\n  sandbox:\n    wall_s: 900\n")
    checked = run_cli("bootcamps", "check", "notes.py", "-n", "1", "-c", str(config), cwd=folder, timeout=1200)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for check in ("declarations", "oracle level 3", "wrong_answer level 3", "battery level 3", "grounded level 3"):
        assert f"ok   {check}" in checked.stdout, checked.stdout
    assert "notes: all 20 checks hold (1 seed per level: a served bootcamp starts a server each episode" in (
        checked.stdout
    )
    ws = tmp_path / "ws"
    imported = run_cli(
        "import", "bootcamp", "notes.py", "-n", "1", "-c", str(config), "-w", str(ws), cwd=folder, timeout=1200
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert "imported notes (bootcamp " in imported.stdout and "all 20 checks hold" in imported.stdout

    spec = ImportSpec(
        name="notes",
        adapter="bootcamp",
        source=str(source),
        options={HASH_OPTION: source_sha256(source.read_text()), CLASS_OPTION: "Notes"},
    )
    bootcamp = build_own(spec)  # as the workspace's resolver builds an imported file
    from campflow.mcp.bootcamp import McpBootcamp

    assert isinstance(bootcamp, McpBootcamp) and bootcamp.name == "notes"
    instance = bootcamp.generate(2, 0)
    assert [t.name for t in bootcamp.tools(instance)] == ["add_note", "list_notes", "submit"]
    state, score = bootcamp.solve(instance)  # on a fresh notes server
    assert score.success and score.reward == 1.0, score
    assert [c["name"] for c in state.calls] == ["add_note", "add_note"]
    assert sys.executable in bootcamp.server.command
