"""Seed 000's forward / backward / update split predicted on a V100 (issue 32).

The claims page predicts the split of the DDP paper's Figure 6 (ResNet-50 and
BERT on a V100: 23 / 74 / 3%) by compiling each phase for a V100 and pricing
its kernels. Checked here on a small convolutional network so the test stays
fast: the shares add up to one, every phase costs something, and the
backward pass (two products per forward product, here the weight and the
input gradient) costs more than the forward.
"""

from __future__ import annotations

import pytest

from xla_cost.study import claims
from xla_cost.study.data import StudyData
from xla_cost.study.plan import ReportPlan


def test_predicted_split_of_a_v100_step(tmp_path):
    from xla_cost.compiled.store import Store

    data = StudyData(Store(tmp_path / "store.sqlite"), ReportPlan(seed000_models=("conv_net",)), None, 0, False)
    split = claims.seed000_predicted(data)["conv_net"]
    assert sum(split.values()) == pytest.approx(1.0)
    assert all(share > 0 for share in split.values())
    assert split["backward"] > split["forward"] > split["update"]
