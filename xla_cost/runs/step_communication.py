"""The communication of a priced train step, apart from its compute (`xla_cost.runs.scaling.predict`).

Each function prices one kind of the step's communication on the devices the run lies on
(`xla_cost.timemodel.schedule.run_mesh`) and says how, in words:

* `gradient_reduction`: the gradients reduced in buckets behind the backward pass over ``data``
  and the layout's replicas, or gathered and reduce-scattered as ZeRO-3 runs them over ``fsdp``;
* `overlapped`: what of the tensor-parallel collectives and the pipeline's transfers blocks a
  micro-batch where the layout overlaps them;
* `stage_transfers`: a micro-batch's activations to the next pipeline stage and their gradient back;
* `update_collectives`: the update program's own collectives, once a step, blocking the update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xla_cost.parallel import placement
from xla_cost.runs.layouts import fsdp_units
from xla_cost.timemodel import comm, schedule
from xla_cost.timemodel.hardware import Hardware

__all__ = ["PIECES", "UPDATE_PART", "UPDATE_PART_NOTE", "backward_share", "gradient_reduction",
           "made_through_backward", "overlapped", "stage_transfers", "update_collectives"]


UPDATE_PART = "update_collectives"
"""The step's part (`xla_cost.runs.priced.StepEstimate.parts`) of the update program's own collectives."""

UPDATE_PART_NOTE = ("the update program's own collectives (Muon's gathers under fsdp, a global norm's sums) priced "
                    "once a step after the gradients, blocking the update: a bound, as XLA may overlap some with "
                    "the update's work")
"""What `UPDATE_PART` is, said beside a run's figures where a step has it."""


def update_collectives(collectives: Sequence[Any], mesh: Sequence[tuple[str, int]], cluster: comm.Cluster
                       ) -> tuple[float, tuple[comm.CollectiveTime, ...], list[str]]:
    """(seconds, times, notes) of the update program's own collectives, each where its group lies on
    the run's devices (`comm.placed_time`), all of them blocking the update: it runs once a step,
    after the gradients, and needs them (Muon under ``fsdp``: each Newton-Schulz iterate and its Gram
    matrix all-gathered every iteration, since XLA's partitioner shards the products; a global-norm
    clip's partial sums all-reduced). A bound on their time: XLA may overlap one matrix's gathers with
    another's products. Their bytes are the parameters' dtype's, as the program moves them."""
    if not collectives:
        return 0.0, (), []
    seconds, times, notes, _ = comm.placed_time(tuple(collectives), mesh, cluster)
    moved = sum(c.total_bytes or 0 for c in collectives)
    notes = [*notes, f"the update program's {len(collectives)} collective(s) ({moved / 1e9:.3g} GB a step per "
             f"device) priced after the gradients, blocking the update: {seconds * 1e3:.3g} ms, a bound (XLA may "
             "overlap some with the update's own work)"]
    return seconds, times, notes


