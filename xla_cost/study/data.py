"""What the study pages show, collected once each, on demand: `StudyData`.

A page reads the sweeps several pages share from `StudyData`'s properties
(seed 001's nets, DeeperConvNet, the ResNets, the transformers, the
optimizers, the zoo, seed 004's sharded steps, the committed timings). What
only one page needs it collects in its own module, through the same cache:
`StudyData.sweep` is memoized on its arguments, and a function decorated with
`collected` runs once per `StudyData`::

    @collected
    def my_curves(data: StudyData) -> SweepResult:
        return data.sweep(data.plan.zoo, batch_sizes=[1, 8])

Sweeps and analyses go through the results store (`xla_cost.sweep`, a
`RunConfig`'s ``run``); committed measurements are read from ``data_dir``.
Nothing measured while the pages are built reaches the data (see
`xla_cost.study.write`).
"""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from xla_cost.compiled.store import environment
from xla_cost.runs.configs import RunConfig
from xla_cost.study.plan import DATA_PATTERNS, ReportPlan

if TYPE_CHECKING:
    import pandas as pd

    from xla_cost.compiled.store import Store
    from xla_cost.runs.sweeps import SweepResult

__all__ = ["StudyData", "collected"]

T = TypeVar("T")


def _frozen(value: Any) -> Hashable:
    """``value`` as a key: lists and tuples as tuples, mappings as sorted items."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_frozen(v) for v in value)
    return value


class StudyData:
    """Everything the pages show, each piece collected once, on demand.

    Args:
      store: the results store the sweeps and analyses go through.
      plan: the resolved plan (`ReportPlan.resolved`).
      data_dir: the committed measurements (None: there are none).
      jobs: worker processes for the sweeps (None: one per core; 0: in this process).
      progress: a progress bar on stderr while sweeps run (None: when stderr is a terminal).
    """

    def __init__(
        self, store: Store, plan: ReportPlan, data_dir: pathlib.Path | None, jobs: int | None,
        progress: bool | None,
    ) -> None:
        self.store = store
        self.plan = plan
        self.data_dir = data_dir
        self.jobs = jobs
        self.progress = progress
        self._collected: dict[Hashable, Any] = {}

    # generic collection ------------------------------------------------------

    def collect(self, function: Callable[[StudyData], T]) -> T:
        """``function(self)``, computed once per `StudyData` (`collected` is the decorator form)."""
        if function not in self._collected:
            self._collected[function] = function(self)
        return self._collected[function]

    def sweep(self, models: Sequence[str], **kwargs: Any) -> SweepResult:
        """`xla_cost.sweep` of ``models`` through the store, once per distinct
        arguments; an empty sweep for no models."""
        key = ("sweep", tuple(models), _frozen(kwargs))
        if key not in self._collected:
            self._collected[key] = self._sweep(models, **kwargs)
        return self._collected[key]

    def _sweep(self, models: Sequence[str], **kwargs: Any) -> SweepResult:
        from xla_cost.runs.sweeps import SweepResult, sweep

        if not models:
            import pandas as pd

            empty = pd.DataFrame(columns=["model", "batch_size", "optimizer", "status"])
            return SweepResult(empty, pd.DataFrame(columns=["model", "batch_size", "path"]))
        # seed 001's figures are SGD's: named here, not left to the default optimizer (adam)
        kwargs = {"optimizers": ["sgd"], **kwargs}
        return sweep(list(models), store=self.store, jobs=self.jobs, progress=self.progress, **kwargs)

    def analyse(self, config: RunConfig, **options: Any) -> Any:
        """The report of one configuration, through the store (``options``: its
        ``run``'s, e.g. ``memory=True``)."""
        return config.canonical().run(cache=self.store, **options)

    # sweeps several pages read ----------------------------------------------

    @functools.cached_property
    def seed_batch(self) -> SweepResult:
        """Seed 001's nets at every batch size, per layer."""
        return self.sweep(self.plan.seed_nets, batch_sizes=self.plan.batch_sizes, per_layer=True)

    @functools.cached_property
    def depth(self) -> SweepResult:
        """DeeperConvNet at every depth, per layer."""
        if not self.plan.depths:
            return self.sweep([])
        return self.sweep(
            ["deeper_conv_net"], batch_sizes=[self.plan.depth_batch],
            settings={"depth": list(self.plan.depths)}, per_layer=True,
        )

    @functools.cached_property
    def resnets(self) -> SweepResult:
        return self.sweep(self.plan.resnets, batch_sizes=self.plan.resnet_batches)

    @functools.cached_property
    def transformers(self) -> SweepResult:
        return self.sweep(self.plan.transformers, batch_sizes=[1])

    @functools.cached_property
    def optimizers(self) -> SweepResult:
        """Every optimizer on each of ``optimizer_models``, batch 1 (the update
        does not depend on the batch)."""
        return self.sweep(self.plan.optimizer_models, batch_sizes=[1], optimizers=self.plan.optimizers)

    @functools.cached_property
    def zoo(self) -> SweepResult:
        return self.sweep(self.plan.zoo, batch_sizes=[1])

    @functools.cached_property
    def seed004(self) -> dict[str, Any] | None:
        """Seed 004's settings analysed: the 1 -> 2 device doubling at
        ``seed004_batch`` per device, as sharded reports (priced by the page),
        and the fixed-batch doubling of Jia et al. as the validation's cases
        price it (`xla_cost.study.cases.jia_setup`, its committed programs:
        one figure for one step on every page; None where the plan's devices
        and batch are not Jia et al.'s, or no programs are committed)."""
        from xla_cost.parallel.sharding import simulate_devices

        model = self.plan.seed004_model
        if not model:
            return None
        small, large = self.plan.seed004_devices
        simulate_devices(2)

        def run(batch: int, devices: int) -> Any:
            return self.analyse(RunConfig(model, batch, {}, optimizer="sgd",
                                          mesh={"data": devices} if devices > 1 else {}))

        batch, total = self.plan.seed004_batch, self.plan.seed004_global_batch
        from xla_cost.study.cases import jia_setup
        from xla_cost.study.validation import programs_path, read_programs

        found: dict[str, Any] = {"small": None, "large": None, "setups": None}
        path = programs_path(self.data_dir) if self.data_dir is not None else None
        if (small, large, total) == (1024, 2048, 65536) and path is not None and path.is_file():
            setups = {devices: jia_setup(devices) for devices in (small, large)}
            programs = read_programs(path)
            if all(setup.key() in programs for setup in setups.values()):
                found = {"small": programs[setups[small].key()], "large": programs[setups[large].key()],
                         "setups": setups}
        return {
            "model": model, "batch": batch, "global_batch": total, "devices": (small, large),
            "one": run(batch, 1), "two": run(2 * batch, 2), **found,
        }

    # committed data ---------------------------------------------------------

    def files(self, kind: str) -> list[pathlib.Path]:
        """The committed data files of ``kind`` (a key of `DATA_PATTERNS`), by name."""
        if self.data_dir is None or not self.data_dir.is_dir():
            return []
        return sorted(self.data_dir.glob(DATA_PATTERNS[kind]))

    def latest(self, kind: str) -> tuple[pathlib.Path, pd.DataFrame] | None:
        """The last data file of ``kind`` by name (the newest date) and its rows."""
        files = self.files(kind)
        return (files[-1], self._read(files[-1])) if files else None

    @staticmethod
    def _read(path: pathlib.Path) -> pd.DataFrame:
        import pandas as pd

        return pd.read_csv(path)

    @functools.cached_property
    def timing(self) -> list[tuple[pathlib.Path, pd.DataFrame]]:
        """Every committed timing CSV (``benchmarks/time_zoo.py``), by name."""
        return [(path, self._read(path)) for path in self.files("timing")]

    @functools.cached_property
    def environment(self) -> dict[str, str]:
        import matplotlib

        return {**environment(), "matplotlib": matplotlib.__version__}


def collected(function: Callable[[StudyData], T]) -> Callable[[StudyData], T]:
    """``function(data)`` computed once per `StudyData`, through its cache: a
    page collects what only it needs in its own module."""

    @functools.wraps(function)
    def once(data: StudyData) -> T:
        return data.collect(function)

    return once
