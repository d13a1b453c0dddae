"""The cycle report stands alone: inline images, the decision first, a failure and its after-image per cluster."""

from __future__ import annotations

import base64
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from campflow.report.facts import cycle_facts
from campflow.report.page import write_report
from campflow.storage.workspace import Workspace
from tests.conftest import run_cli
from tests.recorded_cycle import CYCLE, shared_cycle


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Workspace, Path]:
    """A recorded cycle and its report page."""
    ws = shared_cycle(tmp_path_factory)
    return ws, write_report(cycle_facts(ws.store, CYCLE), tmp_path_factory.mktemp("report") / CYCLE)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, str]] = []  # tag, attribute, value

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [(tag, k, v or "") for k, v in attrs if k in ("src", "href", "srcset", "poster", "data")]


def test_the_report_links_no_local_file_and_its_images_are_inline_pngs(report) -> None:
    _, page = report
    text = page.read_text()
    parser = _Links()
    parser.feed(text)
    images = [v for tag, k, v in parser.links if tag == "img"]
    assert len(images) >= 4  # the plots and the chart exemplars' frames
    for tag, attribute, value in parser.links:
        assert value.startswith("data:") or value.startswith("#"), f"<{tag} {attribute}={value[:60]!r}> needs a file"
    for url in images:
        head, data = url.split(",", 1)
        assert head == "data:image/png;base64" and base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "url(" not in text  # no stylesheet reaching for a file either


def test_the_decision_and_its_reason_come_first(report) -> None:
    ws, page = report
    text = page.read_text()
    promoted, reason = ws.store.query("SELECT promoted, decision FROM cycles WHERE cycle_id = ?", [CYCLE])[0].values()
    decision = text.index('<section id="decision"')
    assert decision < text.index("<table") and decision < text.index("<img")
    head = text[decision : text.index("</section>", decision)]
    assert ("Decision: promoted" if promoted else "Decision: not promoted") in head and html.escape(reason) in head


def test_each_cluster_shows_an_exemplar_failure_and_the_candidate_on_the_same_instance(report) -> None:
    ws, page = report
    text = page.read_text()
    clusters = ws.store.query(
        "SELECT cluster_id, bootcamp, label, exemplar_episode_ids[1] AS exemplar FROM clusters WHERE run_id = ?",
        [f"{CYCLE}-before"],
    )
    assert {c["bootcamp"] for c in clusters} == {"calculator", "chart"}
    for c in clusters:
        start = text.index(f'id="cluster-{c["cluster_id"]}"')
        section = text[start : text.index("</section>", start)]
        assert html.escape(c["label"]) in section
        before = re.search(r'class="before".*?data-episode="(\w+)"', section).group(1)
        after = re.search(r'class="after".*?data-episode="(\w+)"', section).group(1)
        assert before == c["exemplar"]
        (pair,) = ws.store.query(
            "SELECT b.instance_id = a.instance_id AS same, a.run_id FROM episodes b, episodes a "
            "WHERE b.episode_id = ? AND a.episode_id = ?",
            [before, after],
        )
        assert pair["same"] and pair["run_id"] == f"{CYCLE}-after" and "on the same instance" in section
        assert "→ submit(" in section or "→ calculate(" in section  # the transcripts' tool calls are there
        assert section.count("ended: ") == 2


def test_listings_print_json_for_scripts(report) -> None:
    ws, _ = report
    db = str(ws.db_path)
    runs = json.loads(_ok(run_cli("runs", "--json", "--db", db)))
    assert {r["run_id"] for r in runs} == {f"{CYCLE}-before", f"{CYCLE}-after"}
    assert all(r["episodes"] == 12 and 0 <= r["pass_rate"] <= 1 and r["started"] for r in runs)
    (cycle,) = json.loads(_ok(run_cli("cycles", "--json", "--db", db)))
    stored = ws.store.query("SELECT decision, promoted FROM cycles")[0]
    assert cycle["cycle_id"] == CYCLE and (cycle["decision"], cycle["promoted"]) == (
        stored["decision"],
        stored["promoted"],
    )
    failures = json.loads(_ok(run_cli("failures", "--run", f"{CYCLE}-before", "--json", "--db", db)))
    assert failures["run_id"] == f"{CYCLE}-before" and failures["categories"] and failures["clusters"]
    assert {c["cluster_id"] for c in failures["clusters"]} == {
        r["cluster_id"] for r in ws.store.query("SELECT cluster_id FROM clusters")
    }
    assert json.loads(_ok(run_cli("imports", "--json", "--db", db))) == []
    bootcamps = {b["name"]: b for b in json.loads(_ok(run_cli("bootcamps", "list", "--json", "--db", db)))}
    assert bootcamps["chart"]["modality"] == "vision" and bootcamps["calculator"]["summary"]


def test_listings_read_in_80_columns_with_long_text_under_the_table(report) -> None:
    ws, _ = report
    db = str(ws.db_path)
    decision = ws.store.scalar("SELECT decision FROM cycles")
    for args in (("cycles",), ("runs",), ("failures", "--run", f"{CYCLE}-before")):
        out = _ok(run_cli(*args, "--db", db, env={"COLUMNS": "80"}))
        assert max(len(line) for line in out.splitlines()) <= 80, out
        if args == ("cycles",):
            table, under = out.split(f"{CYCLE}  decision: ", 1)
            assert " ".join(under.split()).startswith(" ".join(decision.split())) and "decision" not in table
            row = next(line for line in table.splitlines() if line.split()[:1] == [CYCLE])
            assert "completed" in row  # one line per cycle, not a column folded word by word


def _ok(result) -> str:  # noqa: ANN001
    assert result.returncode == 0, result.stderr
    return result.stdout
