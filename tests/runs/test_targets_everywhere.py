"""Compile targets beyond `analyze` (issue 31): `analyze_step`, `sweep`, `scaling` and
`estimate` with ``target=`` / ``--target`` compile for the target's own compiler
(deviceless: jax's CUDA plugin for ``h100``, libtpu for ``tpu-v5e:2x2``), say so, and
keep their results apart from the CPU's; without a target nothing changes.

Expected figures come from the dimensions: a two-layer MLP's matrix products,
``2 * B * (D*H + H*C)`` forward and ``2 * B * (D*H + 2*H*C)`` backward (the input's
gradient is not taken), SGD's 2 FLOP per parameter (scale, subtract); the target's
whole-step figure is XLA's for another compiler's program, held within 2% of them.
"""

from __future__ import annotations

import json
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import xla_cost
from xla_cost.cli import main
from xla_cost.compiled.store import Store
from xla_cost.errors import InputError
from xla_cost.timemodel import devices as registry
from xla_cost.timemodel import kernel_time
from xla_cost.timemodel.calibration import constants, describe
from xla_cost.plugins import cuda_plugin, has_libtpu
from xla_cost.runs import estimates, scaling
from xla_cost.runs.configs import RunConfig
from xla_cost.runs.sweeps import sweep

from tests.refusals import one_line_refusal

pytestmark = [
    pytest.mark.skipif(cuda_plugin() is None or not has_libtpu(),
                       reason="needs the gpu and tpu extras (jax's CUDA plugin, libtpu)"),
    pytest.mark.usefixtures("module_caches"),  # a program compiled again in the module is read back (tests/conftest.py)
]

GPU, TPU = "h100", "tpu-v5e:2x2"
B, D, H, C = 32, 256, 512, 32  # batch, inputs, hidden units, outputs
P = D * H + H * C  # parameters (no biases)
FORWARD_MATMULS = 2 * B * (D * H + H * C)  # x @ W1, h @ W2
BACKWARD_MATMULS = 2 * B * (D * H + 2 * H * C)  # dW1 = x^T dh, dW2 = h^T dy, dh = dy W2^T
SGD_UPDATE = 2 * P  # seed 001, appendix B: SGD costs 2 FLOP per parameter (multiply, subtract)
WITHIN = 0.02


def _loss(params, x, y):
    h = jax.nn.relu(x @ params["fc1"]["kernel"])
    return jnp.mean((h @ params["fc2"]["kernel"] - y) ** 2)


OPTIMIZER = optax.sgd(0.1)


def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(_loss)(params, x, y)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _arguments():
    params = {"fc1": {"kernel": jax.ShapeDtypeStruct((D, H), jnp.float32)},
              "fc2": {"kernel": jax.ShapeDtypeStruct((H, C), jnp.float32)}}
    batch = (jax.ShapeDtypeStruct((B, D), jnp.float32), jax.ShapeDtypeStruct((B, C), jnp.float32))
    return params, jax.eval_shape(OPTIMIZER.init, params), *batch


@pytest.fixture(scope="module")
def on_cpu():
    return xla_cost.analyze_step(train_step, *_arguments())


@pytest.mark.parametrize("target", [GPU, TPU])
def test_analyze_step_for_a_target_keeps_the_parts_and_its_step_is_the_targets(on_cpu, target):
    report = xla_cost.analyze_step(train_step, *_arguments(), target=target, memory=True)
    assert report.target == registry.target(target).name and report.backend == registry.target(target).backend
    assert any(note.startswith(f"compiled for {registry.target(target).title}") for note in report.notes)
    assert on_cpu.target is None and not any("compiled for" in note for note in on_cpu.notes)
    for part, expected in (("forward", FORWARD_MATMULS), ("backward", BACKWARD_MATMULS), ("update", SGD_UPDATE)):
        # the parts are the jaxpr's, on any device: the CPU's exactly, the formula's within 2%
        assert report.phases[part].flops == on_cpu.phases[part].flops
        assert report.phases[part].flops == pytest.approx(expected, rel=WITHIN)
    whole = report.phases["train_step"].xla_flops  # XLA's count of the target's own program
    assert whole == pytest.approx(on_cpu.phases["train_step"].xla_flops, rel=WITHIN)
    assert whole == pytest.approx(FORWARD_MATMULS + BACKWARD_MATMULS + SGD_UPDATE, rel=WITHIN)
    memory = report.memory_breakdown
    assert memory.parameters == 4 * P and memory.argument_bytes is not None and memory.argument_bytes >= 4 * P


def test_a_step_sharded_over_its_own_mesh_is_laid_over_the_targets_devices(on_cpu):
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    whole, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))
    step = jax.jit(train_step, in_shardings=(whole, whole, split, split), out_shardings=(whole, whole, whole),
                   donate_argnums=(0, 1))
    report = xla_cost.analyze_step(step, *_arguments(), target=TPU)
    assert report.target == TPU and report.sharding["mesh"] == {"data": 4}
    # one device's quarter of the batch: the forward's matrix products over 4
    assert report.phases["forward"].flops == pytest.approx(FORWARD_MATMULS / 4, rel=WITHIN)
    rows = [c for phase in ("backward", "update", "other") for c in report.phases[phase].communication]
    # the gradients (float32) and the mean loss all-reduced over the 4 chips, as the TPU compiler emits them
    assert {c.group_size for c in rows} == {4}
    assert sum(c.bytes for c in rows) == 4 * P + 4