def stage_transfers(layout: schedule.Layout, devices: int, mesh: Sequence[tuple[str, int]], cluster: comm.Cluster
                    ) -> tuple[float, tuple[comm.CollectiveTime, ...], str]:
    """Seconds a micro-batch's pipeline transfers take on the slowest stage, the transfers as
    collectives (every micro-batch's), and how they were priced, in words ("" without a pipeline).

    Each of the stage's ``devices`` sends its share of the activations, ``stage_bytes / devices``
    (Megatron's scatter/gather), to the next stage and receives its gradient back; with ``v``
    chunks a stage a micro-batch crosses the stage boundaries ``v`` times (Narayanan et al. 2021,
    2.2): ``2 v`` send/recvs a micro-batch, each `xla_cost.timemodel.comm.Cluster.time`'s
    ``collective-permute`` between two devices, within a node or across two
    (`xla_cost.parallel.placement.crosses_nodes`). On a node with measured NCCL curves that is
    ``S / busbw(S)`` at its send/recv bus bandwidth (`xla_cost.timemodel.bus.Fabric.time`: within a
    node the curve's, across nodes no more than the device's share of its node's adapters at the
    measured efficiency); elsewhere the alpha-beta model, ``S / B + alpha`` at the link's line rate.
    """
    if layout.pipeline <= 1:
        return 0.0, (), ""
    share = layout.stage_bytes / devices
    crosses = placement.crosses_nodes(mesh, "pipeline", cluster.node_size)
    once, link = cluster.time("collective-permute", share, 2,
                              where=placement.Span(2, 1) if crosses else placement.Span(1, 2))
    per_micro_batch = 2 * layout.chunks
    sent = comm.CollectiveTime("collective-permute", int(round(share)), 2, per_micro_batch * layout.micro_batches,
                               link, per_micro_batch * layout.micro_batches * once)
    where = "across nodes" if crosses else "within a node"
    how = (f"at the send/recv bus bandwidth NCCL measured ({share / once / 1e9:,.1f} GB/s at that size)"
           if link.endswith("@nccl") and once > 0 else "nothing to send" if once == 0 else "at line rate, the alpha-beta model (no measured send/recv curve for "
           f"{link})")
    return per_micro_batch * once, (sent,), (
        f"pipeline stage transfers: each device's {share / 1e6:,.3g} MB of activations to the next stage and their "
        f"gradient back, {per_micro_batch} a micro-batch, {where} on {link}, {how}")


def overlapped(layout: schedule.Layout, tensor: float, transfer: float, products: float, compute: float
               ) -> tuple[float, float, list[str]]:
    """What blocks one micro-batch's slot of the tensor-parallel collectives (``tensor`` seconds) and
    of the stage transfers (``transfer``), and notes saying what the layout overlaps.

    * `schedule.Layout.overlap_tensor`: the collectives run beside the products they feed or
      follow (Transformer Engine's userbuffers overlap: an all-gather or reduce-scatter in chunks
      while the product computes the chunks already there), so ``max(tensor - products, 0)``
      blocks the step, ``products`` the micro-batch's matrix products' seconds;
    * `schedule.Layout.overlap_transfers`: a stage's send/recv run while it computes its next
      chunk or micro-batch, so ``max(transfer - compute, 0)`` blocks it.

    Neither prices the products' slow-down from sharing the device with the communication.
    """
    notes = []
    tensor_exposed, transfer_exposed = tensor, transfer
    if layout.overlap_tensor and tensor > 0:
        tensor_exposed = max(tensor - products, 0.0)
        notes.append(f"tensor-parallel collectives overlapped with the matrix products (the layout's overlap_tensor: "
                     f"Transformer Engine's userbuffers overlap on a GPU, XLA's asynchronous collective fusion on a "
                     f"TPU): {(tensor - tensor_exposed) * 1e3:,.4g} of their "
                     f"{tensor * 1e3:,.4g} ms a micro-batch hidden behind {products * 1e3:,.4g} ms of products, the "
                     "products' slow-down from sharing the device not priced")
    if layout.overlap_transfers and transfer > 0:
        transfer_exposed = max(transfer - compute, 0.0)
        notes.append(f"pipeline transfers overlapped with the stage's compute (the layout's overlap_transfers): "
                     f"{(transfer - transfer_exposed) * 1e3:,.4g} of their {transfer * 1e3:,.4g} ms a micro-batch "
                     "hidden")
    return tensor_exposed, transfer_exposed, notes


def backward_share(report: Any) -> float:
    """The backward pass's share of the grad program's matrix products (2/3
    for dense layers, whose backward pass has two products for the forward's one)."""
    grad, backward = report.phases["grad"].matmul_flops, report.phases["backward"].matmul_flops
    return backward / grad if grad and backward is not None else 2 / 3


PIECES = 16
"""Gradient pieces a reduction not read from the compiled program is split into,
ready at even steps of the backward pass (`xla_cost.runs.scaling.predict`'s replicas); one where the
framework reduces after the backward pass (`Layout.overlap_gradients` False)."""


