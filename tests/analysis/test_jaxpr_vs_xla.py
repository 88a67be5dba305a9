"""The jaxpr count agrees with XLA's compiled count where XLA can count (no loops).

Acceptance of the attribution issue: on the four seed nets and a few other
shapes, the jaxpr total is within 1% of compiled XLA for every phase (0.5%
measured worst), and the per-layer columns add up to the phases' jaxpr counts
exactly. `tests/count/test_closed_forms.py` holds the jaxpr counts to closed forms.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import xla_cost
from tests import custom_models as M
from tests import formulas as F

# xla_cost's caches on, shared with the other modules that opt in (tests/conftest.py): the zoo programs
# this module analyses again are read back, not compiled again.
pytestmark = pytest.mark.usefixtures("module_caches")


PHASES = ("forward", "backward", "grad", "update", "train_step")

CASES = [
    # (zoo name, batch, optimizer, config)
    ("linear_net", 1, "sgd", {}),
    ("linear_net", 3, "adam", {}),
    ("one_net", 2, "sgd", {}),
    ("one_net", 5, "adam", {}),
    ("conv_net", 2, "sgd", {}),
    ("conv_net", 3, "momentum", {"image_size": 64}),
    ("deeper_conv_net", 2, "sgd", {"depth": 3}),
    ("deeper_conv_net", 2, "adam", {"depth": 5, "image_size": 96}),
]


@pytest.mark.parametrize("name, batch, optimizer, config", CASES)
def test_jaxpr_within_one_percent_of_xla_every_phase(zoo_report, name, batch, optimizer, config):
    report = zoo_report(name, batch, optimizer=optimizer, **config)
    for phase in PHASES:
        p = report.phases[phase]
        assert not p.loop_corrected and p.flops == p.xla_flops, phase
        # XLA's fusion computes (and counts) a small elementwise producer once per
        # consumer; the jaxpr counts it once. Measured (jaxpr - XLA) / XLA, worst
        # case per phase over these cases: forward -8.5e-6, backward -3.9e-3 and
        # grad -2.6e-3 (OneNet: the ReLU masks of the 4096 hidden units, ~4 FLOP
        # per unit and example), update -6.7e-6, train_step -2.2e-3.
        assert p.jaxpr_flops == pytest.approx(p.xla_flops, rel=5e-3), phase
        # XLA leaves the key out when a program has none (SGD): the jaxpr's 0
        # stands in. Otherwise equal, but for Adam on LinearNet where XLA counts
        # 12 fewer of the per-tensor scalar transcendentals (b1**t, b2**t) than
        # the jaxpr's 617,092,492: 2e-8.
        assert p.jaxpr_transcendentals == pytest.approx(p.transcendentals, rel=1e-7), phase
    assert not report.unsupported


@pytest.mark.parametrize("name, batch, optimizer, config", CASES[::2])
def test_layer_columns_add_up_to_phase_jaxpr_counts(zoo_report, name, batch, optimizer, config):
    report = zoo_report(name, batch, optimizer=optimizer, **config)
    assert report.layers[-1].path == xla_cost.REMAINDER
    for column, phase in [
        ("forward_flops", "forward"), ("backward_flops", "backward"), ("update_flops", "update"),
    ]:
        assert sum(getattr(row, column) for row in report.layers) == report.phases[phase].jaxpr_flops
    assert sum(row.parameters for row in report.layers) == report.parameters


class _Stage(nn.Module):
    """Two residual blocks (tests.custom_models.ResidualBlock: up, relu, down, + input)."""

    @nn.compact
    def __call__(self, x):
        for i in range(2):
            x, _ = M.ResidualBlock(name=f"block_{i}")(x)
        return x


class _NestedStages(nn.Module):
    """embed -> stage_0, stage_1 (two blocks each) -> head: module paths three deep."""

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(M.D_SCAN, name="embed")(x)
        for s in range(2):
            x = _Stage(name=f"stage_{s}")(x)
        return nn.Dense(M.C_SCAN, name="head")(x)


@pytest.mark.parametrize("depth", [None, 1, 2, 3])
def test_depth_merges_rows_of_a_nested_model(depth):
    b, d = 4, M.D_SCAN
    report = xla_cost.analyze(
        _NestedStages(), jax.ShapeDtypeStruct((b, 8), jnp.float32), optimizer="sgd",
        per_layer=True, depth=depth, counter="jaxpr",
    )
    # One block, from the dimensions: up (d -> 2d), relu, down (2d -> d), residual add.
    up = F.dense_flops(b, d, 2 * d)
    down = F.dense_flops(b, 2 * d, d)
    glue = b * 2 * d + b * d  # relu, residual add
    # up's input gradient is added to the residual's cotangent of the block
    # input (b*d adds, on up's name stack)
    up_bwd = F.dense_backward_flops(b, d, 2 * d) + b * d
    down_bwd = F.dense_backward_flops(b, 2 * d, d)
    glue_bwd = F.relu_backward_flops(b * 2 * d)  # relu's mask and select
    up_params, down_params = d * 2 * d + 2 * d, 2 * d * d + d
    # (forward, backward, parameters) per row at each depth
    block = {
        "up": (up, up_bwd, up_params), "": (glue, glue_bwd, 0), "down": (down, down_bwd, down_params),
    }
    blocks = [f"stage_{s}/block_{i}" for s in range(2) for i in range(2)]
    if depth is None or depth >= 3:  # every module its own row
        expected = {
            (f"{blk}/{part}" if part else blk): costs for blk in blocks for part, costs in block.items()
        }
    elif depth == 2:  # a block's up, down and glue merged
        whole = tuple(map(sum, zip(*block.values())))
        expected = {blk: whole for blk in blocks}
    else:  # depth 1: two blocks per stage
        whole = tuple(2 * sum(v) for v in zip(*block.values()))
        expected = {f"stage_{s}": whole for s in range(2)}
    rows = {r.path: r for r in report.layers}
    assert list(rows) == ["embed", *expected, "head", xla_cost.REMAINDER]
    for path, (forward, backward, parameters) in expected.items():
        row = rows[path]
        assert (row.forward_flops, row.backward_flops, row.parameters) == (forward, backward, parameters), path
        assert row.update_flops == 2 * parameters, path  # SGD
    assert rows["embed"].forward_flops == F.dense_flops(b, 8, d)
    assert rows["embed"].backward_flops == F.dense_backward_flops(b, 8, d, first=True)
    assert rows["head"].forward_flops == F.dense_flops(b, d, M.C_SCAN)


@pytest.mark.parametrize("scanned", [False, True], ids=["unrolled", "scanned"])
def test_the_remat_note_says_what_xlas_figure_shows(scanned):
    # The note's verdict (XLA kept or removed the recomputation) agrees with XLA's own FLOP: kept
    # where the grad program's figure grew by more than half the recomputation over the same model
    # without remat. A scanned stack's raw XLA figure counts its body once: held against the
    # jaxpr's count with every body once (issue 49's fourth new user: a 4-layer nn.scan of
    # nn.remat blocks was said to have its recomputation removed while flops grew by all of it).
    import jax
    import jax.numpy as jnp

    from tests import custom_models as M

    x = jax.ShapeDtypeStruct((16, 8), jnp.float32)
    plain = xla_cost.analyze(M.RematMLP(remat=False, scanned=scanned), x, optimizer="sgd")
    remat = xla_cost.analyze(M.RematMLP(remat=True, scanned=scanned), x, optimizer="sgd")
    recomputed = remat.phases["grad"].jaxpr_flops - plain.phases["grad"].jaxpr_flops
    block = xla_cost.FLOPS_PER_FMA * 16 * M.D_SCAN * M.D_SCAN + 16 * M.D_SCAN  # a block's matmul + bias
    assert recomputed == 4 * block
    kept = (remat.phases["grad"].flops - plain.phases["grad"].flops) / recomputed
    [note] = [n for n in remat.notes if n.startswith("grad: jax.checkpoint recomputes")]
    if kept >= 0.95:
        assert note.endswith("keeps it"), (note, kept)
    elif kept <= 0.05:
        assert note.endswith("(flops is XLA's: no recompute)"), (note, kept)
    else:  # XLA kept part of it: the note gives the share, within its fusions' few percent of the grown figure
        share = int(note.split("keeps about ")[1].split("%")[0])
        assert abs(share - 100 * kept) <= 10, (note, kept)


def test_checkpointed_blocks_recompute_their_forward_pass():
    # jax.checkpoint makes the backward pass recompute each block's forward:
    # the jaxpr counts it, XLA may keep or remove it (on the CPU it removed it
    # here, and kept it in a 4-layer GPT-2), and the report says which figure is which.
    import jax
    import jax.numpy as jnp

    from tests import custom_models as M

    b, d = 4, M.D_SCAN
    x = jax.ShapeDtypeStruct((b, 8), jnp.float32)
    plain = xla_cost.analyze(M.RematMLP(remat=False), x, optimizer="sgd", per_layer=True)
    remat = xla_cost.analyze(M.RematMLP(remat=True), x, optimizer="sgd", per_layer=True)
    block_forward = xla_cost.FLOPS_PER_FMA * b * d * d + b * d  # matmul + bias (tanh: T)
    recomputed = remat.phases["backward"].jaxpr_flops - plain.phases["backward"].jaxpr_flops
    assert recomputed == 4 * block_forward
    assert remat.phases["forward"].flops == plain.phases["forward"].flops
    assert any("jax.checkpoint recomputes" in n for n in remat.notes)
    # per layer: the recomputation is the block's own backward work, not the remainder's
    rows = {r.path: r for r in remat.layers}
    plain_rows = {r.path: r for r in plain.layers}
    assert rows["b1/dense"].backward_flops == plain_rows["b1/dense"].backward_flops + block_forward
    assert rows[xla_cost.REMAINDER].backward_flops == plain_rows[xla_cost.REMAINDER].backward_flops
