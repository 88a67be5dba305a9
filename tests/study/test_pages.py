"""Generated reports (issue 11, part 2): pages from sweeps through the store,
byte-identical from the same store, figures that are PNGs, one-model pages,
the CLI's one-line errors. Small plans keep every test to seconds."""

from __future__ import annotations

import csv
import pathlib
import re

import pytest

import xla_cost
from xla_cost.cli import main
from xla_cost.present import units
from xla_cost.study import claims, pages
from xla_cost.study.pages import PAGES, memory
from xla_cost.study.plan import COMMAND, ReportPlan
from xla_cost.study.write import write_report
from xla_cost.zoo import build_model, example_inputs

from tests import formulas as F
from tests.custom_models import D_HIDDEN, D_IN, D_OUT

IMAGE = 224 * 224 * 3
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SGD_FLOPS_PER_PARAM = 2  # seed 001, appendix B: w += a * dw, a multiply and an add

# The smallest plan that still fills every page: two seed nets at batch 1 and 2,
# no DeeperConvNet, ResNet or transformer, two optimizers on OneNet; the validation
# page's two cases, two papers' ResNet-50 steps (tests/study/test_validation.py prices them all).
TINY = ReportPlan(
    seed_nets=("linear_net", "one_net"), batch_sizes=(1, 2), layer_batch=2, depths=(), resnets=(),
    transformers=(), optimizer_models=("one_net",), optimizers=("sgd", "adam"), breakdown_model="one_net",
    zoo=("one_net",), scaling_curves=(("one_net", "data", 2),), scaling_devices=(1, 2, 4),
    seed004_model="one_net", seed004_batch=2, seed004_devices=(2, 4), seed004_global_batch=8, gpt3_model=None,
    memory_models=(("one_net", (1, 2)),), remat_model=("one_net", 2), fit_devices=(),
    memory_checks=(("one_net", 2, ()),), validation_cases=("goyal-256-time", "jia-1024-time"), seed000_models=(),
)


def _table(markdown: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the markdown table whose header starts with ``| first_header |``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def _markdown(paths: list[pathlib.Path]) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in paths if p.suffix == ".md"}


# The memory page's fits compile a step per batch they try (the update program, the same at every
# batch, each time), and the second write fits again: each program compiled once in the module
# (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("module_caches")


DATA = pathlib.Path(__file__).resolve().parents[2] / "reports" / "data"
TIMING_KEPT = ("timing_cpu_*.csv", "timing_nvidia-h100-80gb-hbm3_*-4.csv", "timing_nvidia-h200_*-2.csv")
"""The committed timing files the tiny pages read: the CPU's and one run of each GPU with a batch series (every
file is a section of three or four figures on the step-time page, drawn alike; the other files add only figures)."""


def _tiny_data(root: pathlib.Path) -> pathlib.Path:
    """The committed data of the checkout, its timing files but `TIMING_KEPT` left out (links)."""
    kept = {p for pattern in TIMING_KEPT for p in DATA.glob(pattern)}
    assert len(kept) == len(TIMING_KEPT), kept
    data = root / "data"
    data.mkdir()
    for path in DATA.iterdir():
        if not path.name.startswith("timing_") or path in kept:
            (data / path.name).symlink_to(path)
    return data


@pytest.fixture(scope="module")
def tiny_pages(tmp_path_factory):
    """Every page of the TINY plan written twice from one store (in-process),
    with the committed data of the checkout (`_tiny_data`); (first, second, out directory).
    The first write draws and renders every figure, at a sixth of the pages'
    resolution (every artist is drawn; the rasters are smaller: the 33 figures
    took 13 of its 30 s at full size). The second write is compared by its
    markdown: its figures are made but not rendered (matplotlib's savefig writes
    a bare PNG signature)."""
    from matplotlib.figure import Figure

    from xla_cost.present import figures

    root = tmp_path_factory.mktemp("pages")
    store = root / "results.sqlite"
    data = _tiny_data(root)
    for run in ("a", "b"):
        (root / run).mkdir()
    # each run from a directory of its own, with the same --out: the pages name the command as given
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root / "a")
        patch.setattr(figures, "DPI", figures.DPI // 6)
        first = write_report("all", "pages", store=store, jobs=0, progress=False, plan=TINY, data_dir=data)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root / "b")
        patch.setattr(Figure, "savefig", lambda self, target, **_: target.write(PNG_MAGIC))
        second = write_report("all", "pages", store=store, jobs=0, progress=False, plan=TINY, data_dir=data)
    out = root / "a" / "pages"
    return [root / "a" / p for p in first], [root / "b" / p for p in second], out


