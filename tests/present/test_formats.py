"""Every result renders through one protocol (`xla_cost.present.formats.Renderable`)
in every format of `FORMATS`, and `render_as` is the one place a format is chosen.

The results are built here from figures written out below (a `Report` from a
tiny analysis, the others from their own fields), so the test is about the
renderings, not the analyses behind them.
"""

from __future__ import annotations

import io
import json

import jax
import jax.numpy as jnp
import pandas as pd
import pytest

import xla_cost
from xla_cost.analysis.memory import MemoryBreakdown
from xla_cost.timemodel import comm, schedule
from xla_cost.present.formats import FORMATS, Renderable, render_as
from xla_cost.runs.estimates import TrainingEstimate
from xla_cost.runs.scaling import ScalingResult, StepEstimate
from xla_cost.runs.sweeps import sweep_frames
from xla_cost.zoo import build_model

GB = 1e9


def _prediction(compute: float, communication: float) -> schedule.StepPrediction:
    return schedule.predict_step(compute * 1e15, None, communication, peak_flops=1e15, peak_bandwidth=None)


def _step(devices: int, batch: int, seconds: float) -> StepEstimate:
    return StepEstimate(devices, batch, flops=10**12, bytes_accessed=None, communication_bytes=4 * 10**6,
                        prediction=_prediction(seconds, 0.0))


def _breakdown(parameters: int) -> MemoryBreakdown:
    return MemoryBreakdown(parameters, parameters, 2 * parameters, 0, 1000, 5000,
                           argument_bytes=3 * parameters, output_bytes=4, temp_bytes=parameters, alias_bytes=0)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Renderable]:
    report = xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32),
                              optimizer="sgd", counter="jaxpr", per_layer=True)
    # two devices take 1 s and 0.6 s for 8 and 16 samples: 8/s and 26.67/s, speed-up 3.333
    steps = (_step(1, 8, 1.0), _step(2, 16, 0.6))
    scaling = ScalingResult(
        "one_net", "data", 8, xla_cost.Hardware(), steps,
        schedule.scaling_curve([(s.devices, s.global_batch, s.prediction) for s in steps]),
    )
    estimate = TrainingEstimate("one_net", 2, 1000, None, 3.0e6, 3.0e9, 63, steps[1], 63 * 0.6)
    fit = xla_cost.FitResult("one_net", 16, 60 * GB, 80 * GB, "a datasheet", _breakdown(10**9), 32,
                             _breakdown(2 * 10**9), ((16, 10**9), (32, 2 * 10**9)))
    sweep = xla_cost.sweep(["one_net"], batch_sizes=[1, 2], counter="jaxpr", jobs=0, progress=False,
                           store=tmp_path_factory.mktemp("store") / "s.sqlite")
    return {"report": report, "sweep": sweep, "scaling": scaling, "estimate": estimate, "fit": fit}


@pytest.mark.parametrize("kind", ["report", "sweep", "scaling", "estimate", "fit"])
def test_every_result_renders_in_every_format(results, kind):
    result = results[kind]
    assert isinstance(result, Renderable)
    for fmt in FORMATS:
        text = render_as(result, fmt, width=100)
        assert isinstance(text, str) and text.strip()
    json.loads(render_as(result, "json"))
    pd.read_csv(io.StringIO(render_as(result, "csv")))


def test_an_empty_sweep_renders(results):
    empty = sweep_frames([])
    for fmt in FORMATS:
        assert isinstance(render_as(empty, fmt), str)


def test_documents_carry_their_figures(results):
    scaling, estimate, fit = results["scaling"], results["estimate"], results["fit"]
    frame = pd.read_csv(io.StringIO(scaling.to_csv()))
    assert list(frame["devices"]) == [1, 2]
    assert frame["speedup"].iloc[1] == pytest.approx((16 / 0.6) / (8 / 1.0))
    assert json.loads(estimate.to_json())["hours"] == pytest.approx(63 * 0.6 / 3600)
    assert "one_net: 1,000 samples on 2 device(s)" in estimate.to_table()
    rows = pd.read_csv(io.StringIO(fit.to_csv())).set_index("part")
    assert rows.loc["optimizer_state", "batch_16"] == 2 * 10**9 and rows.loc["peak", "batch_32"] == 3 * 2 * 10**9 + 4 + 2 * 10**9
    assert "the largest batch that fits is 16" in fit.to_markdown()


def test_an_unknown_format_is_refused():
    with pytest.raises(xla_cost.InputError, match="a format in table, json, csv, markdown"):
        render_as(None, "yaml")  # type: ignore[arg-type]


def test_scaling_plot_is_a_figure_and_a_png_in_the_figure_style(results, tmp_path):
    from matplotlib.figure import Figure

    path = tmp_path / "curve.png"
    fig = results["scaling"].plot(str(path))
    assert isinstance(fig, Figure)  # as every result's plot() returns
    with open(path, "rb") as handle:
        assert handle.read().startswith(b"\x89PNG\r\n\x1a\n")
    # speed-up and efficiency, a point per device count (1 and 2)
    speedup, efficiency = fig.axes
    assert list(speedup.get_lines()[0].get_xdata()) == [1, 2] and len(efficiency.get_lines()[0].get_xdata()) == 2


@pytest.mark.parametrize("kind", ["report", "sweep", "scaling", "estimate", "fit"])
def test_a_notebook_shows_each_result_as_its_markdown(results, kind):
    # what IPython's display calls (IPython.core.formatters.MarkdownFormatter looks up _repr_markdown_)
    result = results[kind]
    shown = result._repr_markdown_()
    assert shown == result.to_markdown()
    assert "|" in shown and len(shown) < 7500  # tables, not a dataclass dump
    try:
        from IPython.core.formatters import MarkdownFormatter
    except ImportError:  # IPython is not a dependency: the direct call above is what it would make
        return
    assert MarkdownFormatter()(result) == shown


def test_report_plot_is_a_figure_of_its_layers(results, tmp_path):
    from matplotlib.figure import Figure

    report = results["report"]
    fig = report.plot()
    assert isinstance(fig, Figure)
    ticks = fig.axes[0].get_yticks()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    top_down = [label for _, label in sorted(zip(ticks, labels), reverse=True)]
    assert top_down == [layer.path for layer in report.layers]  # top to bottom in model order
    fig.savefig(tmp_path / "layers.png")
    with pytest.raises(xla_cost.InputError, match="per-layer rows"):
        xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32), optimizer="sgd",
                         counter="jaxpr").plot()


def test_sweep_plot_draws_a_line_per_hue(results):
    from matplotlib.figure import Figure

    fig = results["sweep"].plot(x="batch_size", y="forward_flops", hue="model")
    assert isinstance(fig, Figure)
    (line,) = fig.axes[0].get_lines()  # one model: one line, a point per batch size
    assert list(line.get_xdata()) == [1.0, 2.0]
    with pytest.raises(xla_cost.InputError, match="among the sweep's columns"):
        results["sweep"].plot(y="no_such_column")


def test_dir_shows_the_public_names_only():
    names = dir(xla_cost)
    assert {"analyze", "analyze_step", "Report", "sweep"} <= set(names)
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib", "_EXPORTS"} & set(names)
