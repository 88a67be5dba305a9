"""How fast a device runs the two kinds of work of a compiled step: a calibration profile.

A step's per-device work is split by kind (`xla_cost.PhaseCosts`): matrix
products and convolutions (``matmul_flops``, tensor cores) and the rest, which
is memory-bound (its bytes: XLA's ``bytes_accessed`` less the products'
operands and results). A `Calibration` says what share of the peak each kind
reaches on one device, so that the step takes

    matmul_flops / (peak_flops * matmul) + other_bytes / (bandwidth * memory) + kernels * launch

instead of a single global MFU. Profiles are committed JSON files, one per
device (``calibrations/<device>.json`` beside this module), each saying which
published cases (or measurements) it was fitted on; `profile` loads one.
A device without a profile has no prediction, only bounds.
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
from xla_cost.parallel import devices as registry

__all__ = ["Calibration", "DIRECTORY", "MEMORY_LIMIT", "profile", "profiles", "use_profiles", "write_profiles", "compute_seconds"]

MEMORY_LIMIT = 4.0
"""The largest memory-bound share a profile may have (`Calibration.memory`)."""

DIRECTORY = pathlib.Path(__file__).resolve().parent / "calibrations"
"""Where the committed profiles are, one ``<device>.json`` each."""


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The shares of a device's peaks a compiled step reaches.

    Attributes:
      device: the registry key (``a100-80gb``).
      matmul: the share of the dtype's peak FLOP/s its matrix products and
        convolutions reach, in (0, 1].
      memory: the share of the memory bandwidth at which the device moves the
        memory-bound bytes of the analysed program, in (0, 4]: above 1 where
        the device's compiler fuses more than the one that made the analysed
        program (the bytes are counted in the program compiled here).
      launch: seconds each kernel costs beyond its work (its launch, the tail of
        a small kernel), times the compiled program's kernels
        (`xla_cost.PhaseCosts.kernels`); 0 where the profile was fitted without it.
      fitted_on: the cases the two shares were fitted on (the others test them).
      source: how they were fitted (the command, the published figures).
    """

    device: str
    matmul: float
    memory: float
    fitted_on: tuple[str, ...] = ()
    source: str = ""
    launch: float = 0.0

    def __post_init__(self) -> None:
        for name, highest in (("matmul", 1.0), ("memory", MEMORY_LIMIT)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= highest:
                raise InputError(f"a calibration share ({name}) in (0, {highest:g}]", repr(value),
                                 "Fit it again (benchmarks/calibrate.py) or edit the profile.")
        if isinstance(self.launch, bool) or not isinstance(self.launch, (int, float)) or not 0 <= self.launch < 1e-3:
            raise InputError("seconds per kernel (launch) in [0, 0.001)", repr(self.launch),
                             "Fit it again (benchmarks/calibrate.py) or edit the profile.")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "fitted_on": list(self.fitted_on)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        return cls(str(data["device"]), float(data["matmul"]), float(data["memory"]),
                   tuple(data.get("fitted_on", ())), str(data.get("source", "")), float(data.get("launch", 0.0)))


@functools.cache
def profiles() -> dict[str, Calibration]:
    """Every committed profile, by device."""
    found = {}
    for path in sorted(DIRECTORY.glob("*.json")):
        calibration = Calibration.from_dict(json.loads(path.read_text()))
        found[calibration.device] = calibration
    return found


_IN_USE: list[Mapping[str, Calibration]] = []
"""Profiles `use_profiles` put in place of the committed ones, innermost last."""


@contextlib.contextmanager
def use_profiles(given: Mapping[str, Calibration] | None) -> Iterator[None]:
    """Within the block, `profile` answers from ``given`` (by device) instead of
    the committed profiles (None: the committed ones): how a calibration is
    fitted and tried before it is written."""
    if given is None:
        yield
        return
    _IN_USE.append(dict(given))
    try:
        yield
    finally:
        _IN_USE.pop()


def profile(device: str) -> Calibration | None:
    """The profile of ``device`` (a registry name): the committed one, or the
    one `use_profiles` put in place; None when it has none."""
    name = registry.device(device).name
    return (_IN_USE[-1] if _IN_USE else profiles()).get(name)


def write_profiles(calibrations: Mapping[str, Calibration], directory: pathlib.Path = DIRECTORY) -> list[pathlib.Path]:
    """Writes each profile to ``directory/<device>.json`` (sorted keys, one
    field a line) and returns the paths; `profiles` reads them on next start."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for device, calibration in sorted(calibrations.items()):
        path = directory / f"{device}.json"
        path.write_text(json.dumps(calibration.to_dict(), indent=2, sort_keys=True) + "\n")
        paths.append(path)
    profiles.cache_clear()
    return paths


def compute_seconds(
    matmul_flops: float, other_bytes: float, peak_flops: float, bandwidth: float, calibration: Calibration,
    kernels: float = 0,
) -> float:
    """Seconds of a device's compute: its matrix products at the calibrated share
    of ``peak_flops``, the memory-bound rest at the calibrated share of
    ``bandwidth``, and ``kernels`` launches at the calibrated seconds each."""
    return (matmul_flops / (peak_flops * calibration.matmul) + other_bytes / (bandwidth * calibration.memory)
            + kernels * calibration.launch)
