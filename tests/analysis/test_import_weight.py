"""What an analysis imports: a Linen model's analysis loads neither flax.nnx (with
IPython, 0.45 s of CPU) nor pandas (0.3 s), nor, untimed, the timing modules (about
0.03 s), which it does not use (issue 49: analyze's
start-up against a plain script's); an NNX model, whose code imports flax.nnx after
xla_cost, is still analysed as one, and a report's table loads pandas when it is made.
A fresh process, as the start-up is what is measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = """
import json, sys
import jax, jax.numpy as jnp, flax.linen as nn
import xla_cost

class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10, name="fc2")(nn.relu(nn.Dense(32, name="fc1")(x)))

linen = xla_cost.analyze(MLP(), jax.ShapeDtypeStruct((4, 16), jnp.float32), optimizer="adam", per_layer=True)
heavy = sorted(m for m in ("flax.nnx", "IPython", "pandas", "xla_cost.analysis.timing", "xla_cost.analysis.split")
               if m in sys.modules)

from flax import nnx  # the user's NNX code, imported after xla_cost

class Net(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(16, 32, rngs=rngs)
        self.fc2 = nnx.Linear(32, 10, rngs=rngs)
    def __call__(self, x):
        return self.fc2(nnx.relu(self.fc1(x)))

net = xla_cost.analyze(Net(nnx.Rngs(0)), jax.ShapeDtypeStruct((4, 16), jnp.float32), optimizer="adam",
                       per_layer=True)
frame = linen.to_frame()
print(json.dumps({
    "heavy": heavy, "pandas_after_table": "pandas" in sys.modules, "frame_rows": list(frame.index),
    "linen_layers": sorted(r.path for r in linen.layers), "nnx_layers": sorted(r.path for r in net.layers),
    "linen_forward": linen.phases["forward"].flops, "nnx_forward": net.phases["forward"].flops,
}))
"""


@pytest.mark.parametrize("caches", ["off", "on"])
def test_a_linen_analysis_imports_neither_nnx_nor_pandas_and_an_nnx_model_imported_later_works(caches, tmp_path):
    # with the caches on, the report cache keys the call by the store's description of its
    # arguments, which asks whether a module is an NNX one (it imported flax.nnx: +0.29 s)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    for name in ("XLA_COST_NO_CACHE", "XLA_COST_CACHE_DIR"):
        env.pop(name, None)
    env.update({"XLA_COST_NO_CACHE": "1"} if caches == "off" else {"XLA_COST_CACHE_DIR": str(tmp_path)})
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["heavy"] == []
    assert found["pandas_after_table"] and {"forward", "backward", "update"} <= set(found["frame_rows"])
    # NNX's rows come from the name scopes xla_cost wraps its modules' calls in (flax.nnx loaded late)
    assert {"fc1", "fc2"} <= set(found["linen_layers"]) and found["nnx_layers"] == found["linen_layers"]
    # the same network: forward = the two products 2*4*16*32 + 2*4*32*10, the biases 4*32 + 4*10,
    # the ReLU 4*32, and the loss on the 4x10 logits (the same loss both times): equal figures
    assert found["nnx_forward"] == found["linen_forward"] > 2 * 4 * 16 * 32 + 2 * 4 * 32 * 10