def test_every_page_written_and_identical_from_the_same_store(tiny_pages):
    first, second, out = tiny_pages
    assert sorted(_markdown(first)) == sorted(f"{p}.md" for p in PAGES)
    assert _markdown(first) == _markdown(second)  # byte for byte
    figures = [p for p in first if p.suffix == ".png"]
    assert figures and all(p.parent == out / "figures" for p in figures)
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in figures)
    # every figure a page links to was written, and nothing else
    linked = {
        line.split("](", 1)[1].rstrip(")")
        for p in first if p.suffix == ".md"
        for line in p.read_text().splitlines() if line.startswith("![")
    }
    assert linked == {f"figures/{p.name}" for p in figures}


def test_pages_written_elsewhere_link_the_data_they_read_and_name_their_command(tiny_pages):
    _, _, out = tiny_pages
    data_links = 0
    for page in out.glob("*.md"):
        text = page.read_text()
        # every link to a committed data file resolves from the page's own directory (a page written
        # outside reports/ linked data/NAME, which exists only beside the committed pages)
        for target in re.findall(r"\]\(([^)#]+)\)", text):
            if "/data/" in f"/{target}":
                data_links += 1
                assert (out / target).exists(), (page.name, target)
        if "Generated by" in text:
            assert "Generated by `xla-cost report all --out pages`" in text, page.name
            assert "--out reports/`" not in text.split("## Regenerating")[0], page.name
    assert data_links >= len(TIMING_KEPT)


def test_every_page_states_its_environment(tiny_pages):
    import jax

    every_page = tiny_pages[2]
    for name in PAGES:
        text = (every_page / f"{name}.md").read_text()
        section = text.split("## Environment", 1)[1]
        assert f"| jax | {jax.__version__} |" in section and "| jaxlib |" in section, name
        assert "| backend |" in section and "| device |" in section, name


def test_pages_name_the_command_device_and_jax_of_their_data(tiny_pages):
    every_page = tiny_pages[2]
    data = every_page.parents[1] / "data"  # the committed files the pages read (`_tiny_data`)
    for name, files in (("step-time", "timing_*.csv"), ("claims", "timing_*.csv"), ("zoo", "analysis_time_*.csv"),
                        ("index", "*.csv")):
        section = (every_page / f"{name}.md").read_text().split("## Environment", 1)[1]
        rows = [line for line in section.splitlines() if line.startswith("| [`reports/data/")]
        assert len(rows) == len(list(data.glob(files))) or name == "zoo", name
        for row in rows:
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert cells[4].startswith("`python benchmarks/"), row  # the command that wrote the file
            assert cells[2] != "not recorded" and cells[3] != "not recorded", row  # jax, date
            assert all(cells[5:]), row  # CUDA, cuDNN, driver, clocks: each recorded, "not recorded" or "n/a (CPU)"
            if "timing_cpu" in row:
                assert cells[4] == "`python benchmarks/time_zoo.py --reduced`"


def test_ratio_page_numbers_from_the_closed_forms(tiny_pages):
    first, _, out = tiny_pages
    page = (out / "backward-forward-ratio.md").read_text()
    layers = {(r["net"], r["layer"]): r for r in _table(page, "net")}
    fc1 = layers[("LinearNet", "fc1")]
    # fc1 of LinearNet at batch 2: matmul and bias (F.dense_flops), its weight and
    # bias gradients only (the first layer needs no input gradient)
    forward = F.mlp_forward_layers(2, IMAGE)["fc1"]
    backward = F.mlp_backward_layers(2, IMAGE)["fc1"]
    assert fc1["forward FLOP (batch 2)"] == units.si(forward)
    assert fc1["backward / forward"] == f"{backward / forward:.3f}"
    # SGD: 2 FLOP per parameter of the layer, (150528 * 4096 + 4096) parameters
    assert fc1["parameters"] == f"{IMAGE * 4096 + 4096:,}"
    assert fc1["update FLOP (SGD)"] == units.si(SGD_FLOPS_PER_PARAM * (IMAGE * 4096 + 4096))
    fc2 = layers[("LinearNet", "fc2")]
    assert fc2["backward / forward"] == f"{F.mlp_backward_layers(2, IMAGE)['fc2'] / F.mlp_forward_layers(2, IMAGE)['fc2']:.3f}"
    # the ratio table: XLA's phase counts are within 3e-6 of the closed forms for
    # LinearNet (tests/test_seed_nets.py), far inside the three decimals shown
    batches = {r["batch"]: r for r in _table(page, "batch")}
    ratio = F.mlp_backward_phase(2, IMAGE) / F.mlp_forward_phase(2, IMAGE)
    assert batches["2"]["LinearNet bwd/fwd"] == f"{ratio:.3f}"
    with_update = (F.mlp_backward_phase(2, IMAGE) + SGD_FLOPS_PER_PARAM * F.mlp_params(IMAGE)) / F.mlp_forward_phase(2, IMAGE)
    assert batches["2"]["LinearNet (bwd+upd)/fwd"] == f"{with_update:.3f}"