def gradient_reduction(
    rows: list[Any], report: Any, layout: schedule.Layout, cluster: comm.Cluster, hardware: Hardware,
    backward: float,
) -> tuple[float, tuple[comm.CollectiveTime, ...], list[str], float]:
    """(seconds, times, notes, exposed seconds) of the gradient reduction.

    Every group lies where the run's devices do (`schedule.run_mesh`: tensor
    shards innermost, then FSDP shards, stages, replicas): within a node on
    its link, across nodes on the network (in two levels where several of
    its devices share each node).

    * Data parallelism: the analysed mesh's gradient collectives, in the order
      XLA runs them (the backward pass's), and, over the layout's replicas, an
      all-reduce of the parameter bytes per device, in `PIECES` pieces. Each
      group of like collectives is reduced in buckets of ``bucket_bytes``, each
      starting once its gradients exist and the link is free; what runs past
      the backward pass is exposed. A pipeline reduces after its last
      micro-batch (Megatron's schedule): nothing hidden.
    * ZeRO-3 (an ``fsdp`` axis): the program's parameter and gradient
      collectives over it are priced as ZeRO-3 runs them instead: each unit's
      parameters all-gathered before its forward and its backward pass, its
      gradients reduce-scattered after it, each behind the neighbouring unit's
      compute (`schedule.zero3`), every micro-batch.
    """
    mesh = schedule.run_mesh(report.mesh, layout)
    cluster = comm.staged(cluster, hardware.device) if layout.host_staged_gradients else cluster  # Gloo, 2017
    units = fsdp_units(report)
    sharded = [r for r in rows if units and "fsdp" in r.axes
               and r.kind.replace("_", "-").removesuffix("-start") in _ZERO3_KINDS]
    apart = {id(r) for r in sharded}
    read = [r for r in rows if id(r) not in apart]
    priced = [comm.placed_time((r,), mesh, cluster) for r in read]  # each alone, as before
    # the analysed mesh's data-parallel gradients: made through the backward pass however XLA combined them
    spread = [r.kind.replace("_", "-").removesuffix("-start") == "all-reduce" and set(r.axes) <= _DATA for r in read]
    if layout.data > 1:
        per_device = int(report.sharding.get("params_bytes_per_device") or 0) or 4 * report.parameters
        if layout.gradient_bytes is not None:  # the gradients as the framework reduces them (float16: 2 bytes)
            total = int(report.sharding.get("params_bytes") or 0)  # the device's share of the parameters
            per_device = int(layout.gradient_bytes * report.parameters * (per_device / total if total else 1.0))
        where = placement.span(mesh, (schedule.REPLICAS,), cluster.node_size)
        pieces = PIECES if layout.overlap_gradients else 1  # after the backward pass: one flattened buffer
        piece = {"kind": "all-reduce", "bytes": per_device // pieces, "group_size": layout.data, "executions": 1,
                 "span": where}
        priced += [(*comm.communication_time([piece], cluster), (where,))] * pieces  # the pieces alike: priced once
    notes: list[str] = []
    timed = []  # (its span, its time, whether spread), the rows the model prices
    for i, (_, times, row_notes, (at,)) in enumerate(priced):
        notes += row_notes
        timed += [(at, t, i < len(spread) and spread[i]) for t in times]
    total = sum(t.seconds for _, t, _ in timed)
    m = layout.micro_batches
    zero3_times, zero3_exposed, hideable = (), 0.0, 0.0
    if units:
        share = backward_share(report)
        forward = backward * (1 - share) / share if share else 0.0
        hideable = m * (forward + backward)
        size = report.mesh["fsdp"]
        zero3_times, zero3_exposed = schedule.zero3(
            units, size, placement.span(mesh, ("fsdp",), cluster.node_size), cluster, forward, backward, m)
        notes.append(f"ZeRO-3 over fsdp={size}: each of {len(units)} units' parameters all-gathered before its "
                     "forward and its backward pass and its gradients reduce-scattered after it, every micro-batch, "
                     "behind the neighbouring unit's compute (its share: its share of the parameters); the units "
                     "and their bytes from the forward program's all-gathers" + (
                         f"; the program's {len(sharded)} parameter and gradient collectives over fsdp priced so "
                         "instead" if sharded else ""))
    zero3_total = sum(t.seconds for t in zero3_times)
    times = (*(t for _, t, _ in timed), *zero3_times)
    if not times:
        return 0.0, (), notes, 0.0
    if hardware.overlap is not None:
        hidden = hardware.overlap
        exposed = (max((1 - hidden) * total, total - backward, 0.0)
                   + max((1 - hidden) * zero3_total, zero3_total - hideable, 0.0))
        return total + zero3_total, times, notes, exposed
    if layout.pipeline > 1 and timed:
        notes.append("gradients reduced after the pipeline's last micro-batch (Megatron's schedule): nothing hidden")
        hidden_behind = 0.0
    elif not layout.overlap_gradients and timed:
        notes.append("gradients all-reduced after the backward pass, as the run's framework reduced them: nothing "
                     "hidden")
        hidden_behind = 0.0
    else:
        hidden_behind = backward
    groups: dict[tuple[Any, ...], list[schedule.Piece]] = {}
    for index, (at, time, even) in enumerate(timed):
        key = (time.kind, time.group_size, at, even)
        groups.setdefault(key, []).append(schedule.Piece(time.nbytes * time.executions, (index + 1) / len(timed)))
    slots = []
    for (kind, size, where, even), pieces in groups.items():
        if even:
            pieces, said = made_through_backward(pieces, hardware.bucket_bytes)
            notes += [said] if said else []
        for piece in schedule.bucket(pieces, hardware.bucket_bytes):
            slots.append((piece.ready * hidden_behind, cluster.time(kind, piece.nbytes, size, where=where)[0]))
    slots.sort()
    durations = [d for _, d in slots]
    exposed = schedule.exposed_after([r for r, _ in slots], durations, hidden_behind)
    return sum(durations) + zero3_total, times, notes, exposed + zero3_exposed


