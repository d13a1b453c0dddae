"""Device and precision: one function turns the settings and what torch reports into what the libraries take.

``training.device`` / ``policy.device`` is ``auto | cpu | cuda | cuda:N | mps`` and ``precision`` is
``auto | bf16 | fp16 | fp32``. :func:`resolve_hardware` maps them, with a :class:`Capability` (what
this machine has), to a :class:`Hardware`: the device string, the precision, the torch dtype, and the
arguments TRL's and transformers' training configs take (``use_cpu``, ``bf16``, ``fp16``). SFT, GRPO,
the local policy and the tiny-model builder all go through it, so the embedded CPU default is one
setting of these (``auto`` on a machine without an accelerator: CPU, fp32), not a special path.

``auto`` picks CUDA, then MPS, then the CPU; its precision is bf16 where the accelerator supports it,
else fp16 on CUDA, and fp32 on MPS without bf16 and on the CPU. Explicit settings are checked against
the capability and refused with one line when this machine cannot honour them.

This module sits beside the config (a leaf): it imports torch only in :meth:`Capability.detect`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from campflow.errors import ConfigError
from campflow.threads import ThreadTuner, parse_cpu_threads

Device = Literal["auto", "cpu", "cuda", "mps"] | str  # or "cuda:N"
Precision = Literal["auto", "bf16", "fp16", "fp32"]
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
DEVICE_PATTERN = r"^(auto|cpu|cuda|cuda:\d+|mps)$"
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class HardwareError(ConfigError):
    """A device or precision this machine cannot provide (CUDA asked for without a GPU, fp16 on a CPU)."""


@dataclass(frozen=True)
class Capability:
    """What the machine offers, as torch reports it (tests pass any capability; no GPU needed).

    Attributes:
        cuda_devices: visible CUDA devices (0: no CUDA).
        cuda_bf16: whether the CUDA devices compute in bfloat16 (Ampere and later).
        mps: whether Apple's Metal backend is available.
        mps_bf16: whether MPS computes in bfloat16 (macOS 14 and later).
    """

    cuda_devices: int = 0
    cuda_bf16: bool = False
    mps: bool = False
    mps_bf16: bool = False

    @classmethod
    def detect(cls) -> Capability:
        """This machine's capability; none under ``accelerate launch --cpu`` (which asks for the CPU)."""
        if os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"):
            return cls()
        import torch

        cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
        mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
        mps_bf16 = False
        if mps:
            try:
                torch.ones(1, dtype=torch.bfloat16, device="mps")
                mps_bf16 = True
            except (RuntimeError, TypeError):
                pass
        return cls(
            cuda_devices=cuda, cuda_bf16=bool(cuda and torch.cuda.is_bf16_supported()), mps=mps, mps_bf16=mps_bf16
        )


@dataclass(frozen=True)
class Hardware:
    """Where a model runs and in which precision.

    Attributes:
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``mps``: where the local policy places its model.
        precision: ``bf16``, ``fp16`` or ``fp32``.
        dtype: the torch dtype's name for that precision (``bfloat16``, ``float16``, ``float32``).
        trainer_args: TRL/transformers training arguments (``use_cpu``, ``bf16``, ``fp16``). The
            Trainer keeps trainable weights in float32 and computes in ``precision`` under autocast.
        cpu_threads: torch's thread count on a CPU, or None to choose it by measured speed
            (:mod:`campflow.threads`).
    """

    device: str
    precision: str
    dtype: str
    trainer_args: dict[str, Any] = field(default_factory=dict)
    cpu_threads: int | None = None

    def thread_tuner(self) -> ThreadTuner | None:
        """On a CPU, the :class:`~campflow.threads.ThreadTuner` for ``cpu_threads`` (None: measured);
        None on an accelerator, where torch's CPU threads only feed the device."""
        return ThreadTuner(self.cpu_threads) if self.kind == "cpu" else None

    @property
    def kind(self) -> str:
        """``cpu``, ``cuda`` or ``mps`` (the device without its index)."""
        return self.device.split(":")[0]

    @property
    def index(self) -> int | None:
        """The CUDA device index of ``cuda:N``, else None."""
        return int(self.device.split(":")[1]) if ":" in self.device else None

    def torch_dtype(self) -> Any:
        """The torch dtype of ``precision`` (imports torch)."""
        import torch

        return getattr(torch, self.dtype)

    def load_dtype(self, *, trainable: bool) -> Any:
        """The dtype to load weights in: float32 for weights an optimizer updates (the Trainer's mixed
        precision keeps float32 master weights and autocasts), ``precision`` for frozen or served ones."""
        import torch

        return torch.float32 if trainable else self.torch_dtype()

    def select(self) -> None:
        """Make ``cuda:N`` the current CUDA device, for libraries that place models themselves (the Trainer
        uses the current device in a single process; under ``accelerate launch`` each rank has its own)."""
        if self.index is not None and int(os.environ.get("WORLD_SIZE", "1")) == 1:
            import torch

            torch.cuda.set_device(self.index)


def resolve_hardware(
    device: str = "auto",
    precision: str = "auto",
    capability: Capability | None = None,
    *,
    cpu_threads: int | str = "auto",
) -> Hardware:
    """The :class:`Hardware` for ``device``, ``precision`` and ``cpu_threads`` (``auto`` or a count) on a
    machine with ``capability`` (default: :meth:`Capability.detect`).

    Raises:
        HardwareError: one line naming the setting and what this machine offers.
    """
    if not re.match(DEVICE_PATTERN, device):
        raise HardwareError(f"device {device!r}: expected auto, cpu, cuda, cuda:N or mps")
    if precision not in PRECISIONS:
        raise HardwareError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    cap = capability if capability is not None else Capability.detect()
    kind = device.split(":")[0]
    if kind == "auto":
        kind = "cuda" if cap.cuda_devices else "mps" if cap.mps else "cpu"
        device = kind
    if kind == "cuda":
        if not cap.cuda_devices:
            raise HardwareError(f"device {device!r}: torch sees no CUDA device here (use auto or cpu)")
        if ":" in device and int(device.split(":")[1]) >= cap.cuda_devices:
            raise HardwareError(
                f"device {device!r}: only {cap.cuda_devices} CUDA device(s) are visible "
                f"(cuda:0 to cuda:{cap.cuda_devices - 1})"
            )
    if kind == "mps" and not cap.mps:
        raise HardwareError(f"device {device!r}: torch's MPS backend is not available here (use auto or cpu)")
    bf16 = {"cuda": cap.cuda_bf16, "mps": cap.mps_bf16, "cpu": True}[kind]
    if precision == "auto":
        precision = "bf16" if kind != "cpu" and bf16 else "fp16" if kind == "cuda" else "fp32"
    if precision == "bf16" and not bf16:
        raise HardwareError(
            f"precision 'bf16' on {device}: this device does not compute in bfloat16 (use fp16 or auto)"
        )
    if precision == "fp16" and kind == "cpu":
        raise HardwareError(
            "precision 'fp16' on cpu: mixed-precision fp16 training needs a GPU (use fp32 or bf16 on a CPU)"
        )
    trainer_args = {"use_cpu": kind == "cpu", "bf16": precision == "bf16", "fp16": precision == "fp16"}
    return Hardware(
        device=device,
        precision=precision,
        dtype=_DTYPES[precision],
        trainer_args=trainer_args,
        cpu_threads=parse_cpu_threads(cpu_threads),
    )