def test_claims_table_has_every_claim_and_derived_verdicts(tiny_pages):
    _, _, out = tiny_pages
    rows = _table((out / "claims.md").read_text(), "#")
    assert [r["claim"] for r in rows] == [c.text for c in claims.CLAIMS]
    # SGD's update is 2 FLOP per parameter exactly (F.mlp_params(1) parameters of OneNet)
    sgd = next(r for r in rows if r["claim"].startswith("SGD costs"))
    assert sgd["verdict"] == "**confirmed**"
    assert f"{SGD_FLOPS_PER_PARAM * F.mlp_params(1) / F.mlp_params(1):.3f} FLOP" in sgd["measured"]
    # seed 000's V100 step split: judged on V100 timings only; the committed timings are
    # a CPU's and an H100's, shown as context, and the row says what would test it
    v100 = next(r for r in rows if "V100" in r["claim"] and "23%" in r["claim"])
    assert v100["verdict"] == "**not testable here (needs a V100)**"
    assert "what would test it" in v100["measured"] and "V100" in v100["rule"]
    gpu = [p for p in DATA.glob("timing_*.csv")
           if not p.name.startswith("timing_cpu")]
    if gpu:
        assert "Context, not evidence" in v100["measured"]
    # every row states its rule before its figures
    assert [r["rule"] for r in rows] == [c.rule for c in claims.CLAIMS]
    # seed 004's doubling: priced on P40s, each priced doubling named (the fixed-batch one is Jia et al.'s alone,
    # from the validation's programs: not in the tiny plan); tests/study/test_claims.py checks that the rule gives
    # each of its verdicts
    doubling = next(r for r in rows if "1.3×" in r["claim"])
    assert "priced on Tesla P40s" in doubling["measured"] and "1 → 2 GPUs" in doubling["measured"]
    assert "2 → 4 GPUs" not in doubling["measured"]
    assert claims.verdict_kind(doubling["verdict"].strip("*")) in ("confirmed", "refuted", "depends")


def test_the_optimizers_page_says_why_a_figure_depends_on_the_model(monkeypatch):
    # the reason is read from each update's jaxpr: an update with matrix products (Muon's Newton-Schulz
    # iterations) multiplies matrices; one without (Adafactor's factored moments) reduces per tensor
    from xla_cost.study.pages import optimizers as page

    per_parameter = {("a", "sgd"): 2, ("b", "sgd"): 2, ("a", "adafactor"): 19, ("b", "adafactor"): 17,
                     ("a", "muon"): 2626, ("b", "muon"): 2016}
    runs = {key: {"update_flops": flops * 100, "parameters": 100} for key, flops in per_parameter.items()}
    breakdown = {name: page.UpdateBreakdown(name, "a", 100, flops, {}) for name, flops in (
        ("sgd", {"mul": 100, "add": 100}), ("adafactor", {"mul": 900, "reduce_sum": 500}),
        ("muon", {page.PRODUCT: 255_400, "mul": 1200}))}
    monkeypatch.setattr(page, "optimizer_runs", lambda data: runs)
    monkeypatch.setattr(page, "update_breakdown", lambda data: breakdown)
    same, reduced, multiplied = page._optimizer_spread_text(None, ("a", "b"), ("sgd", "adafactor", "muon"))
    assert same.startswith("- `sgd`: the same per parameter")
    assert reduced.startswith("- `adafactor`: the figure depends on the model — per-tensor reductions")
    assert multiplied.startswith("- `muon`: the figure depends on the model — matrix products")


