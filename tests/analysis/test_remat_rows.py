"""Per-layer rows of a rematted model carry the recomputation (`LayerCosts.recomputed`): each
row's backward holds the forward work jax.checkpoint runs again for it, which the rows show in
their own column, in ``analyze`` and in the model's own train step (`xla_cost.analyze_step`),
against `tests.remat_models`' closed forms."""

from __future__ import annotations

import pytest

import xla_cost
from tests import remat_models as R

CFG = R.CONFIG
TOKENS = R.tokens_of(CFG)
POLICY = "nothing_saveable"


@pytest.fixture(scope="module")
def reports():
    model = R.SetupLM(CFG, POLICY)  # blocks made in setup(), each nn.remat(..., policy=nothing_saveable)
    report = xla_cost.analyze(model, TOKENS, counter="jaxpr", optimizer="sgd", loss=R.lm_loss, targets=TOKENS,
                              per_layer=True)
    step = xla_cost.analyze_step(R.linen_train_step, R.linen_state(model), R.batch_of(CFG), counter="jaxpr",
                                 per_layer=True)
    return report, step


@pytest.mark.parametrize("which", ["analyze", "analyze_step"])
def test_each_row_carries_what_its_block_recomputes(reports, which):
    report = reports[0] if which == "analyze" else reports[1]
    rows = {row.path: row for row in report.layers}
    projections = R.projection_flops(CFG)  # q, k, v, o: 2 B T d^2; gate, up, down: 2 B T d f
    for block in range(CFG.layers):
        for name, flops in projections.items():
            # nothing_saveable recomputes every projection but down, whose result no backward step reads
            assert rows[f"{block}/{name}"].recomputed_flops == (0 if name == "down" else flops), (block, name)
        assert rows[f"{block}/down"].model_backward_flops == rows[f"{block}/down"].backward_flops
        inside = [row for path, row in rows.items() if path == str(block) or path.startswith(f"{block}/")]
        # the block's rows together: its whole forward less down's product and the last residual add
        assert sum(row.recomputed_flops for row in inside) == R.recomputed_flops(CFG, POLICY)
        assert all(row.model_backward_flops == row.backward_flops - row.recomputed_flops for row in inside)
    for path in ("embed", "norm", "lm_head", xla_cost.REMAINDER):  # outside every checkpoint
        assert rows[path].recomputed_flops == 0, path
    assert sum(row.recomputed_flops for row in report.layers) == CFG.layers * R.recomputed_flops(CFG, POLICY)


def test_the_layer_table_shows_the_column_and_json_keeps_it(reports):
    report = reports[0]
    backward = report.phases["backward"]
    assert sum(row.recomputed_flops for row in report.layers) == backward.hardware_flops - backward.model_flops
    assert "recomputed kFLOP" in report.to_table(width=240)
    assert "recomputed_flops" in report.layers_frame().columns
    assert xla_cost.Report.from_dict(report.to_dict()).layers == report.layers
    plain = xla_cost.analyze(R.SetupLM(CFG, None), TOKENS, counter="jaxpr", optimizer="sgd", loss=R.lm_loss,
                             targets=TOKENS, per_layer=True)
    assert "recomputed" not in plain.to_table(width=240).split("layers")[-1].split("\n-")[0]  # no column without remat
