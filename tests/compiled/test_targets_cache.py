"""A target's analyses are cached like the CPU's (issue 31): a second analysis compiles nothing."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import jax, jax.numpy as jnp, flax.linen as nn
import xla_cost
from xla_cost.compiled import xla

class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(32)(x)))

compiled = []
real = xla._compile
def counting(program, args, options):
    compiled.append(1)
    return real(program, args, options)
xla._compile = counting
report = xla_cost.analyze(MLP(), jax.ShapeDtypeStruct((4, 16), jnp.float32), optimizer="sgd", target={target})
print(len(compiled), report.phases["forward"].flops, report.target)
"""


def _run(tmp_path, target: str | None) -> list[str]:
    env = {"XLA_COST_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    env.pop("XLA_COST_NO_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD.replace("{target}", repr(target))], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_a_second_target_analysis_compiles_what_a_second_cpu_analysis_compiles(tmp_path):
    # Programs whose analyses are whole are read back; one with an unknown figure (SGD's update has
    # no transcendentals key in XLA's analysis) is compiled again, on the CPU as for a target.
    cpu = [_run(tmp_path, None), _run(tmp_path, None)]
    assert cpu[0][0] == "3" and int(cpu[1][0]) < 3 and cpu[1][1:] == cpu[0][1:]
    for target in ("h100", "tpu-v5e"):
        first, second = _run(tmp_path, target), _run(tmp_path, target)
        assert first[0] == "3"  # forward, grad and update: the CPU's cache entries are not the target's
        assert second[0] == cpu[1][0] and second[1:] == first[1:], (first, second)