def test_optimizers_page_per_parameter(tiny_pages):
    _, _, out = tiny_pages
    rows = {r["optimizer"]: r for r in _table((out / "optimizers.md").read_text(), "optimizer")}
    # SGD on OneNet: 2 * P FLOP over P = F.mlp_params(1) parameters
    assert rows["sgd"]["OneNet FLOP / param"] == units.sig(SGD_FLOPS_PER_PARAM * F.mlp_params(1) / F.mlp_params(1))
    assert rows["sgd"]["seed 001"] == "2" and rows["adam"]["seed 001"] == "~18"


def test_index_names_versions_and_the_command(tiny_pages):
    import jax

    _, _, out = tiny_pages
    index = (out / "index.md").read_text()
    assert COMMAND in index
    assert f"| jax | {jax.__version__} |" in index
    for page in PAGES[1:]:
        assert f"]({page}.md)" in index


def test_step_time_page_from_a_timing_file(tmp_path):
    # Forward 0.2 s, backward 0.6 s (grad 0.8 s), update 0.2 s: shares 20/60/20 of
    # their 1.0 s sum; backward/forward time 3.0.
    data = tmp_path / "data"
    data.mkdir()
    fields = ["device", "jax_version", "date", "model", "config", "batch", "dtype", "optimizer", "parameters",
              "phase", "flops", "median_s", "share", "mfu", "roofline_s", "bound", "backward_to_forward_time",
              "backward_to_forward_flops", "peak_flops_per_s", "peak_bandwidth", "peak_source", "skipped"]
    seconds = {"forward": 0.2, "backward": 0.6, "grad": 0.8, "update": 0.2, "train_step": 1.0}
    with open(data / "timing_testgpu_2026-01-01.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for phase, s in seconds.items():
            writer.writerow({
                "device": "TestGPU", "jax_version": "0", "date": "2026-01-01", "model": "resnet50", "config": "",
                "batch": 32, "dtype": "float32", "optimizer": "sgd", "parameters": 1, "phase": phase,
                "flops": 1, "median_s": s, "share": s / 1.0 if phase in ("forward", "backward", "update") else "",
                "mfu": 0.5, "roofline_s": s / 2, "bound": "compute", "backward_to_forward_time": 0.6 / 0.2,
                "backward_to_forward_flops": 2.0, "peak_flops_per_s": 1e15, "peak_bandwidth": 1e12,
                "peak_source": "test", "skipped": "",
            })
    paths = write_report("step-time", tmp_path / "out", store=tmp_path / "s.sqlite", jobs=0, plan=TINY,
                         data_dir=data)
    page = (tmp_path / "out" / "step-time.md").read_text()
    row = _table(page, "case")[0]
    assert (row["forward"], row["backward"], row["update"]) == ("20%", "60%", "20%")
    assert row["bwd/fwd time"] == "3.00" and row["time / roofline"] == "2.00"
    assert "timing_testgpu_2026-01-01.csv" in page and "This is CPU data" not in page
    assert sum(p.suffix == ".png" for p in paths) == 3


def test_single_model_page(tmp_path):
    b = 2
    report = xla_cost.analyze(build_model("one_net"), example_inputs("one_net", b), optimizer="sgd",
                              per_layer=True, name="one_net")
    paths = write_report(report, tmp_path / "out")
    assert [p.relative_to(tmp_path / "out").as_posix() for p in paths] == ["figures/one_net-layers.png", "one_net.md"]
    assert paths[0].read_bytes().startswith(PNG_MAGIC)
    page = paths[1].read_text()
    phases = {r["phase"]: r for r in _table(page, "phase")}
    for phase in xla_cost.PHASES:  # the report's own figures, exact
        assert phases[phase]["FLOP"].rstrip(" *") == f"{report.phases[phase].flops:,}"
        assert phases[phase]["jaxpr FLOP"] == f"{report.phases[phase].jaxpr_flops:,}"
    # and the closed forms: forward (layers, ReLUs, loss), SGD's 2 FLOP per parameter
    assert phases["forward"]["jaxpr FLOP"] == f"{F.mlp_forward_phase(b, 1):,}"
    assert phases["update"]["FLOP"] == f"{SGD_FLOPS_PER_PARAM * F.mlp_params(1):,}"
    layers = {r["layer"]: r for r in _table(page, "layer")}
    assert layers["`fc2`"]["forward FLOP"] == f"{F.dense_flops(b, 4096, 128):,}"
    assert layers["`fc2`"]["update FLOP"] == f"{SGD_FLOPS_PER_PARAM * (4096 * 128 + 128):,}"
    assert "](figures/one_net-layers.png)" in page


def test_single_model_page_needs_layers(tmp_path):
    report = xla_cost.analyze(build_model("one_net"), example_inputs("one_net", 1), optimizer="sgd",
                              counter="jaxpr")
    with pytest.raises(xla_cost.InputError, match="per_layer=True"):
        write_report(report, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_model_page(tmp_path, capsys):
    b = 4
    out = tmp_path / "out"
    code = main(["report", "--model", "tests.custom_models:NnxMLP", "--input-shape", f"{b},{D_IN}",
                 "--optimizer", "sgd", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert (out / "NnxMLP.md").exists() and (out / "figures" / "NnxMLP-layers.png").read_bytes().startswith(PNG_MAGIC)
    assert str(out / "NnxMLP.md") in stdout
    layers = {r["layer"]: r for r in _table((out / "NnxMLP.md").read_text(), "layer")}
    # fc2: D_HIDDEN -> D_HIDDEN, matmul and bias; SGD 2 FLOP per parameter
    assert layers["`fc2`"]["forward FLOP"] == f"{F.dense_flops(b, D_HIDDEN, D_HIDDEN):,}"
    assert layers["`fc3`"]["update FLOP"] == f"{SGD_FLOPS_PER_PARAM * (D_HIDDEN * D_OUT + D_OUT):,}"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["report", "optimizer"], "Did you mean `optimizers`?"),
        (["report", "zoo", "--model", "one_net"], "page names or --model, not both"),
        (["report", "--input-shape", "2,1"], "--input-shape only with --model"),
        (["report", "zoo", "--jobs", "-1"], "jobs a number of worker processes"),
    ],
)
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, expected):
    out = tmp_path / "out"
    code = main([*argv, "--out", str(out), "--store", str(tmp_path / "s.sqlite")]
                if "--model" not in argv else [*argv, "--out", str(out)])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("xla-cost: error: ") and expected in err
    assert not out.exists()


