"""Shared fixtures: strict JAX, and a cache so each configuration compiles once."""

from __future__ import annotations

import functools
import os
import pathlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# No persistent caches while testing: tests that stand in for a backend (a
# patched cost_analysis) must see it run, and nothing a test patches may reach
# the user's cache. Tests of the caches run child processes with their own. A module that patches
# nothing of the compile may turn them on for itself, in a directory the run's opted-in modules share (`module_caches`).
os.environ["XLA_COST_NO_CACHE"] = "1"

import xla_cost  # noqa: E402  (first: jax's accelerator plugins start quietly, xla_cost.plugins)

import jax  # noqa: E402
import pytest  # noqa: E402

# Rank promotion hides shape bugs; make it an error while testing. (Strict dtype
# promotion is not usable: optax's Adam adds a Python float to an int32 count.)
jax.config.update("jax_numpy_rank_promotion", "raise")
# Eight simulated CPU devices for the sharded tests (tests/parallel/test_sharding.py), set
# before any backend starts, as JAX's own test suite does. Unsharded analyses
# use one device and are unchanged by it.
xla_cost_devices = 8
jax.config.update("jax_num_cpu_devices", xla_cost_devices)

from xla_cost.zoo import build_model, example_inputs  # noqa: E402


@functools.lru_cache(maxsize=None)
def _zoo_report(name: str, batch: int, optimizer: str, per_layer: bool, config: tuple) -> xla_cost.Report:
    cfg = dict(config)
    return xla_cost.analyze(
        build_model(name, **cfg),
        example_inputs(name, batch, **cfg),
        optimizer=optimizer,
        per_layer=per_layer,
        name=name,
        config=cfg,
    )


@pytest.fixture(scope="session")
def zoo_report():
    """``zoo_report(name, batch, optimizer='sgd', per_layer=True, **config)``, cached."""

    def get(name: str, batch: int, optimizer: str = "sgd", per_layer: bool = True, **config):
        return _zoo_report(name, batch, optimizer, per_layer, tuple(sorted(config.items())))

    return get


def _shared_cache_dir(factory: pytest.TempPathFactory) -> str:
    """One directory for the whole run, shared by pytest-xdist's workers (their base directories,
    ``popen-gwN``, sit side by side in the run's own): xla_cost's caches are made for several
    processes at once (``sweep --jobs``: files written whole and renamed into place)."""
    base = factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / "xla_cost_cache"
    path.mkdir(exist_ok=True)
    return str(path)


@pytest.fixture(scope="session")
def shared_cache_dir(tmp_path_factory) -> pathlib.Path:
    """The run's shared directory of xla_cost's caches (`_shared_cache_dir`), for the jobs a module
    runs in processes of their own (tests/test_docs.py)."""
    return pathlib.Path(_shared_cache_dir(tmp_path_factory))


@pytest.fixture(scope="module")
def module_caches(tmp_path_factory):
    """xla_cost's own caches on for one module, as a user's analyses have them by default
    (`xla_cost.compiled.xla.use_compilation_cache`), in one directory that every module that opts
    in shares for the run (`_shared_cache_dir`): a program analysed before, in this module or in
    another (the same forward and update beside two gradients, remat or not; a shallower stack's;
    the same zoo model at the same shapes), is read from the analyses cache instead of compiled
    again, a target's kernels are reused by XLA's kernel cache (ptxas ran again for every GPU
    compile), a whole analysis asked again is read from the report cache. Nothing reaches the
    modules that do not opt in, nor the user's cache. For modules that patch nothing of the compile
    or its analyses (a patched backend must see its compile run; a patched rule would be read back
    from another module's entries): opt in with ``pytestmark = pytest.mark.usefixtures("module_caches")``."""
    from xla_cost.compiled import xla

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(xla.NO_CACHE_ENV, raising=False)
        patch.setenv(xla.CACHE_DIR_ENV, _shared_cache_dir(tmp_path_factory))
        try:
            yield
        finally:
            xla.use_compilation_cache(False)  # off again before the next module's first analysis


