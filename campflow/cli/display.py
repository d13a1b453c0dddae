"""What the CLI shows on the console: the live progress display of long commands, and tables that fit
the terminal (as a table where every word fits whole, else as ``key: value`` lines)."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from campflow.bootcamps.messages import clip
from campflow.progress import LineReporter, Reporter, Throughput


class RichReporter(Reporter):
    """Progress bars, one per unit of work; safe to call from worker threads.

    Where the console is not a terminal (CI logs, ``make run > log``) the bars cannot redraw: a
    :class:`~campflow.progress.LineReporter` prints plain lines instead, when each unit of work starts and
    ends and every 30 s in between.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._meters: dict[str, tuple[Throughput, str]] = {}
        self._lock = threading.Lock()
        console = self.progress.console
        self._lines = (
            None
            if console.is_terminal
            else LineReporter(lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
        )

    def __enter__(self) -> RichReporter:
        if self._lines is not None:
            self._lines.__enter__()
        else:
            self.progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._lines is not None:
            self._lines.__exit__(exc_type, exc, tb)
        else:
            self.progress.stop()

    def start(self, key: str, description: str, total: int | None) -> None:
        with self._lock:
            self._meters.pop(key, None)
            if key in self._tasks:
                self.progress.reset(self._tasks[key], total=total, description=description)
            else:
                self._tasks[key] = self.progress.add_task(description, total=total)
        if self._lines is not None:
            self._lines.start(key, description, total)

    def advance(self, key: str, steps: int = 1) -> None:
        with self._lock:
            if key in self._tasks:
                self.progress.advance(self._tasks[key], steps)
        if self._lines is not None:
            self._lines.advance(key, steps)

    def episode(self, key: str, tokens: int, turns: int, latency_s: float) -> None:
        """Advance ``key`` and show its episodes/s, tokens/s and the policy's latency per turn."""
        with self._lock:
            if key not in self._tasks:
                return
            if key not in self._meters:
                self._meters[key] = (Throughput(), self.progress.tasks[self._tasks[key]].description)
            meter, label = self._meters[key]
            meter.add(tokens, turns, latency_s)
            self.progress.update(self._tasks[key], advance=1, description=f"{label} ({meter.describe()})")
        if self._lines is not None:
            self._lines.episode(key, tokens, turns, latency_s)

    def update(self, key: str, description: str) -> None:
        with self._lock:
            if key in self._tasks:
                self.progress.update(self._tasks[key], description=description)
        if self._lines is not None:
            self._lines.update(key, description)

    def finish(self, key: str) -> None:
        with self._lock:
            if key in self._tasks:
                task = self.progress.tasks[self._tasks[key]]
                if task.total is not None:
                    self.progress.update(self._tasks[key], completed=task.total)
        if self._lines is not None:
            self._lines.finish(key)

    def note(self, message: str) -> None:
        if self._lines is not None:
            self._lines.note(message)
        else:
            self.progress.console.log(message)


Rows = Sequence[Sequence[Any]]
# a table is measured as if the console had no edge, to learn each column's natural widths
_UNBOUNDED = 1_000_000


def print_table(
    console: Console,
    columns: Sequence[str],
    rows: Rows,
    *,
    title: str | None = None,
    below: Sequence[str] = (),
) -> None:
    """Print ``rows`` so that they read in ``console``'s width and no word is split across lines.

    As a table (numbers right-aligned, floats to four places) where every column can hold its longest
    word, a cell wrapping at spaces where it must; the ``below`` columns (long text) then go under the
    table, one ``first cell  column: value`` line per row and column. A table too wide even so becomes
    a list instead: per row, its first cell as ``column: value``, then every other column indented
    under it, each value wrapping at spaces (a single row is not indented). The cells of the table's
    columns may hold rich markup and are clipped to 200 characters, as in any table; ``below`` values are
    plain text, printed whole.
    """
    keep = [i for i, c in enumerate(columns) if c not in below]
    shown = table([columns[i] for i in keep], [[row[i] for i in keep] for row in rows], title=title)
    if not _fit(console, shown):
        _print_records(console, columns, rows, title, below)
        return
    console.print(shown)
    for row in rows:
        for name in below:
            value = row[columns.index(name)]
            if value not in (None, ""):
                _print_field(console, f"{_cell(row[0])}  {name}", Text(str(value)), indent=0)


def table(columns: Sequence[str], rows: Rows, title: str | None = None) -> Table:
    """A rich table of ``rows``; numbers right-aligned, floats to four places. Print it with
    :func:`print_table`, which makes it fit the console."""
    # no vertical rules: a table of eight short columns reads in an 80-column terminal
    t = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows) for i in range(len(columns))
    ]
    for i, (col, num) in enumerate(zip(columns, numeric)):
        # the first column is the row's id: it stays whole, the others wrap at spaces where they must
        t.add_column(str(col), justify="right" if num else "left", no_wrap=i == 0)
    for row in rows:
        t.add_row(*[_cell(v) for v in row])
    return t


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.4e}"
    return clip(str(value), 200)