def test_out_naming_a_file_is_refused(tmp_path):
    target = tmp_path / "reports"
    target.write_text("not a directory")
    with pytest.raises(xla_cost.InputError, match="a file"):
        write_report("index", target, store=tmp_path / "s.sqlite", jobs=0, plan=TINY)
    assert target.read_text() == "not a directory"


def test_plan_checked_before_anything_runs(tmp_path):
    with pytest.raises(xla_cost.InputError, match="layer_batch"):
        write_report("backward-forward-ratio", tmp_path / "out", store=tmp_path / "s.sqlite", jobs=0,
                     plan=ReportPlan(batch_sizes=(1, 2), layer_batch=64))
    assert not (tmp_path / "out").exists()


def test_formatting_is_fixed_digits():
    assert units.sig(1234.5678) == "1,235"
    assert units.sig(0.00123456) == "0.001235"
    assert units.si(78_920_286_208) == "78.92 G"
    assert units.si(2580) == "2.580 k"
    assert units.ratio(1.0008583) == "1.001"


def test_scaling_page_prices_the_sharded_steps(tiny_pages):
    _, _, out = tiny_pages
    page = (out / "scaling.md").read_text()
    rows = {r["devices"]: r for r in _table(page, "devices")}
    assert list(rows) == ["1", "2", "4"]
    assert rows["1"]["ring speed-up"] == "1.000" and rows["1"]["collective bytes / device"] == "0B"
    # data parallel: the gradient all-reduce moves the float32 parameters, 4 bytes each
    # (F.mlp_params(1) of OneNet), and the loss; within 1% at any device count
    for k in ("2", "4"):
        moved = float(units.si(4 * F.mlp_params(1)).split()[0])
        shown = float(rows[k]["collective bytes / device"].split()[0])
        assert shown == pytest.approx(moved, rel=0.01)
    assert "## Seed 004's 1.3× from doubling the GPUs" in page
    assert f"M = {2 / 1.3 - 1:.3f} C" in page  # weak scaling: 2C / (C + M) = 1.3
    assert f"M = {(1 - 1.3 / 2) / (1.3 - 1):.3f} C" in page  # strong: (C + M) / (C/2 + M) = 1.3


