"""The README and the guides in docs/ show code that works: every fenced block runs here, or is read by
the test named beside it, or says what it needs that a test run does not have (CONTRIBUTING.md,
"Code blocks in the README and docs", describes the markers)."""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from campflow.config import load_config
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS = {"gpu", "server", "minutes", "files", "install", "store"}
MARKER = re.compile(r"<!--\s*(runs(?::\s*config)?|runs-in:\s*\S+|needs:\s*[\w ,]+?)\s*-->")


@dataclass
class Block:
    """One fenced code block of a document: where it starts, its language, its marker and its text."""

    doc: Path
    line: int
    lang: str
    marker: str | None
    code: str

    def __str__(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line} ({self.lang or 'no language'})"


def blocks(doc: Path) -> list[Block]:
    """Every fenced block of ``doc`` with the marker comment on the line before it, if any."""
    found: list[Block] = []
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            lang = lines[i][3:].strip()
            start = i
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            before = lines[start - 1].strip() if start else ""
            match = MARKER.fullmatch(before)
            found.append(Block(doc, start + 1, lang, match.group(1) if match else None, "\n".join(body) + "\n"))
        i += 1
    return found


ALL = [b for doc in DOCS for b in blocks(doc)]


def test_the_docs_have_code_blocks_to_check() -> None:
    assert len(DOCS) >= 7 and len(ALL) >= 20


@pytest.mark.parametrize("block", [b for b in ALL if b.lang != "text"], ids=str)
def test_every_code_block_runs_in_a_test_or_says_what_it_needs(block: Block) -> None:
    assert block.marker, (
        f"{block}: no marker; put <!-- runs -->, <!-- needs: ... --> or <!-- runs-in: ... --> before it"
    )
    if block.marker.startswith("needs:"):
        needs = {n.strip() for n in block.marker.split(":", 1)[1].split(",")}
        assert needs <= NEEDS, f"{block}: needs {needs - NEEDS}; expected some of {sorted(NEEDS)}"
    elif block.marker.startswith("runs-in:"):
        test_file = ROOT / block.marker.split(":", 1)[1].strip()
        assert test_file.exists(), f"{block}: {test_file} does not exist"
        assert block.doc.name in test_file.read_text(), f"{block}: {test_file.name} does not read {block.doc.name}"
    elif block.marker == "runs":
        assert block.lang in ("bash", "python", "json"), f"{block}: a runnable block is bash, python or json"
        if block.lang == "json":  # data as a user writes it (one object a line, or pretty-printed): it parses
            decoder, text, at = json.JSONDecoder(), block.code.strip(), 0
            while at < len(text):
                _, at = decoder.raw_decode(text, at)
                at = len(text) - len(text[at:].lstrip())
    else:
        assert block.lang == "yaml", f"{block}: `runs: config` is for YAML blocks"


def commands(code: str) -> list[tuple[dict[str, str], list[str]]]:
    """A bash block's commands: (environment assignments before it, argv), continuation lines joined and
    comments dropped."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        env = {}
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        if words:
            out.append((env, words))
    return out


RUNNABLE = [doc for doc in DOCS if any(b.marker == "runs" and b.lang != "json" for b in blocks(doc))]


@pytest.mark.parametrize("doc", RUNNABLE, ids=lambda d: str(d.relative_to(ROOT)))
def test_the_runnable_blocks_of_a_document_run_in_order(doc: Path, tmp_path: Path, monkeypatch) -> None:
    if doc.name == "README.md":  # the quick start as a newcomer runs it: each command starts its own Prefect API
        monkeypatch.delenv("PREFECT_API_URL", raising=False)
    for block in (b for b in blocks(doc) if b.marker == "runs" and b.lang != "json"):
        if block.lang == "python":
            monkeypatch.chdir(tmp_path)
            exec(compile(block.code, str(block), "exec"), {})
            continue
        for env, argv in commands(block.code):
            assert argv[0] == "campflow", f"{block}: a runnable bash block runs campflow commands, not {argv[0]}"
            out = run_cli(*argv[1:], cwd=tmp_path, env=env)
            assert out.returncode == 0, f"{block}: `{shlex.join(argv)}` exited {out.returncode}: {out.stderr}"


@pytest.mark.parametrize("block", [b for b in ALL if b.marker == "runs: config"], ids=str)
def test_every_configuration_block_loads_as_a_campflow_configuration(block: Block) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(block.code)
    try:
        load_config(f.name)
    finally:
        os.unlink(f.name)


def test_the_readme_stays_short_and_links_only_to_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 260
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)} links to {target}, which does not exist"