def made_through_backward(pieces: Sequence[schedule.Piece], bucket_bytes: float
                          ) -> tuple[list[schedule.Piece], str]:
    """A data-parallel group's gradient pieces (in the backward pass's order) as the backward pass makes
    their bytes, and what was done, in words ("" when nothing was). Where XLA's all-reduce combiner
    merged many gradients into a piece of several buckets' bytes (the CPU's: every gradient in one, at
    the end of the backward pass), that piece is split into ``bytes // bucket_bytes`` even pieces and
    every piece of the group is ready at its bytes' cumulative share of the group's (the gradients
    made evenly through the backward pass); a group with no such piece, or buckets of 0 bytes, is kept."""
    counts = [int(p.nbytes // bucket_bytes) if bucket_bytes > 0 else 1 for p in pieces]
    combined = [p.nbytes for p, count in zip(pieces, counts) if count >= 2]
    total = sum(p.nbytes for p in pieces)
    if not combined or not total:
        return list(pieces), ""
    out: list[schedule.Piece] = []
    made = 0.0
    for piece, count in zip(pieces, counts):
        count = max(count, 1)
        for _ in range(count):
            made += piece.nbytes / count
            out.append(schedule.Piece(piece.nbytes / count, made / total))
    return out, (f"{len(combined)} gradient all-reduce(s) over data the compiler combined ({sum(combined) / 1e6:,.4g} "
                 f"MB) reduced as the backward pass makes their bytes: in even pieces of at least "
                 f"{bucket_bytes / 2**20:,.4g} MiB, each ready at its bytes' share of the backward pass")


_DATA = frozenset({"data"})
"""The analysed mesh's data-parallel axis: its all-reduces are the gradients' (`made_through_backward`)."""


_ZERO3_KINDS = frozenset({"all-gather", "reduce-scatter", "all-reduce"})
"""The collectives over ``fsdp`` that ZeRO-3's gathers and reduce-scatters stand for."""