def test_memory_page_breaks_the_step_down(tiny_pages):
    _, _, out = tiny_pages
    page = (out / "memory.md").read_text()
    rows = {r["batch"]: r for r in _table(page, "batch")}
    assert list(rows) == ["1", "2"]
    # OneNet with Adam in float32: parameters and gradients 4 bytes each, Adam's mu and nu 8
    # bytes per parameter plus its int32 step count (F.mlp_params(1) parameters)
    p = F.mlp_params(1)
    assert rows["2"]["parameters"] == memory.gb(4 * p) == rows["2"]["gradients"]
    assert rows["2"]["optimizer state"] == memory.gb(8 * p + 4)
    policies = [r["policy"] for r in _table(page, "policy")]
    assert policies == [f"`{name}`" for name in ("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable")]
    # at XLA's peak every argument is live: parameters, Adam's state and the batch
    # (OneNet's input is B x 1 float32, its targets B int32)
    at_peak = {r["batch"]: r for r in _table(page.split("At XLA's peak")[1], "batch")}
    assert at_peak["2"]["arguments"] == memory.gb(4 * p + 8 * p + 4 + 2 * 4 + 2 * 4)
    check = _table(page, "model")[0]
    assert check["model"] == "one_net" and check["shape"] == "batch 2"
    assert 0.9 <= float(check["at the peak / peak"]) <= 1.1


READING_ORDER = ("index", "backward-forward-ratio", "optimizers", "step-time", "zoo", "scaling", "validation", "memory",
                 "targets", "claims")


def test_pages_are_the_page_modules_in_reading_order():
    import pkgutil

    files = sorted(m.name for m in pkgutil.iter_modules(pages.__path__) if not m.name.startswith("_"))
    assert sorted(m.__name__.rpartition(".")[2] for m in pages.MODULES) == files  # every module a page
    assert PAGES == READING_ORDER
    assert [m.ORDER for m in pages.MODULES] == sorted(m.ORDER for m in pages.MODULES)
    for module in pages.MODULES:  # each declares its page: NAME (its file name), TITLE, ORDER, build
        assert module.NAME == module.__name__.rpartition(".")[2].replace("_", "-")
        assert isinstance(module.TITLE, str) and module.TITLE
        assert isinstance(module.ORDER, int) and callable(module.build)
        assert pages.TITLES[module.NAME] == module.TITLE and pages.BUILDERS[module.NAME] is module.build


def test_index_lists_every_page_by_its_title(tiny_pages):
    _, _, out = tiny_pages
    rows = _table((out / "index.md").read_text(), "page")
    assert [(r["page"], r["what it shows"]) for r in rows] == [
        (f"[{m.NAME}]({m.NAME}.md)", m.TITLE) for m in pages.MODULES if m.NAME != "index"
    ]


def _page_module(folder: pathlib.Path, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(body)


def test_a_new_module_in_the_pages_folder_is_a_new_page(tmp_path, monkeypatch):
    import sys

    # a page between step-time and zoo, declared as every page is
    _page_module(tmp_path, "extra_page", 'NAME = "extra-page"\nTITLE = "An extra page"\nORDER = 35\n'
                 'def build(data):\n    return {"extra-page.md": b"# Extra\\n"}\n')
    monkeypatch.setattr(pages, "__path__", [*pages.__path__, str(tmp_path)])
    try:
        found = [m.NAME for m in pages._discover()]
    finally:
        sys.modules.pop(f"{pages.__name__}.extra_page", None)
    assert found == [*READING_ORDER[:4], "extra-page", *READING_ORDER[4:]]


def test_a_page_module_without_its_declarations_is_refused(tmp_path, monkeypatch):
    import sys

    _page_module(tmp_path, "no_title", 'NAME = "no-title"\nORDER = 35\ndef build(data):\n    return {}\n')
    monkeypatch.setattr(pages, "__path__", [*pages.__path__, str(tmp_path)])
    try:
        with pytest.raises(TypeError, match="declare TITLE"):
            pages._discover()
    finally:
        sys.modules.pop(f"{pages.__name__}.no_title", None)


def test_the_committed_index_is_what_the_command_writes(tmp_path):
    # a seventh user's `xla-cost report index` described the validation page as it was two issues ago: the
    # committed index, regenerated by nobody, said what the README no longer did
    written = write_report("index", tmp_path, store=tmp_path / "s.sqlite", jobs=0, progress=False)
    [page] = [p for p in written if p.name == "index.md"]
    committed = (pathlib.Path(__file__).resolve().parents[2] / "reports" / "index.md").read_text()
    # the pages and what each shows; the environment below them is the machine's that built it (its versions)
    pages = (lambda text: text.split("## Environment")[0])
    assert pages(page.read_text()) == pages(committed) and "| [validation](validation.md) |" in pages(committed)
