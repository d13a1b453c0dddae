"""Device and precision: every setting against every kind of machine, and the embedded CPU default unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from campflow.config import SFTSettings, TinyModelConfig, load_config
from campflow.errors import ConfigError
from campflow.hardware import Capability, HardwareError, resolve_hardware
from tests import fixed_chats

MACHINES = {
    "cpu-only": Capability(),
    "2 ampere gpus": Capability(cuda_devices=2, cuda_bf16=True),
    "1 turing gpu": Capability(cuda_devices=1, cuda_bf16=False),
    "mac with bf16": Capability(mps=True, mps_bf16=True),
    "older mac": Capability(mps=True, mps_bf16=False),
}

# machine | device | precision -> device precision, or ! and a fragment of the error. Every combination.
TABLE = """
cpu-only      | auto   | auto -> cpu fp32
cpu-only      | auto   | bf16 -> cpu bf16
cpu-only      | auto   | fp16 -> ! needs a GPU
cpu-only      | auto   | fp32 -> cpu fp32
cpu-only      | cpu    | auto -> cpu fp32
cpu-only      | cpu    | bf16 -> cpu bf16
cpu-only      | cpu    | fp16 -> ! needs a GPU
cpu-only      | cpu    | fp32 -> cpu fp32
cpu-only      | cuda   | auto -> ! no CUDA device
cpu-only      | cuda   | bf16 -> ! no CUDA device
cpu-only      | cuda   | fp16 -> ! no CUDA device
cpu-only      | cuda   | fp32 -> ! no CUDA device
cpu-only      | cuda:1 | auto -> ! no CUDA device
cpu-only      | cuda:1 | bf16 -> ! no CUDA device
cpu-only      | cuda:1 | fp16 -> ! no CUDA device
cpu-only      | cuda:1 | fp32 -> ! no CUDA device
cpu-only      | mps    | auto -> ! MPS backend is not available
cpu-only      | mps    | bf16 -> ! MPS backend is not available
cpu-only      | mps    | fp16 -> ! MPS backend is not available
cpu-only      | mps    | fp32 -> ! MPS backend is not available
2 ampere gpus | auto   | auto -> cuda bf16
2 ampere gpus | auto   | bf16 -> cuda bf16
2 ampere gpus | auto   | fp16 -> cuda fp16
2 ampere gpus | auto   | fp32 -> cuda fp32
2 ampere gpus | cpu    | auto -> cpu fp32
2 ampere gpus | cpu    | bf16 -> cpu bf16
2 ampere gpus | cpu    | fp16 -> ! needs a GPU
2 ampere gpus | cpu    | fp32 -> cpu fp32
2 ampere gpus | cuda   | auto -> cuda bf16
2 ampere gpus | cuda   | bf16 -> cuda bf16
2 ampere gpus | cuda   | fp16 -> cuda fp16
2 ampere gpus | cuda   | fp32 -> cuda fp32
2 ampere gpus | cuda:1 | auto -> cuda:1 bf16
2 ampere gpus | cuda:1 | bf16 -> cuda:1 bf16
2 ampere gpus | cuda:1 | fp16 -> cuda:1 fp16
2 ampere gpus | cuda:1 | fp32 -> cuda:1 fp32
2 ampere gpus | mps    | auto -> ! MPS backend is not available
2 ampere gpus | mps    | bf16 -> ! MPS backend is not available
2 ampere gpus | mps    | fp16 -> ! MPS backend is not available
2 ampere gpus | mps    | fp32 -> ! MPS backend is not available
1 turing gpu  | auto   | auto -> cuda fp16
1 turing gpu  | auto   | bf16 -> ! does not compute in bfloat16
1 turing gpu  | auto   | fp16 -> cuda fp16
1 turing gpu  | auto   | fp32 -> cuda fp32
1 turing gpu  | cpu    | auto -> cpu fp32
1 turing gpu  | cpu    | bf16 -> cpu bf16
1 turing gpu  | cpu    | fp16 -> ! needs a GPU
1 turing gpu  | cpu    | fp32 -> cpu fp32
1 turing gpu  | cuda   | auto -> cuda fp16
1 turing gpu  | cuda   | bf16 -> ! does not compute in bfloat16
1 turing gpu  | cuda   | fp16 -> cuda fp16
1 turing gpu  | cuda   | fp32 -> cuda fp32
1 turing gpu  | cuda:1 | auto -> ! only 1 CUDA device(s)
1 turing gpu  | cuda:1 | bf16 -> ! only 1 CUDA device(s)
1 turing gpu  | cuda:1 | fp16 -> ! only 1 CUDA device(s)
1 turing gpu  | cuda:1 | fp32 -> ! only 1 CUDA device(s)
1 turing gpu  | mps    | auto -> ! MPS backend is not available
1 turing gpu  | mps    | bf16 -> ! MPS backend is not available
1 turing gpu  | mps    | fp16 -> ! MPS backend is not available
1 turing gpu  | mps    | fp32 -> ! MPS backend is not available
mac with bf16 | auto   | auto -> mps bf16
mac with bf16 | auto   | bf16 -> mps bf16
mac with bf16 | auto   | fp16 -> mps fp16
mac with bf16 | auto   | fp32 -> mps fp32
mac with bf16 | cpu    | auto -> cpu fp32
mac with bf16 | cpu    | bf16 -> cpu bf16
mac with bf16 | cpu    | fp16 -> ! needs a GPU
mac with bf16 | cpu    | fp32 -> cpu fp32
mac with bf16 | cuda   | auto -> ! no CUDA device
mac with bf16 | cuda   | bf16 -> ! no CUDA device
mac with bf16 | cuda   | fp16 -> ! no CUDA device
mac with bf16 | cuda   | fp32 -> ! no CUDA device
mac with bf16 | cuda:1 | auto -> ! no CUDA device
mac with bf16 | cuda:1 | bf16 -> ! no CUDA device
mac with bf16 | cuda:1 | fp16 -> ! no CUDA device
mac with bf16 | cuda:1 | fp32 -> ! no CUDA device
mac with bf16 | mps    | auto -> mps bf16
mac with bf16 | mps    | bf16 -> mps bf16
mac with bf16 | mps    | fp16 -> mps fp16
mac with bf16 | mps    | fp32 -> mps fp32
older mac     | auto   | auto -> mps fp32
older mac     | auto   | bf16 -> ! does not compute in bfloat16
older mac     | auto   | fp16 -> mps fp16
older mac     | auto   | fp32 -> mps fp32
older mac     | cpu    | auto -> cpu fp32
older mac     | cpu    | bf16 -> cpu bf16
older mac     | cpu    | fp16 -> ! needs a GPU
older mac     | cpu    | fp32 -> cpu fp32
older mac     | cuda   | auto -> ! no CUDA device
older mac     | cuda   | bf16 -> ! no CUDA device
older mac     | cuda   | fp16 -> ! no CUDA device
older mac     | cuda   | fp32 -> ! no CUDA device
older mac     | cuda:1 | auto -> ! no CUDA device
older mac     | cuda:1 | bf16 -> ! no CUDA device
older mac     | cuda:1 | fp16 -> ! no CUDA device
older mac     | cuda:1 | fp32 -> ! no CUDA device
older mac     | mps    | auto -> mps fp32
older mac     | mps    | bf16 -> ! does not compute in bfloat16
older mac     | mps    | fp16 -> mps fp16
older mac     | mps    | fp32 -> mps fp32
"""
ROWS = [tuple(part.strip() for part in line.replace("->", "|").split("|")) for line in TABLE.strip().splitlines()]
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def test_the_table_covers_every_machine_device_and_precision() -> None:
    combos = {(m, d, p) for m, d, p, _ in ROWS}
    assert len(combos) == len(ROWS) == len(MACHINES) * 5 * 4


@pytest.mark.parametrize("machine, device, precision, expected", ROWS)
def test_device_and_precision_resolve_to_the_trainer_arguments_and_dtype(machine, device, precision, expected) -> None:
    capability = MACHINES[machine]
    if expected.startswith("!"):
        with pytest.raises(HardwareError, match=expected[1:].strip().replace("(", r"\(").replace(")", r"\)")):
            resolve_hardware(device, precision, capability)
        return
    want_device, want_precision = expected.split()
    hw = resolve_hardware(device, precision, capability)
    assert (hw.device, hw.precision, hw.dtype) == (want_device, want_precision, DTYPES[want_precision])
    assert hw.trainer_args == {
        "use_cpu": want_device == "cpu",
        "bf16": want_precision == "bf16",
        "fp16": want_precision == "fp16",
    }


@pytest.mark.parametrize("device, precision", [("gpu", "auto"), ("cuda:x", "auto"), ("auto", "half"), ("", "fp32")])
def test_an_unknown_device_or_precision_is_one_line_naming_it(device: str, precision: str) -> None:
    with pytest.raises(HardwareError, match=repr(device) if precision in ("auto", "fp32") else repr(precision)):
        resolve_hardware(device, precision, Capability())


@pytest.mark.parametrize(
    "key, value",
    [
        ("training.device", "gpu"),
        ("policy.device", "cuda:a"),
        ("training.precision", "int8"),
        ("policy.precision", "half"),
    ],
)
def test_the_config_refuses_a_bad_device_or_precision(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(None, {key: value}, env={})


def test_trainable_weights_load_in_float32_and_frozen_ones_in_the_precision() -> None:
    import torch

    hw = resolve_hardware("cuda", "bf16", MACHINES["2 ampere gpus"])
    assert hw.load_dtype(trainable=True) == torch.float32 and hw.load_dtype(trainable=False) == torch.bfloat16
    assert resolve_hardware("auto", "auto", Capability()).load_dtype(trainable=False) == torch.float32


def test_this_machine_resolves_auto_to_what_torch_reports() -> None:
    import torch

    hw = resolve_hardware()
    assert hw.kind == ("cuda" if torch.cuda.is_available() else hw.kind)
    if not torch.cuda.is_available() and not torch.backends.mps.is_available():
        assert (hw.device, hw.precision, hw.trainer_args["use_cpu"]) == ("cpu", "fp32", True)


def test_accelerate_launch_cpu_means_no_accelerator(monkeypatch) -> None:
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    assert Capability.detect() == Capability()


# Regression reference for the embedded CPU default: the tiny model on the fixed chats of
# tests/fixed_chats.py, 4 SFT steps of batch 4, recorded on a 2-core AVX-512 machine with torch 2.13.0+cpu.
# What is deterministic by construction is compared exactly: the weights as initialized (drawn in float64,
# see tinymodel.initialized) and the tokenizer, and so the saved base, which is not pretrained here.
# What training computed (losses) depends in its last bits on the CPU's vector kernels and the thread count,
# so it is compared within LOSS_RTOL. Measured on one machine under ATEN_CPU_CAPABILITY=default, avx2 and
# avx512, each at 1 and 2 threads: the losses differ by up to 4.8e-7 (8e-8 relative), the weights after the
# 4 steps by up to 5e-8; another machine of this kind differed from the recording one by 1.6e-7 relative.
# 1e-5 is 60x that, and 10-24x below what a 1% change of the learning rate moves (1e-4 to 2.4e-4 relative).
REFERENCE_INIT_FINGERPRINT = "ca341e9964414ab1"
REFERENCE_FINGERPRINT = "18c5cae69005a4c1"
REFERENCE_LOSS_CURVE = [(1, 5.973541259765625), (2, 5.9079484939575195), (3, 5.861606597900391), (4, 5.834375858306885)]
REFERENCE_TRAIN_LOSS = 5.894368052482605
LOSS_RTOL = 1e-5


@pytest.mark.numeric
def test_the_embedded_cpu_default_trains_as_recorded_on_any_cpu_and_thread_count(tmp_path: Path) -> None:
    from campflow.storage.store import Store
    from campflow.training import checkpoints, tinymodel
    from campflow.training.sft import train_sft

    store = Store(tmp_path / "campflow.duckdb")
    built = tinymodel.build_tiny_model(
        tmp_path / "base",
        TinyModelConfig(**fixed_chats.TINY),
        ["fixed"],
        texts=fixed_chats.corpus(tinymodel.chat_template()),
    )
    assert (built.init_fingerprint, built.fingerprint) == (REFERENCE_INIT_FINGERPRINT, REFERENCE_FINGERPRINT)
    checkpoints.register(store, "base-fixed", "base", tmp_path / "base")
    dataset = fixed_chats.save_sft_dataset(store, tmp_path / "ds")
    result = train_sft(
        store,
        tmp_path,
        "base-fixed",
        dataset,
        SFTSettings(max_steps=4, batch_size=4),
        hardware=resolve_hardware("auto", "auto", Capability()),
    )
    curve = [tuple(p) for p in result.metrics["loss_curve"]]
    assert [step for step, _ in curve] == [step for step, _ in REFERENCE_LOSS_CURVE]
    assert [loss for _, loss in curve] == pytest.approx([loss for _, loss in REFERENCE_LOSS_CURVE], rel=LOSS_RTOL)
    assert result.metrics["train_loss"] == pytest.approx(REFERENCE_TRAIN_LOSS, rel=LOSS_RTOL)
    assert (result.metrics["device"], result.metrics["precision"]) == ("cpu", "fp32")


def test_the_local_policy_loads_the_model_in_the_resolved_precision_and_refuses_what_the_machine_lacks(
    tmp_path: Path,
) -> None:
    import asyncio

    import torch

    from campflow.agents.local import LocalPolicy, load_model
    from campflow.training import tinymodel

    tinymodel.build_tiny_model(
        tmp_path / "base",
        TinyModelConfig(**fixed_chats.TINY),
        ["fixed"],
        texts=fixed_chats.corpus(tinymodel.chat_template()),
    )
    policy = LocalPolicy(tmp_path / "base", max_new_tokens=4, device="cpu", precision="bf16")

    async def turn() -> None:
        await policy.respond(fixed_chats.conversations(1)[0][:2], fixed_chats.TOOLS, None)
        await policy.aclose()

    asyncio.run(turn())
    model, _, _ = load_model(str(tmp_path / "base"), policy.hardware)
    assert (model.dtype, model.device.type) == (torch.bfloat16, "cpu")
    default, _, _ = load_model(str(tmp_path / "base"), resolve_hardware("auto", "auto", Capability()))
    assert default.dtype == torch.float32
    with pytest.raises(HardwareError, match="fp16' on cpu"):
        LocalPolicy(tmp_path / "base", device="cpu", precision="fp16")