def test_a_sweep_for_a_target_is_stored_apart_and_read_back(tmp_path, monkeypatch):
    store = str(tmp_path / "results.sqlite")
    grid = dict(batch_sizes=[2], optimizers="sgd", store=store, jobs=0, progress=False)
    target = sweep("one_net", target=TPU, **grid).runs
    cpu = sweep("one_net", **grid).runs
    assert target["target"].tolist() == [TPU] and "target" not in cpu.columns
    assert (target["status"] == "ok").all() and (cpu["status"] == "ok").all()
    assert target["key"][0] != cpu["key"][0]
    with Store(store) as db:
        assert len(db.get_many([target["key"][0], cpu["key"][0]])) == 2
    assert target["train_step_flops"][0] == pytest.approx(cpu["train_step_flops"][0], rel=WITHIN)
    assert any("compiled for" in note for note in json.loads(target["notes"][0]))
    monkeypatch.setattr("xla_cost.runs.sweeps.run_config", lambda config: pytest.fail("rerun analysed again"))
    again = sweep("one_net", target=TPU.upper(), **grid).runs  # the canonical name: the same key
    assert again["key"].tolist() == target["key"].tolist()
    assert "target" not in RunConfig("one_net").to_dict()  # the keys of results stored before targets


def test_estimate_on_a_tpu_slice_prices_the_targets_program(capsys, tmp_path):
    store = str(tmp_path / "s.sqlite")
    code = main(["estimate", "one_net", "--samples", "1000", "--batch-size", "2", "--devices", "4",
                              "--optimizer", "sgd", "--target", TPU, "--bound", "--store", store, "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["target"], shown["device"], shown["devices"]) == (TPU, "tpu-v5e", 4)
    # the step priced is the target's program over a 2x2 slice: 4 chips, 2 samples each
    program = RunConfig("one_net", 2 * 4, optimizer="sgd", mesh={"data": 4}, target=TPU).run(cache=store)
    assert program.target == TPU and program.backend == "tpu"
    api = estimates.estimate("one_net", samples=1000, batch_size=2, devices=4, optimizer="sgd", target=TPU,
                             bound=True, store=store)
    assert api.step.flops == program.phases["train_step"].flops and api.to_dict() == shown
    assert f"compiled for {TPU}" in api.describe()


def test_scaling_for_a_gpu_is_predicted_on_it_kernel_by_kernel(tmp_path):
    store = str(tmp_path / "s")
    curve = scaling.scaling("one_net", [1, 2], batch_size=2, optimizer="sgd", target=GPU, store=store)
    assert curve.target == GPU and curve.device == "h100" and curve.calibration == describe(constants())
    assert f"compiled for {GPU}" in curve.describe() and curve.to_dict()["target"] == GPU
    assert any(note.startswith(f"the step's programs compiled for {GPU}") and "every kernel of it priced" in note
               for note in curve.steps[-1].notes)
    assert not any(note.startswith("priced from the totals") for s in curve.steps for note in s.notes)
    # the one-device point: the target's grad and update programs priced kernel by kernel on the H100
    program = RunConfig("one_net", 2, optimizer="sgd", target=GPU).run(cache=store)
    grad, update = program.phases["grad"], program.phases["update"]
    assert grad.kernel_list and update.kernel_list  # the target's kernel lists, kept in the report
    priced = kernel_time.price_kernels(grad.kernel_list, "h100", constants())
    assert priced.source == "kernels" and priced.kernels == sum(
        1 if k.executions is None else k.executions for k in grad.kernel_list if k.category != "collective")
    assert priced.flops > 0  # its products (the two layers' matmuls, forward and backward) priced by their shapes
    parts = curve.steps[0].parts
    assert (parts["matmul"], parts["memory"], parts["launch"]) == pytest.approx(
        (priced.matmul, priced.memory, priced.launch), rel=1e-12)
    assert parts["update"] == pytest.approx(
        kernel_time.price_kernels(update.kernel_list, "h100", constants()).seconds, rel=1e-12)


def test_a_device_other_than_the_target_is_refused():
    # (device= at its default, h100, names none: the target's device prices the run)
    with pytest.raises(InputError, match="--device a100-80gb"):
        estimates.estimate("one_net", samples=10, target=TPU, device="a100-80gb", bound=True)
    with pytest.raises(InputError, match="--device h100"):
        scaling.scaling("one_net", target=TPU, hardware=xla_cost.Hardware(device="h100"), bound=True)
    assert scaling.target_device(TPU, None) == "tpu-v5e" and scaling.target_device("H100", "h100") == "h100"


@pytest.mark.parametrize("argv", [
    ["sweep", "one_net", "--target", "tpu-v9"],
    ["scaling", "one_net", "--target", "tpu-v9"],
    ["estimate", "one_net", "--samples", "10", "--target", "tpu-v9"],
    ["step", "{dir}/step.py:train_step", "--args", "{dir}/step.py:make_args", "--target", "tpu-v9"],
])
def test_a_bad_target_is_one_line(capsys, tmp_path, argv):
    (tmp_path / "step.py").write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        def train_step(w, x):
            return w - jax.grad(lambda w: jnp.sum(x @ w))(w)
        def make_args():
            return jax.ShapeDtypeStruct((4, 2), jnp.float32), jax.ShapeDtypeStruct((3, 4), jnp.float32)
    """))
    one_line_refusal(capsys, [a.format(dir=tmp_path) for a in argv], ["compile target", "tpu-v9"])


def test_another_device_beside_a_target_is_one_line(capsys):
    one_line_refusal(capsys, ["estimate", "one_net", "--samples", "10", "--target", TPU, "--device", "h100"],
                     ["--device h100", "tpu-v5e"])


def test_a_target_with_time_or_the_jaxpr_counter_is_refused():
    with pytest.raises(InputError, match="timed"):
        xla_cost.analyze_step(train_step, *_arguments(), target=GPU, timed=True)
    with pytest.raises(InputError, match="counter"):
        xla_cost.analyze_step(train_step, *_arguments(), target=GPU, counter="jaxpr")
