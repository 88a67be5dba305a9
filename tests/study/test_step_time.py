"""The step-time page and the environment every page states (issue 22, part 3):
labels that name batch and dtype and do not overlap, a panel per dtype, the
peaks per dtype, intervals where the CSV has them (else the IQR, said so), the
unexplained measurements marked, and each data file's device, jax version and
command. Timing CSVs are made up here (`tests.study.test_claims.timing`)."""

from __future__ import annotations

import csv
import itertools
import pathlib
from typing import Any

import pytest

from xla_cost.present.figures import style
from xla_cost.study.pages import step_time
from xla_cost.study.views import time_interval, timing_cases
from xla_cost.study.write import write_report

from tests.study.test_claims import CPU, H100, timing
from tests.study.test_pages import TINY

TF32_SOURCE = "NVIDIA H100 datasheet, SXM5 (dense: BF16 989.4 TFLOPS, TF32 494.7; HBM3 3.35 TB/s)"


def _write(folder: pathlib.Path, name: str, rows: list[dict[str, Any]]) -> pathlib.Path:
    path = folder / name
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _h100_rows(**extra: Any) -> list[dict[str, Any]]:
    """ResNet-50 at batch 32 and 256 and BERT at 32, float32 and bfloat16, on the H100,
    with the H100's peaks per dtype (TF32 for float32)."""
    rows = []
    for model, batch, dtype in itertools.product(("resnet50", "bert-base"), (32, 256), ("float32", "bfloat16")):
        if model == "bert-base" and batch == 256:
            continue
        scale = batch / 32 * (0.6 if dtype == "bfloat16" else 1.0)
        for row in timing(H100, model, batch, dtype, "sgd", 0.005 * scale, 0.010 * scale, 0.002):
            rows.append({**row, "peak_flops_per_s": 989.4e12 if dtype == "bfloat16" else 494.7e12,
                         "peak_source": TF32_SOURCE, **extra})
    return rows


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("step")
    data = root / "data"
    data.mkdir()
    _write(data, "timing_nvidia-h100-80gb-hbm3_2026-01-01.csv", _h100_rows())
    _write(data, "timing_cpu_2026-01-01.csv", [r for case in (
        timing(CPU, "resnet50", 2, d, "sgd", 0.1, 0.2, 0.03, config="image_size=64") for d in ("float32", "bfloat16"))
        for r in case])
    paths = write_report("step-time", root / "out", store=root / "s.sqlite", jobs=0, plan=TINY, data_dir=data)
    assert {p.name for p in paths if p.suffix == ".png"} == {
        f"step-time-timing_{d}_2026-01-01-{kind}.png" for d in ("cpu", "nvidia-h100-80gb-hbm3")
        for kind in ("shares", "ratio", "mfu")} | {"step-time-timing_nvidia-h100-80gb-hbm3_2026-01-01-batch.png"}
    return (root / "out" / "step-time.md").read_text()


def test_no_stale_text_and_the_command_of_each_file(page):
    assert "No GPU has run" not in page and "will add" not in page
    assert "by `python benchmarks/time_zoo.py --reduced`" in page and "by `python benchmarks/time_zoo.py`." in page


def test_peaks_per_dtype_and_tf32(page):
    h100 = page.split(f"## {H100}")[1]
    assert "per dtype: float32 494.7 TFLOP/s, bfloat16 989.4 TFLOP/s" in h100
    assert "float32 here means TF32" in h100
    assert "float32 here means TF32" not in page.split(f"## {H100}")[0]  # the CPU's section


def test_labels_name_the_batch_and_the_iqr_is_said(page):
    h100 = page.split(f"## {H100}")[1]
    assert "| resnet50 batch 32 | float32 | sgd |" in h100 and "| resnet50 batch 256 | bfloat16 | sgd |" in h100
    # train step 17 ms at batch 32 in float32: 0.005 + 0.010 + 0.002 s, its IQR a fiftieth of it
    assert "| 17.0 (IQR 0.340, 7 runs) |" in h100
    assert "The file records the interquartile range (IQR), not an interval" in h100
    # every case's shares name its batch: 5 / 10 / 2 ms at batch 32 are 29% / 59% / 12%
    assert "resnet50 batch 32 29% / 59% / 12%" in h100
    assert "![Time per example against the batch on " + H100 in h100


def test_unexplained_bert_bfloat16_is_marked_and_stated(page):
    h100 = page.split(f"## {H100}")[1]
    assert "| bert-base batch 32 † | bfloat16 | sgd |" in h100
    paragraph = next(line for line in h100.splitlines() if line.startswith("† **Unexplained"))
    # bfloat16 backward 0.6 * 10 ms = 6.00 ms against 10.0 ms in float32, forward 0.60x
    assert "the bfloat16 backward pass of bert-base batch 32" in paragraph
    assert "sgd: 6.00 ms against 10.0 ms in float32 (the forward pass 0.60× the float32 one)" in paragraph
    assert "not evidence for any claim" in paragraph


def test_an_interval_in_the_csv_is_read():
    rows = [{**r, "step_median_s": 0.02, "step_low_s": 0.019, "step_high_s": 0.023} if r["phase"] == "train_step"
            else r for r in _h100_rows()]
    import pandas as pd

    case = timing_cases(pd.DataFrame(rows))[0]
    span = time_interval(case, "train_step")
    assert (span.median, span.low, span.high, span.kind) == (0.02, 0.019, 0.023, "interval")
    # without the columns: the IQR's width centred on the median (17 ms, IQR 0.34 ms)
    span = time_interval(timing_cases(pd.DataFrame(_h100_rows()))[0], "train_step")
    assert span.kind == "iqr" and span.high - span.low == pytest.approx(0.017 / 50)
    assert step_time._spread_cell(case) == "20.0 [19.0, 23.0, 7 runs]"


def _overlaps(boxes: list[Any]) -> list[tuple[int, int]]:
    return [(i, j) for i, j in itertools.combinations(range(len(boxes)), 2)
            if boxes[i].x0 < boxes[j].x1 and boxes[j].x0 < boxes[i].x1
            and boxes[i].y0 < boxes[j].y1 and boxes[j].y0 < boxes[i].y1]


def test_ratio_figure_labels_do_not_overlap():
    import pandas as pd
    from matplotlib.text import Text

    # 24 cases in one dtype whose points nearly coincide (backward/forward time 1.80-1.85)
    rows = [r for b, o in itertools.product(range(12), ("sgd", "adam"))
            for r in timing(H100, "resnet50", 8 * (b + 1), "float32", o, 0.010, 0.018 + 0.0002 * b, 0.002)]
    cases = timing_cases(pd.DataFrame(rows))
    with style():
        fig = step_time._draw_time_vs_flop(cases, H100)
        renderer = fig.canvas.get_renderer()
        fig.canvas.draw()
        labels = [t for ax in fig.axes for t in ax.texts if t.get_text().startswith("resnet50 batch")]
        # the texts alone (an annotation's own extent includes its line to the point)
        boxes = [Text.get_window_extent(t, renderer) for t in labels]
    assert len(labels) == len(cases)
    assert not _overlaps(boxes)
    # and they stay inside the figure
    width, height = fig.canvas.get_width_height()
    assert all(b.y0 >= 0 and b.y1 <= height and b.x1 <= width for b in boxes)


def test_spread_keeps_order_and_gap():
    out = step_time._spread([0.5, 0.5, 0.5, 0.98, 0.99], 0.05)
    assert out == sorted(out) and all(b - a >= 0.05 - 1e-12 for a, b in zip(out, out[1:]))
    assert out[-1] <= 1.0
