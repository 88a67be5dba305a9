"""Context parallelism's exchange of keys and values, priced against the attention it feeds.

A step whose sequence is split over a ``context`` mesh axis
(`xla_cost.parallel.context`) exchanges one thing its other axes do not:
attention's keys and values, all-gathered over the axis in the forward pass
and their gradients reduce-scattered back (`exchanges`), once per micro-batch.
Its all-reduces over the axis reduce the weights' gradients, as over ``data``.
How much of the exchange blocks a micro-batch depends on the framework
(`exposed`): Llama 3's all-gather runs before the attention it feeds, where
Transformer Engine's ring passes each chunk while the attention of the one
already there computes.
"""

from __future__ import annotations

from typing import Any

from xla_cost.count.attention import FUSED_ATTENTION_CALL
from xla_cost.parallel.mesh import CONTEXT
from xla_cost.timemodel import calibration, kernel_time, schedule

__all__ = ["exchanges", "exposed"]


def exchanges(collective: Any) -> bool:
    """Whether a collective of a step's program (its ``kind`` and mesh ``axes``) is the
    exchange of attention's keys and values over ``context``: any but an all-reduce over it
    (the all-gathers of K and V, the reduce-scatters of their gradients)."""
    kind = collective.kind.replace("_", "-").removesuffix("-start")
    return CONTEXT in collective.axes and kind != "all-reduce"


def exposed(layout: schedule.Layout, seconds: float, grad: Any, device: str, arithmetic: str | None = None,
            bound: bool = False) -> tuple[float, list[str]]:
    """What blocks one micro-batch's slot of the exchange (``seconds`` a micro-batch, priced at
    its collectives' bus bandwidth for their sizes), and notes saying how it was priced.

    Llama 3's all-gather is exposed on the critical path (Dubey et al. 2024, §3.3.2): the whole
    exchange blocks. With `schedule.Layout.overlap_context` (Megatron-Core's ring through
    Transformer Engine: each step's send/recv beside the attention of the chunk already there)
    only ``max(seconds - attention, 0)`` blocks, ``attention`` the micro-batch's fused attention
    kernels of the program ``grad`` priced alone on ``device`` (`kernel_time.price_kernels`); a
    program without them (attention written out, or a bound) hides nothing, and a note says so.
    A ring's ``C - 1`` steps move the bytes the all-gather moves: the same bytes are priced
    either way.
    """
    if seconds <= 0:
        return 0.0, []
    if not layout.overlap_context:
        return seconds, [f"context parallelism: attention's keys and values all-gathered (and their gradients "
                         f"reduce-scattered) over context before the attention they feed, {seconds * 1e3:,.4g} ms a "
                         "micro-batch, blocking"]
    kernels = [k for k in (grad.kernel_list or ()) if k.kind.startswith(FUSED_ATTENTION_CALL)]
    if not kernels or bound:
        return seconds, ["context parallelism overlapped (the layout's overlap_context), but no fused attention "
                         "kernel is priced to hide it behind: its K and V exchange blocks"]
    attention = kernel_time.price_kernels(kernels, device, calibration.constants(), arithmetic).seconds
    left = max(seconds - attention, 0.0)
    return left, [f"context parallelism as a ring beside the attention (the layout's overlap_context): "
                  f"{(seconds - left) * 1e3:,.4g} of its {seconds * 1e3:,.4g} ms a micro-batch of K and V exchange "
                  f"hidden behind {attention * 1e3:,.4g} ms of fused attention kernels"]
