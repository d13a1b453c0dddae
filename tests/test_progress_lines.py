"""Progress without a terminal: plain lines at the start and end of each step and every 30 s in between."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace

from rich.console import Console

from campflow import progress
from campflow.progress import LineReporter


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_step_prints_a_line_when_it_starts_while_it_runs_and_when_it_ends() -> None:
    lines: list[str] = []
    clock = _Clock()
    reporter = LineReporter(lines.append, clock=clock)
    reporter.start("sft", "SFT", 800)
    reporter.advance("sft", 120)
    reporter.update("sft", "SFT (loss 1.23)")
    clock.now += 60
    reporter.tick()
    reporter.advance("sft", 680)
    clock.now += 340
    reporter.finish("sft")
    reporter.tick()  # nothing runs any more: no line
    text = [line.split("] ", 1)[1] for line in lines]
    assert text == [
        "SFT: started (0/800)",
        "SFT (loss 1.23): 120/800 (2.00/s, 60s elapsed, about 340s left)",
        "SFT (loss 1.23): done, 800/800 in 400.0s",
    ]


def test_while_entered_the_reporter_prints_every_interval_on_its_own() -> None:
    lines: list[str] = []
    seen = threading.Event()

    def write(line: str) -> None:
        lines.append(line)
        if ": 3/10 (" in line:
            seen.set()

    with LineReporter(write, interval_s=0.05) as reporter:
        reporter.start("episodes", "episodes", 10)
        for _ in range(3):
            reporter.episode("episodes", tokens=100, turns=2, latency_s=0.1)
        assert seen.wait(30), lines  # the ticker, not a call of ours, wrote the line
    assert "ep/s" in next(line for line in lines if ": 3/10 (" in line)


def test_the_cli_display_without_a_terminal_prints_the_sft_steps_progress_as_plain_lines() -> None:
    from campflow.cli.display import RichReporter
    from campflow.training.sft import progress_callback

    out = io.StringIO()
    with RichReporter(Console(file=out, force_terminal=False, width=80)) as reporter, progress.use(reporter):
        callback = progress_callback("sft", "SFT")  # what SFTTrainer calls back
        callback.on_train_begin(None, SimpleNamespace(max_steps=800), None)
        for _ in range(5):
            callback.on_step_end(None, None, None)
        callback.on_log(None, None, None, logs={"loss": 2.5})
        reporter._lines.tick()  # what the 30-second ticker does
        callback.on_train_end(None, None, None)
    lines = out.getvalue().splitlines()
    assert any(line.endswith("SFT: started (0/800)") for line in lines)
    assert any("SFT (loss 2.5): 5/800 (" in line for line in lines)
    assert any("SFT (loss 2.5): done, 5/800 in " in line for line in lines)
    assert not any(c in out.getvalue() for c in "━╸\r\x1b")  # no bar, no redraws, no escape codes
