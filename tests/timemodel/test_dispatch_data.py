"""The dispatch and launch costs docs/time-model.md quotes, and those the time model reads
(`kernel_time.KERNEL_GAP`, each registry device's `Dispatch`), come from the committed measurements.

``reports/data/dispatch_<device>_<date>.csv`` is written by ``python benchmarks/dispatch_costs.py``
on a GPU: seconds per call of a chain of n tiny kernels and of a program of n small arrays, calls
back to back. The page quotes the one-kernel call, the slope per kernel and the slope per array.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pandas as pd
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "reports" / "data").glob("dispatch_nvidia-h200_*.csv"))
PAGE = ROOT / "docs" / "time-model.md"


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    assert FILES, "no reports/data/dispatch_nvidia-h200_*.csv: run python benchmarks/dispatch_costs.py on an H200"
    return pd.read_csv(FILES[-1])


def _slope(rows: pd.DataFrame, program: str) -> float:
    """Seconds per unit of n between the largest two sizes measured (the per-call floor cancels)."""
    part = rows[rows.program == program].sort_values("n")
    (n1, t1), (n2, t2) = part[["n", "seconds_per_call"]].values[-2:]
    return (t2 - t1) / (n2 - n1)


def test_every_kernel_of_the_chain_is_its_own_kernel(rows):
    chain = rows[rows.program == "chain"]
    assert (chain.kernels == chain.n).all()  # the optimization barriers keep XLA from fusing them


def test_the_page_quotes_the_measurement(rows):
    text = re.sub(r"\s+", " ", PAGE.read_text())
    one = rows[(rows.program == "chain") & (rows.n == 1)].seconds_per_call.item()
    per_kernel = _slope(rows, "chain")  # (t(1024) - t(256)) / 768
    per_array = _slope(rows, "arguments") - per_kernel  # each array is also one kernel of its own
    largest = rows[(rows.program == "arguments") & (rows.n == 1024)].seconds_per_call.item()
    chain_1024 = rows[(rows.program == "chain") & (rows.n == 1024)].seconds_per_call.item()
    assert f"a call of one kernel took {one * 1e6:.0f} µs" in text
    assert f"each further kernel {per_kernel * 1e6:.2f} µs (1,024 in {chain_1024 * 1e3:.2f} ms)" in text
    assert f"each further array about {per_array * 1e6:.1f} µs (1,024 arrays in {largest * 1e3:.1f} ms," in text


ALL = sorted((ROOT / "reports" / "data").glob("dispatch_*.csv"))


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_the_time_model_reads_what_each_machine_measured(path):
    from xla_cost.timemodel import devices, kernel_time

    rows = pd.read_csv(path)
    found = devices.match_kind(str(rows.device.iloc[0]))
    assert found is not None and found.dispatch is not None, f"{path.name}: its device has no Dispatch"
    assert path.name in found.dispatch.source
    one = rows[(rows.program == "chain") & (rows.n == 1)].seconds_per_call.item()
    assert found.dispatch.call == pytest.approx(one, rel=0.01)  # a call of one argument and one kernel
    arguments = rows[rows.program == "arguments"]
    slope = float(np.polyfit(arguments.n, arguments.seconds_per_call, 1)[0])  # least squares over 1..1,024
    assert found.dispatch.per_argument == pytest.approx(slope, rel=0.02)
    # the gap every kernel pays: the chain's slope on each machine, within 5% of the one constant
    assert _slope(rows, "chain") == pytest.approx(kernel_time.KERNEL_GAP, rel=0.05)


def test_a_step_waits_for_its_host():
    """Dispatch of n arrays in one call: the call plus each further array (the benchmark's own
    program reproduced: one array costs the call alone)."""
    from xla_cost.timemodel import devices

    measured = devices.device("h100").dispatch
    assert measured.seconds(1) == measured.call
    assert measured.seconds(21) == pytest.approx(measured.call + 20 * measured.per_argument, rel=1e-12)
    assert measured.seconds(None, calls=2) == 2 * measured.call  # arguments unknown: the calls alone
    # a device no machine here has: the fastest host measured, and said so
    floor, was_measured = devices.host_dispatch(devices.device("a100-80gb"))
    assert not was_measured and floor.call == min(d.dispatch.call for d in devices.DEVICES.values() if d.dispatch)
