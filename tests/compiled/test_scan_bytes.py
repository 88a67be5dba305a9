"""Memory-bound bytes of scanned layers (issue 32): a loop over a stack ``[L, ...]``
costs a layer's bytes per iteration, not the stack's, so the bytes per layer do
not grow with the depth; the copies a scan adds (each layer's weights sliced out
of the stack) are counted, and nothing else.

The hand-written HLO checks each rule of `xla_cost.compiled.work.work_bytes` on its
own; the zoo GPT checks the relations on XLA's CPU programs, per layer as the
difference of two depths (which cancels the embedding, the head and the loss).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

import xla_cost
from xla_cost.compiled import hlo, work
from xla_cost.zoo import build_model

F32 = 4  # bytes per float32 element

# The GPT's forward and update programs are the same with and without remat, and each depth is
# analysed by several tests: each program is compiled once in the module (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("module_caches")


# ---------------------------------------------------------------------------
# The rules, on hand-written HLO


def _stack_loop(layers: int, width: int) -> str:
    """A loop over ``layers`` rows of a stack ``f32[layers, width]`` carried by
    the loop, as XLA compiles a scan: each iteration slices its row through a
    bitcast (the layout XLA gives a scan's residuals), doubles it, and writes
    the result into a second carried stack through a bitcast."""
    stack = f"f32[{layers},{width}]{{1,0}}"
    row = f"f32[1,{width}]{{1,0}}"
    carry = f"(s32[], {stack}, {stack})"
    return "\n".join([
        "HloModule scan",
        f"%fused_read (p0: f32[{layers},{width}], p1: s32[]) -> f32[1,{width}] {{",
        f"  %p0 = {stack} parameter(0)",
        f"  %view = f32[{width},{layers}]{{0,1}} bitcast(%p0)",
        "  %p1 = s32[] parameter(1)",
        "  %z = s32[] constant(0)",
        f"  %s = f32[{width},1]{{0,1}} dynamic-slice(%view, %z, %p1), dynamic_slice_sizes={{{width},1}}",
        f"  %back = {row} bitcast(%s)",
        f"  ROOT %d = {row} add(%back, %back)",
        "}",
        f"%fused_write (q0: f32[{layers},{width}], q1: f32[1,{width}], q2: s32[]) -> f32[{layers},{width}] {{",
        f"  %q0 = {stack} parameter(0)",
        f"  %v = f32[{width},{layers}]{{0,1}} bitcast(%q0)",
        f"  %q1 = {row} parameter(1)",
        f"  %u = f32[{width},1]{{0,1}} bitcast(%q1)",
        "  %q2 = s32[] parameter(2)",
        "  %z = s32[] constant(0)",
        f"  %w = f32[{width},{layers}]{{0,1}} dynamic-update-slice(%v, %u, %z, %q2)",
        f"  ROOT %r = {stack} bitcast(%w)",
        "}",
        f"%body (c: {carry}) -> {carry} {{",
        f"  %c = {carry} parameter(0)",
        "  %i = s32[] get-tuple-element(%c), index=0",
        f"  %a = {stack} get-tuple-element(%c), index=1",
        f"  %b = {stack} get-tuple-element(%c), index=2",
        f"  %x = {row} fusion(%a, %i), kind=kLoop, calls=%fused_read",
        f"  %y = {stack} fusion(%b, %x, %i), kind=kLoop, calls=%fused_write",
        f"  ROOT %t = {carry} tuple(%i, %a, %y)",
        "}",
        f"%cond (c: {carry}) -> pred[] {{",
        f"  %c = {carry} parameter(0)",
        "  ROOT %k = pred[] constant(true)",
        "}",
        "ENTRY %main {",
        f"  %init = {carry} parameter(0)",
        f"  ROOT %l = {carry} while(%init), condition=%cond, body=%body, "
        f'backend_config={{"known_trip_count":{{"n":"{layers}"}}}}',
        "}",
    ])


@pytest.mark.parametrize("layers", [4, 8, 16])
def test_a_loop_over_a_stack_moves_one_row_per_iteration(layers):
    width = 64
    found = work.work_bytes(_stack_loop(layers, width))
    # per iteration: the read fusion reads one row through the bitcast and the index, and writes
    # the doubled row: (width + width) * 4 + 4; the write fusion reads the row and the index and
    # writes the row into the stack in place (the stack is neither read nor copied): 2 * width * 4 + 4
    per_iteration = 2 * (2 * width * F32 + 4)
    assert found.other == layers * per_iteration  # linear in the depth: a row, not the stack, per iteration
    assert found.matmul == 0 and found.kernels == 2 * layers and found.unknown == ()


def _bytes(instruction: str, shapes: dict[str, str], fused: str = "") -> int | None:
    module = hlo.parse_module(f"HloModule m\n{fused}\nENTRY %main {{\n  ROOT {instruction}\n}}")
    return hlo.instruction_bytes(hlo.parse_instruction(instruction), shapes, module)


def test_a_lone_update_reads_and_writes_its_update_once():
    shapes = {"buf": "f32[64,256]{1,0}", "u": "f32[1,256]{1,0}", "i": "s32[]"}
    size = _bytes("%o = f32[64,256]{1,0} dynamic-update-slice(%buf, %u, %i, %z)", {**shapes, "z": "s32[]"})
    # the update read and written (2 * 256 * 4) and two indices (2 * 4); XLA's cost analysis of
    # lax.dynamic_update_slice of f32[1,256] into f32[64,256] says the same: 2 * 1024 + its index
    assert size == 2 * 256 * F32 + 2 * 4


def test_a_slice_after_elementwise_work_reads_only_its_part():
    fused = "\n".join([
        "%f (p: f32[128,768], b: f32[768]) -> f32[128,256] {",
        "  %p = f32[128,768]{1,0} parameter(0)",
        "  %b = f32[768]{0} parameter(1)",
        "  %bb = f32[128,768]{1,0} broadcast(%b), dimensions={1}",
        "  %a = f32[128,768]{1,0} add(%p, %bb)",
        "  ROOT %s = f32[128,256]{1,0} slice(%a), slice={[0:128], [512:768]}",
        "}",
    ])
    size = _bytes("%q = f32[128,256]{1,0} fusion(%x, %bias), kind=kLoop, calls=%f",
                  {"x": "f32[128,768]{1,0}", "bias": "f32[768]{0}"}, fused)
    # a third of x is read (128 * 256), the bias whole (768: at most one element per result element,
    # and it has fewer), the 128 x 256 result written
    assert size == (128 * 256 + 768 + 128 * 256) * F32


def test_an_asynchronous_slice_and_copy_count_what_they_move():
    text = "\n".join([
        "HloModule tpu",
        "ENTRY %main {",
        "  %w = f32[8,1024,256]{2,1,0} parameter(0)",
        "  %s = ((f32[8,1024,256]{2,1,0}), f32[2,1024,256]{2,1,0}, s32[]) slice-start(%w), "
        "slice={[0:2], [0:1024], [0:256]}",
        "  %sd = f32[2,1024,256]{2,1,0} slice-done(%s)",
        "  %c = (f32[1024,256]{1,0}, f32[1024,256]{1,0}, u32[]) copy-start(%src)",
        "  %src = f32[1024,256]{1,0} parameter(1)",
        "  %cd = f32[1024,256]{1,0} copy-done(%c)",
        "  ROOT %t = (f32[2,1024,256]{2,1,0}, f32[1024,256]{1,0}) tuple(%sd, %cd)",
        "}",
    ])
    found = work.work_bytes(text)
    # the slice reads two of the 8 layers and writes them: 2 * (2 * 1024 * 256) * 4; the copy reads
    # its 1024 x 256 source and writes its destination: 2 * (1024 * 256) * 4 (not the tuples' repeats)
    assert found.other == 2 * (2 * 1024 * 256) * F32 + 2 * (1024 * 256) * F32


# ---------------------------------------------------------------------------
# The zoo GPT on XLA's CPU programs, and the H100's (deviceless)

D, HEADS, SEQ, VOCAB = 32, 2, 16, 32
WEIGHTS = 12 * D * D * F32
"""A block's weight matrices: c_attn d x 3d, attn.c_proj d x d, mlp.c_fc d x 4d, mlp.c_proj 4d x d."""

PHASES = ("forward", "grad", "train_step")


@functools.lru_cache(maxsize=None)
def _report(layers: int, scan: bool, remat: str = "none", target: str | None = None) -> xla_cost.Report:
    model = build_model("gpt2-small", d_model=D, n_head=HEADS, seq_len=SEQ, vocab_size=VOCAB, n_layer=layers,
                        scan_layers=scan, remat=remat)
    return xla_cost.analyze(model, jax.ShapeDtypeStruct((1, SEQ), jnp.int32), optimizer="adam", target=target)


def _memory_bound(layers: int, scan: bool, remat: str = "none", target: str | None = None) -> dict[str, int]:
    report = _report(layers, scan, remat, target)
    return {phase: report.phases[phase].memory_bound_bytes for phase in PHASES}


def _per_layer(low: int, high: int, scan: bool, remat: str = "none", target: str | None = None) -> dict[str, float]:
    a, b = _memory_bound(low, scan, remat, target), _memory_bound(high, scan, remat, target)
    return {phase: (b[phase] - a[phase]) / (high - low) for phase in PHASES}


@pytest.mark.parametrize("target", [None, "h100"], ids=["cpu", "h100"])
def test_scanned_bytes_per_layer_do_not_grow_with_depth(target):
    # the H100's program reads a scan's residual stacks through bitcasts (to the layout of the
    # backward loop): read whole, they made the bytes per layer grow with the depth
    shallow, deep = _per_layer(4, 8, True, target=target), _per_layer(8, 16, True, target=target)
    for phase in PHASES:
        assert deep[phase] == pytest.approx(shallow[phase], rel=0.05), phase


@pytest.mark.parametrize("target", [None, "h100"], ids=["cpu", "h100"])
def test_per_layer_time_of_a_scanned_stack_is_constant_in_depth(target):
    # issue 32's scan defect in time (tests/runs/test_scan_time.py): priced on an H100 from the CPU proxy's totals
    # or kernel by kernel from the H100's program, one more layer costs the same from 4 to 8 layers as from 8 to
    # 16 (the slope of the step time in the depth; the embedding and the head cancel). At this width the H100's
    # step is its kernels' launches: the memory-bound part, where a layer reading the whole stack would grow
    # with the depth, is held to the same rule
    from xla_cost.runs.scaling import predict

    def priced(layers: int) -> dict[str, float]:
        step = predict(_report(layers, True, target=target), device="h100")
        # a step shorter than the host's measured dispatch waits for the host: a floor per step, not per layer
        return {"step": step.prediction.seconds - step.parts.get("dispatch_wait", 0.0),
                "memory": step.parts["memory"]}

    seconds = {n: priced(n) for n in (4, 8, 16)}
    for part in ("step", "memory"):
        shallow, deep = ((seconds[b][part] - seconds[a][part]) / (b - a) for a, b in ((4, 8), (8, 16)))
        assert shallow > 0 and deep == pytest.approx(shallow, rel=0.05), part


def test_a_scanned_layer_moves_the_unrolled_layer_and_its_weight_copies():
    scanned, unrolled = _per_layer(4, 8, scan=True), _per_layer(4, 8, scan=False)
    # the forward pass: XLA slices each weight matrix of the layer out of the stack before its
    # matrix product (reads the slice, writes it: 2 x WEIGHTS); the rest is the unrolled layer's
    assert scanned["forward"] == pytest.approx(unrolled["forward"] + 2 * WEIGHTS, rel=0.05)
    # the gradient: at least that copy again, and each weight gradient written into its stack
    # (read, written: 2 x WEIGHTS); the residuals' stacks add more
    assert scanned["grad"] >= unrolled["grad"] + 4 * WEIGHTS


@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_recomputation_never_moves_fewer_bytes_than_the_plain_step(scan):
    plain = _per_layer(4, 8, scan=False)
    recomputed = _per_layer(4, 8, scan=scan, remat="full")
    # remat="full" runs each block's forward pass again in the backward pass: it reads at least
    # what the unrolled step without recomputation reads. (A scan without recomputation keeps its
    # residuals in stacks [L, ...] that it zeroes, updates and slices again: more bytes than
    # recomputing them, which that comparison would not say anything about.)
    for phase in ("grad", "train_step"):
        assert recomputed[phase] >= plain[phase], phase
