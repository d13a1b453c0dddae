"""Torch threads on a CPU: the tuner keeps the setting that does more work per second.

The tuner is driven here with the seconds a unit would take at each setting (no clock, no timing):
the figures mirror benchmarks/bench_threads.py on a 2-core machine (two threads 1.7x faster alone,
~12x slower beside a busy process).
"""

from __future__ import annotations

import pytest

from campflow.errors import ConfigError
from campflow.hardware import Capability, resolve_hardware
from campflow.threads import ThreadTuner, parse_cpu_threads

IDLE = {1: 1.0, 2: 0.58}
BUSY = {1: 1.0, 2: 12.0}


def drive(tuner: ThreadTuner, cost: dict[int, float], units: int) -> list[int]:
    """Run ``units`` units whose seconds per unit of work at n threads is ``cost[n]``; the counts used."""
    used = []
    for i in range(units):
        n = tuner.next_threads()
        used.append(n)
        tuner.record(cost[n] * (1 + 0.05 * (i % 3)), 1.0)  # a little spread, as real steps have
    return used


def test_an_idle_machine_ends_on_every_core():
    tuner = ThreadTuner(cores=2)
    used = drive(tuner, IDLE, 200)
    assert tuner.current == 2
    assert used.index(2) < 30  # found early
    assert used[-100:].count(1) <= 4  # and kept: a probe of one thread now and then


def test_a_busy_machine_stays_on_one_thread_and_probes_ever_less_often():
    tuner = ThreadTuner(cores=2)
    used = drive(tuner, BUSY, 800)
    assert tuner.current == 1
    probes = used.count(2)
    assert probes <= 2 * 6  # intervals double from 24 up to 384: a handful of probes in 800 units
    slow_share = probes * BUSY[2] / (probes * BUSY[2] + used.count(1) * BUSY[1])
    assert slow_share < 0.25


def test_the_choice_follows_the_machine_when_a_neighbour_comes_and_goes():
    tuner = ThreadTuner(cores=2)
    drive(tuner, IDLE, 100)
    assert tuner.current == 2
    drive(tuner, BUSY, 100)
    assert tuner.current == 1
    drive(tuner, IDLE, 600)
    assert tuner.current == 2
    assert [n for _, n in tuner.switches] == [2, 1, 2]


def test_a_fixed_count_is_never_changed():
    tuner = ThreadTuner(2, cores=8)
    assert set(drive(tuner, BUSY, 100)) == {2}
    assert not tuner.tuning


def test_a_one_core_machine_has_nothing_to_tune():
    tuner = ThreadTuner(cores=1)
    assert set(drive(tuner, IDLE, 50)) == {1}


@pytest.mark.parametrize("value", [0, -2, "many", 1.5, True, None])
def test_a_bad_thread_setting_is_refused_in_one_line(value):
    with pytest.raises(ConfigError, match="cpu_threads .*expected auto or a positive integer"):
        parse_cpu_threads(value)


def test_the_environment_fixes_auto_for_the_whole_process_and_a_bad_value_is_one_line(monkeypatch):
    monkeypatch.setenv("CAMPFLOW_CPU_THREADS", "2")
    assert parse_cpu_threads("auto") == 2 and parse_cpu_threads(1) == 1  # a number in the config still wins
    assert resolve_hardware("cpu").thread_tuner().choices == [2]
    monkeypatch.setenv("CAMPFLOW_CPU_THREADS", "two")
    with pytest.raises(ConfigError, match="CAMPFLOW_CPU_THREADS='two': expected a positive integer"):
        parse_cpu_threads("auto")
    monkeypatch.delenv("CAMPFLOW_CPU_THREADS")
    assert parse_cpu_threads("auto") is None


def test_only_a_cpu_gets_a_tuner():
    assert resolve_hardware("cpu", cpu_threads=3).thread_tuner().choices == [3]
    assert resolve_hardware("cpu").thread_tuner().tuning in (True, False)  # auto: cores decide
    gpu = resolve_hardware("cuda", capability=Capability(cuda_devices=1, cuda_bf16=True))
    assert gpu.thread_tuner() is None


def test_the_tuner_sets_torch_threads_on_the_calling_thread():
    import threading

    import torch

    seen = {}

    def work():
        tuner = ThreadTuner(1, cores=2)
        with tuner.unit(10.0):
            seen["threads"] = torch.get_num_threads()
        seen["summary"] = tuner.summary()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen["threads"] == 1
    assert seen["summary"]["cpu_threads"] == 1 and seen["summary"]["thread_switches"] == []
