"""The public API's signatures say what it takes (issue 30).

Every public function and class (every callable of `xla_cost._EXPORTS`) takes
its options as typed parameters that ``help()``, an IDE and a type checker see:
no ``**kwargs`` hiding options (an allow-list says where one is the user's own
keywords, forwarded), an annotation on every parameter, and a docstring whose
``Args:`` (a dataclass's ``Attributes:``) names each parameter and no other.
Options spelled out from an option object keep its types and defaults, so the
two cannot drift apart. Checked with `inspect.signature`, without running anything.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

import xla_cost
from xla_cost.analysis.options import AnalysisOptions
from xla_cost.timemodel.hardware import Hardware
from xla_cost.parallel.sharding import ShardingOptions
from xla_cost.runs.layouts import Parallelism
from xla_cost.runs.sweeps import Grid
from xla_cost.step.workload import ModelOptions

VAR_KEYWORD_ALLOWED: dict[str, str] = {
    "analyze_step": "``**kwargs`` are the user's training step's own keyword arguments, forwarded to it unchanged "
                    "(documented under Args as the step's keyword arguments): not options of xla_cost",
}
"""The public callables that may take ``**kwargs``, and why."""

MIRRORED: dict[str, tuple[type, ...]] = {
    "analyze": (ModelOptions, AnalysisOptions, ShardingOptions),
    "build_workload": (ModelOptions,),
    "predict": (Hardware,),
    "scaling": (Hardware,),
    "estimate": (Hardware, Parallelism),
    "sweep": (Grid,),
    "configurations": (Grid,),
}
"""The public functions that spell out every field of an option object as a
keyword parameter (with the object itself where they accept it too)."""


def _public() -> list[tuple[str, object]]:
    out = []
    for name in xla_cost._EXPORTS:  # noqa: SLF001 - the list under test
        value = getattr(xla_cost, name)
        if not callable(value):
            continue
        if isinstance(value, type) and isinstance(value.__init__, type(object.__init__)):
            continue  # a class whose constructor is a builtin's (an exception that takes a message)
        out.append((name, value))
    return out


PUBLIC = _public()


def _parameters(value: object) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(value).parameters.values() if p.name not in ("self", "cls")]


_SECTION = re.compile(r"^(\s*)(Args|Arguments|Attributes|Parameters):\s*$")
_OTHER_SECTION = re.compile(r"^\s*(Returns|Raises|Yields|Example|Examples|Note|Notes|See also)\s*:{1,2}\s*$")
_NAMES = re.compile(r"^\*{0,2}[A-Za-z_][A-Za-z0-9_]*(\s*,\s*\*{0,2}[A-Za-z_][A-Za-z0-9_]*)*$")


def documented_names(doc: str) -> list[str]:
    """The parameters an ``Args:`` (or ``Attributes:``) section names, in order:
    each entry is ``name: text`` or ``a, b: text`` at the section's indent, its
    names possibly running on to the next line; ``*args``/``**kwargs`` keep their stars."""
    lines = doc.expandtabs().splitlines()
    names: list[str] = []
    for start, line in enumerate(lines):
        section = _SECTION.match(line)
        if not section:
            continue
        entries: list[list[str]] = []
        indent = None
        for body in lines[start + 1:]:
            if not body.strip():
                continue
            width = len(body) - len(body.lstrip())
            if width <= len(section.group(1)) or _OTHER_SECTION.match(body):
                break
            if indent is None:
                indent = width
            if width == indent:
                entries.append([body.strip()])
            elif width > indent and entries:
                entries[-1].append(body.strip())
        for entry in entries:
            text = " ".join(entry)
            head = text.split(":", 1)[0].strip() if ":" in text else ""
            if head and _NAMES.match(head):
                names += [n.strip() for n in head.split(",")]
    return names


def _doc(value: object) -> str:
    doc = inspect.getdoc(value) or ""
    if isinstance(value, type) and "__init__" in vars(value):
        doc += "\n" + (inspect.getdoc(vars(value)["__init__"]) or "")
    return doc


def _starred(parameter: inspect.Parameter) -> str:
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "")
    return stars + parameter.name


@pytest.mark.parametrize("name, value", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_no_keywords_hidden_in_kwargs(name, value):
    hidden = [p.name for p in _parameters(value) if p.kind is inspect.Parameter.VAR_KEYWORD]
    if name in VAR_KEYWORD_ALLOWED:
        assert hidden, f"{name} is allowed **kwargs but takes none: drop it from VAR_KEYWORD_ALLOWED"
    else:
        assert hidden == [], f"xla_cost.{name}(**{hidden[0] if hidden else ''}): spell its options out"


@pytest.mark.parametrize("name, value", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_every_parameter_has_an_annotation(name, value):
    bare = [p.name for p in _parameters(value) if p.annotation is inspect.Parameter.empty]
    assert bare == [], f"xla_cost.{name}: parameters without a type: {bare}"


@pytest.mark.parametrize("name, value", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_the_docstring_names_every_parameter_and_no_other(name, value):
    documented = documented_names(_doc(value))
    taken = [_starred(p) for p in _parameters(value)]
    plain = {n.lstrip("*") for n in documented}
    missing = [n for n in taken if n not in documented and n.lstrip("*") not in plain]
    extra = [n for n in documented if n.lstrip("*") not in {t.lstrip("*") for t in taken}]
    assert missing == [], f"xla_cost.{name}: parameters its docstring's Args do not name: {missing}"
    assert extra == [], f"xla_cost.{name}: its docstring names parameters it does not take: {extra}"


@pytest.mark.parametrize("name", sorted(MIRRORED))
def test_spelled_out_options_keep_their_option_objects_types_and_defaults(name):
    parameters = {p.name: p for p in _parameters(getattr(xla_cost, name))}
    for group in MIRRORED[name]:
        for field in dataclasses.fields(group):
            assert field.name in parameters, f"{name} lacks {group.__name__}.{field.name}"
            parameter = parameters[field.name]
            assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, (name, field.name)
            assert parameter.annotation == field.type, (name, field.name, parameter.annotation, field.type)
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            assert parameter.default == default, (name, field.name, parameter.default, default)


def test_a_keyword_replaces_the_option_objects_field_only_where_given():
    # predict(report, hardware, **fields): a field left at its default keeps the object's; one given replaces it
    from xla_cost.options import changed_fields

    values = {f.name: getattr(Hardware(), f.name) for f in dataclasses.fields(Hardware)}
    assert changed_fields(Hardware, values) == {}
    assert changed_fields(Hardware, {**values, "mfu": 0.5, "device": "a100-80gb"}) == {"mfu": 0.5,
                                                                                        "device": "a100-80gb"}
    # an equal value of another type is given (False is not the default None), an array is never compared
    assert changed_fields(Hardware, {**values, "overlap": 0}) == {"overlap": 0}


def test_an_unknown_keyword_is_refused_as_python_refuses_it():
    with pytest.raises(TypeError, match="unexpected keyword argument 'per_layers'"):
        xla_cost.analyze(None, None, optimizer="sgd", per_layers=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch_size'"):
        xla_cost.sweep("one_net", batch_size=2)  # the grid's field is batch_sizes


def test_the_docstring_reader_reads_google_style_entries():
    doc = """Does it.

    Args:
      model: a model: with a colon.
      samples, epochs: the data set,
        and passes over it.
      device, interconnect,
        node_size: run on.
      *args: positional.
      **kwargs: the step's own.

    Returns:
      x: not a parameter.
    """
    assert documented_names(inspect.cleandoc(doc)) == ["model", "samples", "epochs", "device", "interconnect",
                                                       "node_size", "*args", "**kwargs"]


# ------------------------------------------------------------------ one name per command

COMMAND_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "analyze": ("analyze",),
    "sweep": ("sweep",),
    "scaling": ("scaling",),
    "estimate": ("estimate",),
    "diff": ("diff",),
    # where the command's name is taken, the function says what it does to it:
    "step": ("analyze_step",),  # xla_cost.step is the subpackage of what is analysed
    "report": ("write_report",),  # xla_cost.Report is the result an analysis returns
    "store": ("store_contents", "store_delete", "store_vacuum"),  # xla_cost.Store is the store itself
    "fit": ("max_batch_size",),  # a function named fit would read as training the model
    "models": (),  # the zoo's listing: xla_cost.zoo.render_zoo
}
"""The Python function of each command (docs/conventions.md#names): the
command's name, or, where that name is the API's already, the reason."""


def test_each_command_is_one_function_named_after_it():
    from xla_cost.cli.parser import build_parser

    parser = build_parser()
    commands = set(next(a for a in parser._actions if a.dest == "command").choices)  # noqa: SLF001
    assert commands == set(COMMAND_FUNCTIONS)
    for command, functions in COMMAND_FUNCTIONS.items():
        for function in functions:
            assert function in xla_cost._EXPORTS, function  # noqa: SLF001
    # one name for one object: no export renames what its module defines (no alias left behind)
    renamed = {n: t for n, t in xla_cost._EXPORTS.items() if ":" in t and n != "replay_schedule"}  # noqa: SLF001
    assert renamed == {}
    assert "predict_scaling" not in xla_cost._EXPORTS  # noqa: SLF001 - scaling's name before 0.1


# ------------------------------------------------------------------ every result: a frame, markdown, a figure

RESULTS: tuple[str, ...] = (
    "Report", "ReportDiff", "FitResult", "ScalingResult", "StepEstimate", "SweepResult", "TrainingEstimate",
    "StoreContents", "MemoryBreakdown", "JaxprCount", "LivenessProfile", "TargetComparison",
)
"""The public classes a call returns (or a report carries) to be read: each has
``to_frame()`` (raw numbers, pandas) and ``_repr_markdown_`` (a notebook's view)."""

NOT_RESULTS: dict[str, str] = {
    "Calibration": "a device's fitted constants, an input of predictions",
    "PredictionInterval": "part of the committed constants (Calibration.interval), printed beside a figure",
    "Collective": "one row of a phase's communication, shown in its Report's table",
    "RunConfig": "a configuration asked for, not an answer",
    "TargetMemory": "part of a Report (its target_memory): shown in its notes and its JSON",
}
"""Public classes with a ``to_dict`` that are not results, and why."""


def test_every_result_class_has_a_frame_and_a_markdown_view():
    exported = {n: getattr(xla_cost, n) for n in xla_cost._EXPORTS if isinstance(getattr(xla_cost, n), type)}  # noqa: SLF001
    rendered = {n for n, cls in exported.items()
                if any(hasattr(cls, m) for m in ("to_dict", "to_frame", "to_markdown", "_repr_markdown_"))}
    assert rendered <= set(RESULTS) | set(NOT_RESULTS), rendered - set(RESULTS) - set(NOT_RESULTS)
    for name in RESULTS:
        cls = exported[name]
        assert callable(getattr(cls, "to_frame", None)), f"{name} has no to_frame()"
        assert callable(getattr(cls, "_repr_markdown_", None)), f"{name} has no _repr_markdown_"


@pytest.fixture(scope="module")
def one_net(tmp_path_factory):
    import jax
    import jax.numpy as jnp

    from xla_cost.zoo import build_model

    report = xla_cost.analyze(build_model("one_net"), jax.ShapeDtypeStruct((2, 1), jnp.float32), optimizer="sgd",
                              per_layer=True, memory=True)
    sweep = xla_cost.sweep(["one_net"], batch_sizes=[1, 2], optimizers=["sgd"], counter="jaxpr", jobs=0,
                           progress=False, store=tmp_path_factory.mktemp("store") / "s.sqlite")
    return report, sweep


def test_a_step_estimate_sweep_memory_breakdown_and_count_have_frames_and_markdown(one_net):
    import jax
    import jax.numpy as jnp
    import pandas as pd

    from tests.formulas import mlp_params
    from xla_cost.present.units import size

    report, sweep = one_net
    parameters = mlp_params(1)  # one_net: 1 -> 4096 -> 128 -> 10, weights and biases
    assert report.parameters == parameters
    # SweepResult: its runs, raw: SGD's update is 2 FLOP a parameter (a multiply and a subtract) at every batch
    frame = sweep.to_frame()
    assert isinstance(frame, pd.DataFrame) and list(frame["batch_size"]) == [1, 2]
    assert list(frame["update_flops"]) == [2 * parameters, 2 * parameters]
    assert "|" in sweep._repr_markdown_()
    # StepEstimate: the train step priced as a bound at peak, one row of its figures
    step = xla_cost.predict(report, mfu=1.0)
    row = step.to_frame().iloc[0]
    assert row["flops_per_device"] == report.phases["train_step"].flops and row["devices"] == 1
    assert row["step_s"] == step.prediction.seconds and row["priced_as"] == "bound"
    assert step._repr_markdown_().startswith("one train step on 1 device(s)") and "| step |" in step._repr_markdown_()
    # MemoryBreakdown: float32 parameters, 4 bytes each, and as many gradients
    breakdown = report.memory_breakdown
    parts = breakdown.to_frame().set_index("part")
    assert parts.loc["parameters", "program_bytes"] == parts.loc["gradients", "program_bytes"] == 4 * parameters
    assert parts.loc["xla_peak", "at_peak_bytes"] == breakdown.peak
    shown = breakdown._repr_markdown_()
    assert f"| parameters | {size(4 * parameters)} |" in shown
    # JaxprCount: a (8, 16) x (16, 4) product is 2 x 8 x 16 x 4 = 1,024 FLOP, its sum 31 adds, tanh 32 transcendentals
    counted = xla_cost.count_function(lambda a, b: jnp.tanh(a @ b).sum(), jax.ShapeDtypeStruct((8, 16), jnp.float32),
                                      jax.ShapeDtypeStruct((16, 4), jnp.float32))
    rows = counted.to_frame()
    assert rows["flops"].sum() == 1024 + 31 and rows["transcendentals"].sum() == 32
    assert "| dot_general | 1 | 1.024 k |" in counted._repr_markdown_()
    # LivenessProfile: the arguments of grad(tanh(x @ w).sum()) are w (64 x 64) and x (8 x 64), float32
    w, x = jnp.ones((64, 64)), jnp.ones((8, 64))
    profile = xla_cost.replay_schedule(
        jax.jit(jax.grad(lambda w, x: jnp.tanh(x @ w).sum())).lower(w, x).compile().as_text())
    buffers = profile.to_frame()
    assert buffers[buffers["role"] == "argument"]["nbytes"].sum() == 4 * (64 * 64 + 8 * 64)
    assert profile._repr_markdown_().startswith(f"peak {size(profile.peak_bytes)}")


def test_every_plot_returns_a_matplotlib_figure(one_net, tmp_path):
    from matplotlib.figure import Figure

    from xla_cost.timemodel import schedule
    from xla_cost.present import plots

    report, sweep = one_net
    steps = (xla_cost.predict(report, mfu=1.0),)
    scaling = xla_cost.ScalingResult("one_net", "data", 2, xla_cost.Hardware(mfu=1.0), steps,
                                     schedule.scaling_curve([(s.devices, s.global_batch, s.prediction) for s in steps]))
    exported = [n for n in xla_cost._EXPORTS if isinstance(getattr(xla_cost, n), type)  # noqa: SLF001
                and callable(getattr(getattr(xla_cost, n), "plot", None))]
    instances = {"Report": report, "SweepResult": sweep, "ScalingResult": scaling}
    assert sorted(exported) == sorted(instances)  # a new result with a plot() is added here
    for name, result in instances.items():
        assert isinstance(result.plot(), Figure), name
    assert isinstance(scaling.plot(str(tmp_path / "s.png")), Figure) and (tmp_path / "s.png").stat().st_size
    # the present layer's figures, which the plots draw with
    assert set(plots.__all__) == {"MAX_LAYERS", "layer_bars", "sweep_lines"}
    assert isinstance(plots.layer_bars([("fc", 1.0, 2.0, 0.5)], "t"), Figure)
    assert isinstance(plots.sweep_lines(sweep.runs, "batch_size", "forward_flops"), Figure)
