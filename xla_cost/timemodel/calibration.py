"""The time model's constants: one set for every device, fitted jointly, named.

`xla_cost.timemodel.kernel_time` prices every kernel of a compiled program
from the device's datasheet figures (the dtype's peak, the memory bandwidth,
its matrix units, its CUDA cores) and six global constants, a `Calibration`:

* ``matmul``: the share of the peak a large, well-shaped matrix product reaches;
* ``memory``: the share of the memory bandwidth a bandwidth-bound kernel reaches;
* ``launch``: seconds a cuDNN call costs beyond its work (its set-up, its
  own kernels' ramps and tails), and any other kernel (a fusion, a cuBLAS
  gemm) up to its own work
  (`xla_cost.timemodel.kernel_time`; every kernel pays the measured
  ``KERNEL_GAP`` besides);
* ``depth``: the contraction depth at which a product runs at half its rate
  (filling and draining the pipeline of a small-k product);
* ``vector``: the share of the CUDA cores' FP32 rate a convolution reaches
  that cuDNN cannot run on the tensor cores (input features off their
  alignment: an image's 3 channels; `xla_cost.timemodel.kernel_time`);
* ``host``: seconds each step costs outside its kernels and its dispatch (a
  step is never shorter than its host's measured dispatch of it:
  `xla_cost.timemodel.devices.Dispatch`).

They are the same for a V100, an H100 and a TPU: what differs is in the
registry. They are fitted on published runs by
`xla_cost.study.validation.fit_constants` (least squares in the logarithm of
each case's predicted over published figure) and committed in
``calibrations/constants.json`` beside this module with the cases they were
fitted on; the validation page refits them without each paper in turn to
predict that paper's cases held out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

from xla_cost.errors import InputError

__all__ = ["Calibration", "PATH", "BOUNDS", "constants", "use_constants", "write_constants", "describe"]

PATH = pathlib.Path(__file__).resolve().parent / "calibrations" / "constants.json"
"""Where the committed constants are."""

BOUNDS: Mapping[str, tuple[float, float]] = {
    "matmul": (0.05, 1.0),
    "memory": (0.05, 1.0),
    "launch": (0.0, 50e-6),
    "depth": (0.0, 4096.0),
    "host": (0.0, 0.05),
    "vector": (0.05, 1.0),
}
"""Each constant's range: a share of a peak is at most 1; a launch under 50 µs;
a half-rate depth under 4,096; a host cost under 50 ms per step."""

DEFAULTS: Mapping[str, float] = {"vector": 1.0}
"""What a constants file without a field reads it as (the others: 0): the
CUDA cores at their datasheet rate."""

FIELDS = tuple(BOUNDS)
"""The constants, in the order they are fitted."""


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The time model's global constants (see the module's docstring).

    Attributes:
      matmul: share of the dtype's peak a large, well-shaped product reaches.
      memory: share of the memory bandwidth a bandwidth-bound kernel reaches.
      launch: seconds per cuDNN call beyond its work (any other kernel's: up to its work).
      depth: contraction depth at which a product runs at half its rate.
      host: seconds per step outside the kernels.
      vector: share of the CUDA cores' FP32 rate a convolution off the tensor cores reaches.
      fitted_on: the cases they were fitted on.
      source: how they were fitted (the command).
    """

    matmul: float
    memory: float
    launch: float = 0.0
    depth: float = 0.0
    host: float = 0.0
    vector: float = 1.0
    fitted_on: tuple[str, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        for name, (low, high) in BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high \
                    or (low == 0.05 and value <= 0):
                raise InputError(f"a time-model constant {name} in [{low:g}, {high:g}]", repr(value),
                                 "Fit the constants again (python benchmarks/calibrate.py) or edit "
                                 "xla_cost/timemodel/calibrations/constants.json.")

    def values(self) -> tuple[float, ...]:
        """The constants in `FIELDS` order."""
        return tuple(float(getattr(self, name)) for name in FIELDS)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values."""
        return {**dataclasses.asdict(self), "fitted_on": list(self.fitted_on)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        """The inverse of `to_dict`."""
        return cls(**{name: float(data.get(name, DEFAULTS.get(name, 0.0))) for name in FIELDS},
                   fitted_on=tuple(data.get("fitted_on", ())), source=str(data.get("source", "")))


@functools.cache
def _committed() -> Calibration:
    return Calibration.from_dict(json.loads(PATH.read_text()))


_IN_USE: list[Calibration] = []
"""Constants `use_constants` put in place of the committed ones, innermost last."""


@contextlib.contextmanager
def use_constants(given: Calibration | None) -> Iterator[None]:
    """Within the block, `constants` answers ``given`` (None: the committed
    ones): how constants are fitted and tried before they are written."""
    if given is None:
        yield
        return
    _IN_USE.append(given)
    try:
        yield
    finally:
        _IN_USE.pop()


def constants() -> Calibration:
    """The constants in use: the committed ones, or those `use_constants` put in place."""
    return _IN_USE[-1] if _IN_USE else _committed()


def write_constants(calibration: Calibration, path: pathlib.Path = PATH) -> pathlib.Path:
    """Writes ``calibration`` to ``path`` (sorted keys, one field a line); `constants` reads it next."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(calibration.to_dict(), indent=2, sort_keys=True) + "\n")
    _committed.cache_clear()
    return path


def describe(calibration: Calibration) -> str:
    """The constants in one line, with what they were fitted on."""
    return (f"products at {calibration.matmul:.1%} of peak (half rate at k = {calibration.depth:.0f}), "
            f"other kernels at {calibration.memory:.1%} of the bandwidth, {calibration.launch * 1e6:.2f} µs per "
            f"cuDNN call (other kernels up to their work), convolutions off the tensor cores at "
            f"{calibration.vector:.1%} of the CUDA cores, {calibration.host * 1e3:.2f} ms per step; one set for every "
            f"device, fitted on "
            f"{len(calibration.fitted_on)} cases (published runs and this project's measurements)")
