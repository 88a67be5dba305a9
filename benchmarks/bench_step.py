"""How long `xla_cost.analyze_step` takes on an ImageNet-style ResNet-50 step, beside `analyze` (issue 23).

Each measurement is a fresh Python process with an empty compilation cache
(``XLA_COST_NO_CACHE=1``); the clock runs from just before the model is built
to the end of the analysis (imports outside it). Variants:

* ``analyze``: ``xla_cost.analyze(resnet50, inputs, optimizer=sgd with nesterov momentum, per_layer=True)``;
* ``analyze_step``: the same model in a Flax ImageNet-example step (a ``TrainState``
  with ``batch_stats``, BatchNorm's statistics mutable, an L2 penalty, ``lax.pmean``
  of the gradients and metrics, a cosine schedule), ``analyze_step(step, state,
  batch, per_layer=True)``.

Both compile the step for the CPU (``counter="xla"``). Their phases are printed
beside each other, then the median seconds of ``--repeats`` runs.

Usage::

    python benchmarks/bench_step.py                 # batch 32, median of 3
    python benchmarks/bench_step.py --batch 8 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import functools, json, sys, time
import jax, jax.numpy as jnp, optax
from jax import lax
from flax.training import train_state
import xla_cost
from xla_cost.zoo import build_model

variant, batch = sys.argv[1], int(sys.argv[2])
start = time.perf_counter()
model = build_model("resnet50")
images = jax.ShapeDtypeStruct((batch, 224, 224, 3), jnp.float32)
tx = optax.sgd(0.1, momentum=0.9, nesterov=True)
if variant == "analyze":
    report = xla_cost.analyze(model, images, optimizer=tx, per_layer=True)
else:
    class TrainState(train_state.TrainState):
        batch_stats: dict

    def create(rng):
        variables = model.init(rng, jnp.ones((1, 224, 224, 3)), train=False)
        return TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx,
                                 batch_stats=variables["batch_stats"])

    def train_step(state, batch, learning_rate_fn):
        def loss_fn(params):
            logits, new_state = state.apply_fn({"params": params, "batch_stats": state.batch_stats},
                                               batch["image"], mutable=["batch_stats"])
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
            l2 = sum(jnp.sum(p ** 2) for p in jax.tree_util.tree_leaves(params) if p.ndim > 1)
            return loss + 0.0001 * 0.5 * l2, (new_state, logits)
        (loss, (new_state, logits)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        grads = lax.pmean(grads, axis_name="batch")
        metrics = lax.pmean({"loss": loss, "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["label"]),
                             "learning_rate": learning_rate_fn(state.step)}, axis_name="batch")
        return state.apply_gradients(grads=grads, batch_stats=new_state["batch_stats"]), metrics

    state = jax.eval_shape(create, jax.random.key(0))
    data = {"image": images, "label": jax.ShapeDtypeStruct((batch,), jnp.int32)}
    step = functools.partial(train_step, learning_rate_fn=optax.cosine_decay_schedule(0.1, 1000))
    report = xla_cost.analyze_step(step, state, data, per_layer=True)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "parameters": report.parameters,
                  "flops": {p: report.phases[p].flops for p in report.phase_names}}))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "XLA_COST_NO_CACHE": "1", "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    runs: dict[str, list[dict]] = {"analyze": [], "analyze_step": []}
    for _ in range(args.repeats):
        for variant in runs:
            done = subprocess.run([sys.executable, "-c", CHILD, variant, str(args.batch)], env=env,
                                  capture_output=True, text=True, check=True)
            runs[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
    first = {v: r[0] for v, r in runs.items()}
    print(f"ResNet-50, batch {args.batch}, SGD with Nesterov momentum; {first['analyze']['parameters']:,} parameters")
    print(f"{'phase':<12}{'analyze FLOP':>20}{'analyze_step FLOP':>20}{'step / analyze':>16}")
    for phase in first["analyze_step"]["flops"]:
        a, s = first["analyze"]["flops"].get(phase), first["analyze_step"]["flops"][phase]
        ratio = f"{s / a:.4f}" if a else "-"
        print(f"{phase:<12}{'-' if a is None else format(a, ','):>20}{s:>20,}{ratio:>16}")
    for variant, found in runs.items():
        seconds = [r["seconds"] for r in found]
        print(f"{variant}: median {statistics.median(seconds):.1f} s over {len(seconds)} fresh processes "
              f"({', '.join(f'{s:.1f}' for s in seconds)})")


if __name__ == "__main__":
    main()
