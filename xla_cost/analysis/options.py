"""`AnalysisOptions`: how `xla_cost.analyze` counts a step, checked in one place.

The command line's arguments reach `AnalysisOptions.check` unchanged, and
sweeps check their grids with it before anything runs.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

from xla_cost.choices import COUNTERS, DTYPES
from xla_cost.compiled import targets
from xla_cost.compiled.store import Store
from xla_cost.compiled.targets import CompileTarget
from xla_cost.count.attribution import check_depth
from xla_cost.errors import InputError
from xla_cost.timemodel import devices

__all__ = ["ATTENTION_CONVENTIONS", "UNFUSED_PHASES", "AnalysisOptions", "check_options", "check_target",
           "check_unfused"]

ATTENTION_CONVENTIONS: tuple[str, ...] = ("full", "causal")
"""How ``model_flops`` counts the attention's score and value products: every
T x T pair as computed (PaLM, Appendix B: 6N + 12 L H Q T per token), or half
of those of an attention a causal mask masks (MaxText's convention;
`xla_cost.count.attention_flow.attention_masks`)."""


@dataclasses.dataclass(frozen=True)
class AnalysisOptions:
    """How a step is counted, recorded and cached (keywords of `xla_cost.analyze`).

    Attributes:
      per_layer: also attribute forward, backward and update FLOP to each module.
      depth: with ``per_layer``: None for one row per module that holds
        parameters, N to merge rows to the first N components of their path.
      counter: ``xla`` (compile; XLA's figures, corrected for loops) or
        ``jaxpr`` (count the jaxprs alone), `xla_cost.COUNTERS`.
      timed: also run the step on real arrays and time it.
      exact_train_step: compile the train step as a program of its own.
      memory: also break the step's memory down per device.
      attention_flops: `ATTENTION_CONVENTIONS`: ``full`` or ``causal``.
      peak_tflops, peak_bandwidth: the device's peak FLOP/s (TFLOP/s) and
        memory bandwidth (bytes/s) for MFU and the roofline, replacing the
        device registry's (or the CPU measurement); only with ``timed``.
      name: the model's name in the report (default: its class name).
      config: the model's keyword arguments, recorded in the report.
      dtype: the computation dtype to record (default: the output's dtype).
      compilation_cache: keep compiled programs in JAX's persistent cache.
      cache: look the whole analysis up in the results store and store it
        there: True for the default store, a path, or a `xla_cost.Store`;
        refused with ``timed`` (a timed analysis is never cached).
      target: compile for this device instead of the default backend
        (`xla_cost.timemodel.devices.target`: ``h100``, ``a100-80gb``,
        ``tpu-v5e:2x2``, ...): its own compiler, deviceless; None: the default
        backend. Needs the platform's extra (``xla-cost[gpu]``, ``xla-cost[tpu]``);
        not with ``timed`` (the step runs on this machine's device) or
        ``counter="jaxpr"`` (nothing is compiled).
      compare_cpu: with ``target``, also analyse the step for the default
        backend (the CPU proxy) and keep it beside the target's
        (`xla_cost.Report.cpu`, `xla_cost.compare`); only with a target.
      unfused: the phases (``forward``, ``grad``, ``update``, ``train_step``)
        whose programs are compiled with XLA's fusion passes off
        (`xla_cost.compiled.xla.EAGER_OPTIONS`), every operation a kernel of
        its own, as an eager framework (PyTorch without a compiler) launches
        them; only with a target (its kernel list is what is priced). Empty
        (the default): every program as XLA fuses it.
    """

    per_layer: bool = False
    depth: int | None = None
    counter: str = "xla"
    timed: bool = False
    exact_train_step: bool = False
    memory: bool = False
    attention_flops: str = "full"
    peak_tflops: float | None = None
    peak_bandwidth: float | None = None
    name: str | None = None
    config: Mapping[str, Any] | None = None
    dtype: str | None = None
    compilation_cache: bool = True
    cache: bool | str | os.PathLike[str] | Store = False
    target: str | None = None
    compare_cpu: bool = False
    unfused: tuple[str, ...] = ()

    @property
    def compiled(self) -> bool:
        """Whether the programs are compiled (``counter="xla"``)."""
        return self.counter == "xla"

    @property
    def cached(self) -> bool:
        """Whether the analysis goes through the results store (never a timed one: `check` refuses it)."""
        return self.cache is not False and self.cache is not None and not self.timed

    def check(self) -> None:
        """Raises `InputError` for an option out of its range (`check_options`)."""
        check_options(depth=self.depth, dtype=self.dtype, peak_tflops=self.peak_tflops,
                      peak_bandwidth=self.peak_bandwidth, counter=self.counter)
        for flag, value in (("peak_tflops", self.peak_tflops), ("peak_bandwidth", self.peak_bandwidth)):
            if value is not None and not self.timed:  # the peak prices the measured time alone: ignored untimed
                option = "--" + flag.replace("_", "-")
                raise InputError(f"{flag} ({option}) only with timed=True (--time): it prices the measured time "
                                 "(MFU, the roofline)", f"{flag}={value!r} without it",
                                 f"Add timed=True (--time), or drop {flag} ({option}).")
        if self.timed and self.cache is not False and self.cache is not None:  # a measured time is this run's
            raise InputError("cache (--cache) only without timed=True (--time): a timed analysis is never cached "
                             "(its measured time is this run's, on this machine)",
                             f"cache={self.cache!r} (--cache) with timed=True (--time)",
                             "Drop cache= (--cache) to time the step, or timed=True (--time) to cache the counts.")
        if self.target is not None:
            check_target(self.target, timed=self.timed, counter=self.counter)
        if self.exact_train_step and self.counter != "xla":  # it compiles the step whole: nothing to compile
            raise InputError("exact_train_step (--exact-train-step) with counter='xla': it compiles the train "
                             "step as one program", f"exact_train_step=True with counter={self.counter!r}",
                             "Drop --counter jaxpr, or --exact-train-step (the jaxpr's train step is exact).")
        if self.compare_cpu and self.target is None:
            raise InputError("compare_cpu (--compare-cpu) only with a target (--target): it sets the CPU proxy's "
                             "program beside the target's", f"compare_cpu={self.compare_cpu!r} without a target",
                             "Add target='h100' (--target h100), or drop compare_cpu (--compare-cpu).")
        if self.unfused:
            check_unfused(self.unfused, self.target)
        if self.attention_flops not in ATTENTION_CONVENTIONS:
            raise InputError(f"attention_flops one of {', '.join(ATTENTION_CONVENTIONS)}",
                             repr(self.attention_flops),
                             "Use full (every pair, as computed) or causal (half, for a causal mask).")


UNFUSED_PHASES: tuple[str, ...] = ("forward", "grad", "update", "train_step")
"""The phases whose programs `AnalysisOptions.unfused` may name."""


def check_unfused(unfused: Any, target: Any) -> None:
    """Refuses an ``unfused`` that is not a tuple of `UNFUSED_PHASES`, or one without a target.

    Raises:
      InputError: in one line, what was expected and how to fix it.
    """
    if not isinstance(unfused, tuple) or any(p not in UNFUSED_PHASES for p in unfused):
        raise InputError(f"unfused a tuple of phases among {', '.join(UNFUSED_PHASES)}", repr(unfused),
                         "Pass e.g. unfused=('forward', 'grad').")
    if target is None:
        raise InputError("unfused (phases compiled with XLA's fusion passes off) only with a target: their kernels "
                         "are priced from the target's kernel list", f"unfused={unfused!r} without a target",
                         "Add target='v100-32gb' (or another device), or drop unfused.")


def check_target(target: Any, *, timed: bool = False, counter: str = "xla") -> CompileTarget:
    """The compile target ``target`` names, with its compiler installed (`xla_cost.compiled.targets`).

    Raises:
      InputError: an unknown target, its platform's extra not installed, or a
        target with ``timed`` or ``counter="jaxpr"``.
    """
    found = devices.target(target)
    if timed:
        raise InputError("target (--target) without timed=True (--time): the step is timed on this machine's "
                         "device, the target only compiles", f"target={target!r} with timed=True",
                         "Drop timed=True (--time) to analyse for the target, or the target to time the step here.")
    if counter != "xla":
        raise InputError("target (--target) with counter='xla': the target's compiler builds the program",
                         f"target={target!r} with counter={counter!r}", "Drop --counter jaxpr, or the target.")
    targets.require_plugin(found.platform)
    return found


def check_options(
    *, depth: Any = None, dtype: Any = None, peak_tflops: Any = None,
    peak_bandwidth: Any = None, counter: Any = "xla",
) -> None:
    """The option checks of `xla_cost.analyze`, the one place they are made
    (the CLI's arguments and a sweep's grid reach them unchanged).

    Raises:
      InputError: an option out of its range, saying what was expected.
    """
    if counter not in COUNTERS:
        raise InputError(
            f"counter one of {', '.join(COUNTERS)}", repr(counter),
            "Use counter='xla' (compile) or 'jaxpr' (--counter jaxpr).",
        )
    check_depth(depth)
    if dtype is not None:
        import jax.numpy as jnp  # jax loads only when a dtype is given to check

        try:
            ok = isinstance(dtype, str) and (dtype in DTYPES or jnp.issubdtype(jnp.dtype(dtype), jnp.inexact))
        except TypeError:
            ok = False
        if not ok:
            raise InputError(
                "dtype as the name of a floating-point dtype (float32, bfloat16, float16; the zoo's float8)",
                repr(dtype), "Use e.g. dtype='bfloat16' (--dtype bfloat16).",
            )
    for flag, value in (("peak_tflops", peak_tflops), ("peak_bandwidth", peak_bandwidth)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or value == math.inf:
            example = 989 if flag == "peak_tflops" else 3.35e12
            raise InputError(
                f"{flag} a positive number", repr(value),
                f"Give the device's peak, e.g. {flag}={example} (--{flag.replace('_', '-')} {example}).",
            )