def _fit(console: Console, t: Table) -> bool:
    """Whether ``t`` fits the console with every word whole; if it needs wrapping to fit, fix its column
    widths so that each column keeps its longest word (rich alone shrinks the widest columns first, and
    folds a word of a narrow one: ``complet`` / ``ed``)."""
    width = console.options.max_width
    unbounded = console.options.update_width(_UNBOUNDED)
    whole = Measurement.get(console, unbounded, t)
    if whole.maximum <= width:
        return True
    spans = [_column_span(console, unbounded, t, i) for i in range(len(t.columns))]
    # rich counts an unwrapped column's longest word as its least width; it needs its longest line
    narrowest = whole.minimum + sum(most - least for (least, most), c in zip(spans, t.columns) if c.no_wrap)
    if narrowest > width:
        return False
    spans = [(most, most) if column.no_wrap else (least, most) for column, (least, most) in zip(t.columns, spans)]
    spare, slack = width - narrowest, sum(most - least for least, most in spans)
    for column, (least, most) in zip(t.columns, spans):
        column.width = least + (most - least) * spare // slack
    return True


def _column_span(console: Console, options: Any, t: Table, index: int) -> tuple[int, int]:
    """The width of column ``index``'s longest word and of its longest line, header included."""
    column = t.columns[index]
    cells = [column.header, *column.cells]
    sizes = [Measurement.get(console, options, c if not isinstance(c, str) else console.render_str(c)) for c in cells]
    return max(s.minimum for s in sizes), max(s.maximum for s in sizes)


def _print_records(
    console: Console, columns: Sequence[str], rows: Rows, title: str | None, below: Sequence[str]
) -> None:
    if title:
        console.print(console.render_str(title, style="bold"))
    for row in rows:
        for i, (name, value) in enumerate(zip(columns, row)):
            if value in (None, "") and i:
                continue
            text = Text(str(value)) if name in below else console.render_str(_cell(value))
            _print_field(console, str(name), text, indent=2 if i and len(rows) > 1 else 0)


def _print_field(console: Console, key: str, value: Text, *, indent: int) -> None:
    """``key: value`` at ``indent``, the value wrapping at spaces with its lines indented under the key."""
    field = Text.assemble(Text(f"{key}:", style="bold"), " ", value)
    width, under = console.options.max_width, indent + 4
    for n, line in enumerate(_wrap_at_spaces(field, width - indent, width - under)):
        # a word longer than the line stays whole on a line of its own (a path): the terminal may fold
        # it, but a copied or grepped line holds it entire
        console.print(Text(" " * (under if n else indent)) + line, soft_wrap=True)


def _wrap_at_spaces(text: Text, first: int, rest: int) -> list[Text]:
    """``text`` as lines of at most ``first`` cells, then ``rest``, broken only at whitespace (and at its
    newlines)."""
    lines: list[Text] = []
    for paragraph in text.split("\n", allow_blank=True):
        plain, start, cuts = paragraph.plain, 0, []
        for word in re.finditer(r"\S+", plain):
            width = rest if lines or cuts else first
            if word.start() > start and cell_len(plain[start : word.end()]) > width:
                cuts.append(word.start())
                start = word.start()
        for line in paragraph.divide(cuts):
            line.rstrip()
            lines.append(line)
    return lines