# Timing in tests: a step is run and timed to check what the figures are (a split that adds
# up, MFU and HFU in the ratio of their FLOP, a skipped step reported), never how precise they
# are: a few short blocks and at most a second per separate program, instead of a user's
# defaults (blocks of 0.1 s, up to 200 repeats or 10 s per program until the median settles
# within 2%), which on a loaded 2-core machine took most of a timed test's seconds. Tests of
# the measurement loop itself pass their own `TimingOptions`.
from xla_cost.analysis import timing as _timing  # noqa: E402

_timing.time_workload.__kwdefaults__["options"] = _timing.TimingOptions(
    warmup=1, min_repeats=3, max_repeats=20, budget_s=1.0, block_s=0.01, min_blocks=3, max_blocks=5, trace_s=0.05)


# The order the files run in. Under `-n 2` (pytest-xdist, `--dist loadfile`: a file runs whole on
# one worker) a worker that finishes a file takes the next in this order. xdist's own order (the
# files with the most tests first, `--loadscope-reorder`) started the suite's longest files, which
# have few tests each, last: one core worked alone at the end while the other idled. pyproject's
# addopts turn that order off (`--no-loadscope-reorder`) and the files run longest first (the
# longest-processing-time rule): the files below, measured, then the rest as collected.
LONGEST_FILES: tuple[str, ...] = (
    "tests/test_docs.py",  # 101 s
    "tests/analysis/test_targets_zoo.py",  # 65 s
    "tests/analysis/test_memory.py",  # 60 s
    "tests/runs/test_estimate.py",  # 58 s
    "tests/test_doc_figures.py",  # 55 s
    "tests/parallel/test_sharding.py",  # 53 s
    "tests/count/test_coverage.py",  # 51 s
    "tests/study/test_pages.py",  # 46 s
    "tests/compiled/test_scan_bytes.py",  # 43 s
    "tests/runs/test_sweeps.py",  # 39 s
    "tests/step/test_phases.py",  # 38 s
    "tests/cli/test_cli_interrupts.py",  # 35 s
    "tests/study/test_depth.py",  # 33 s
    "tests/count/test_rules.py",  # 29 s
    "tests/study/test_validation.py",  # 29 s
    "tests/cli/test_cli_refused_inputs.py",  # 27 s
    "tests/zoo/test_resnet.py",  # 27 s
    "tests/cli/test_cli_ux.py",  # 27 s
    "tests/cli/test_cli_fourth_user.py",  # 26 s
    "tests/analysis/test_report_cache.py",  # 22 s
    "tests/analysis/test_remat_forms.py",  # 20 s
    "tests/step/test_analyze_repo_steps.py",  # 19 s
    "tests/present/test_terminal_tables.py",  # 17 s
    "tests/runs/test_scan_time.py",  # 17 s
    "tests/compiled/test_targets_cache.py",  # 16 s
    "tests/cli/test_cli_estimate.py",  # 15 s
    "tests/step/test_optimizers.py",  # 15 s
    "tests/compiled/test_fp8.py",  # 14 s
    "tests/analysis/test_timing.py",  # 13 s
    "tests/analysis/test_import_weight.py",  # 13 s
    "tests/runs/test_update_collectives.py",  # 13 s
    "tests/zoo/test_bert_vit.py",  # 12 s
    "tests/cli/test_cli_third_user_output.py",  # 12 s
    "tests/runs/test_fit_target.py",  # 12 s
    "tests/analysis/test_jaxpr_vs_xla.py",  # 12 s
    "tests/analysis/test_step_memory_and_time.py",  # 12 s
    "tests/analysis/test_compare.py",  # 11 s
    "tests/count/test_interpret_loops.py",  # 10 s
    "tests/runs/test_targets_everywhere.py",  # 10 s
)
"""Test files, longest first: the seconds their tests took (setup, call and teardown) in
`pytest -n 2 --durations=0` on 2 cores (3,478 tests in 736 s, 2026-11-30 10:27 UTC, on a machine running
slow: the ResNet-50 analysis that takes 4.8 s on a quiet one took 11.2 s after it; the opted-in modules on
the run's shared caches); every file not listed took under 10 s."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FILES)}
    order: dict[str, int] = {}
    for item in items:
        order.setdefault(item.nodeid.split("::", 1)[0], len(order))
    # a stable sort: each file's tests keep their order
    items.sort(key=lambda item: (rank.get(path := item.nodeid.split("::", 1)[0], len(rank)), order[path]))
