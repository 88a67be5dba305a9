"""Training steps written the way public repositories write them, for the tests.

Each case is a user's own step function (the thing ``xla_cost.analyze_step``
takes), written here from scratch at small sizes after the pattern of a
well-known public codebase named in its docstring: Flax's ImageNet and MNIST
examples, the Flax NNX MNIST tutorial, a nanoGPT-style Linen port with
gradient accumulation, and a data-parallel step jitted with shardings over a
mesh. None of them is bent to fit xla_cost.

A case (`StepCase`) holds the step, example arguments (states abstract, built
with ``jax.eval_shape``/``nnx.eval_shape`` as the repository builds them;
batches concrete and small), and closed forms derived from the dimensions:

- ``forward_flops``: the model's forward pass at the step's batch, as XLA's
  cost analysis counts it: every convolution and matmul at 2 FLOP per
  multiply-add over the kernel taps that land on real input
  (`tests.formulas.valid_taps`), plus the elementwise work listed term by term
  in ``forward_terms`` (bias adds, BatchNorm, LayerNorm, GELU, ReLU, pooling,
  softmax, residual adds). tests/step/test_repo_steps.py checks it against
  ``jax.jit(model.apply).lower(...).compile().cost_analysis()["flops"]``
  within 1%. The loss is not in it: ``loss_flops`` estimates the loss
  function's own forward work (the cross-entropy, and in the ImageNet step its
  L2 penalty over the kernels); at these shapes it is under 0.5% of
  ``forward_flops``, so a step's forward phase is ``forward_flops`` within 1%.
- ``backward_to_forward``: the closed-form ratio on the convolutions and
  matmuls (``matmul_flops``): 2 for every layer whose input gradient is needed
  (the weight gradient and the input gradient each cost a forward), 1 for the
  first layer (nothing needs the gradient of the images; a GPT's first layer
  is an embedding lookup, so its ratio is exactly 2). The elementwise terms are
  left out of it: their backward is not a multiple of their forward.
- ``parameters``: the number of trainable parameters.
- ``optimizer``: the optax transformation the step's state holds, so a test can
  compare the step's update FLOP with ``xla_cost.analyze(model, inputs,
  optimizer=tx)``; ``model``, ``inputs`` and ``loss`` make that call.

Cases are built lazily (`case(name)`, `CASES`): importing this module does no
JAX work. The figures are per call of the step as written: ``imagenet`` is one
device's step of a ``pmap`` (its batch is one device's); ``imagenet_pmap`` and
``data_parallel`` run on 8 devices, and their figures are for the whole batch
(``forward_flops_per_device``: one device's share).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from flax.training import train_state
from jax import lax

from tests.formulas import out_size, valid_taps


@dataclasses.dataclass(frozen=True)
class StepCase:
    """One training step as a repository writes it, with its closed forms."""

    name: str
    step: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    forward_terms: dict[str, int]
    """The model's forward FLOP by term; ``matmul_terms`` names the convolutions and matmuls."""
    matmul_terms: tuple[str, ...]
    first_layer: str | None
    """The matmul term whose input gradient nothing needs (None: every one's is needed)."""
    parameters: int
    optimizer: optax.GradientTransformation
    loss_flops: int
    """The loss function's forward work beyond the model (an op-by-op estimate)."""
    model: Any = None
    inputs: Any = None
    loss: Callable[[Any, Any], Any] | None = None
    """``loss(outputs, targets)`` for ``analyze`` when not its default (integer-label cross-entropy)."""
    targets: Any = None
    """Abstract targets for ``loss`` (``analyze`` derives others for a loss it does not know)."""
    axis_names: tuple[str, ...] = ()
    """Axis names the step uses and leaves to its caller to bind (``pmap``'s ``batch``)."""
    devices: int = 1
    """Devices the step runs on; its batch is split evenly over them."""
    notes: str = ""

    @property
    def forward_flops(self) -> int:
        return sum(self.forward_terms.values())

    @property
    def matmul_flops(self) -> int:
        return sum(self.forward_terms[t] for t in self.matmul_terms)

    @property
    def backward_to_forward(self) -> float:
        first = self.forward_terms[self.first_layer] if self.first_layer else 0
        return (2 * self.matmul_flops - first) / self.matmul_flops

    @property
    def forward_flops_per_device(self) -> float:
        return self.forward_flops / self.devices

    @property
    def gradient_allreduce_bytes(self) -> int:
        """Bytes of the gradient all-reduce of a data-parallel step: every float32 parameter's gradient."""
        return 4 * self.parameters if self.devices > 1 or self.axis_names else 0


# ================================================================ closed forms: pieces


def same_pads(i: int, k: int, s: int) -> tuple[int, int]:
    """'SAME' padding (lax.padtype_to_pads): output ceil(i/s), the padding split low/high."""
    total = max((-(-i // s) - 1) * s + k - i, 0)
    return total // 2, total - total // 2


def conv_taps_flops(b: int, size: int, c_in: int, c_out: int, k: int, s: int, pad: tuple[int, int]) -> int:
    """A k x k convolution over a square image: 2 FLOP per multiply-add over the taps on real input."""
    return 2 * b * c_in * c_out * valid_taps(size, k, s, pad) ** 2


def batch_norm_train_flops(n: int, channels: int) -> int:
    """BatchNorm with batch statistics (flax.linen.BatchNorm, use_running_average=False), as XLA counts it.

    Per element: x*x, the two sums (mean, mean of squares), x - mean, * (scale
    * rsqrt(var + eps)), + bias: 6. Per channel: the statistics' divisions by
    the count and by the pmean's axis size, mean**2, mean2 - mean**2, max(0, .),
    + eps, * scale, the two running averages (2 mul + 1 add each): 14 as XLA
    counts them (rsqrt is a transcendental)."""
    return 6 * n + 14 * channels


def layer_norm_flops(rows: int, features: int) -> int:
    """flax.linen.LayerNorm over the last axis. Per element: x*x, the two sums,
    x - mean, rsqrt(var + eps) * scale (broadcast to every element), * that,
    + bias: 7. Per row: the two divisions, mean**2, the subtraction, max(0, .)
    and + eps, 6 in the jaxpr, 5 as XLA counts them."""
    return 7 * rows * features + 5 * rows


GELU_FLOPS = 8
"""jax.nn.gelu (tanh approximation): x**3, * 0.044715, + x, * sqrt(2/pi), 1 + tanh,
* 0.5, * x: 8 per element (tanh is a transcendental)."""


def causal_softmax_flops(heads_rows: int, t: int) -> int:
    """Scaled, causally masked softmax over ``heads_rows`` rows of t scores.

    Per score: the scale (1), the mask's select (1), and jax.nn.softmax's row
    max, shift, row sum and normalisation, 4 per score less 1 per row as XLA
    counts them (exp is a transcendental). The mask (tril, == 0) is a constant
    the model builds once; XLA's fusion recomputes it and the scale in each
    consumer of the scores, which this leaves out (see `gpt_case`)."""
    return 6 * heads_rows * t - heads_rows


def softmax_cross_entropy_flops(b: int, c: int) -> int:
    """Mean of optax.softmax_cross_entropy over (b, c) logits with one-hot labels
    (jax.nn.one_hot), an estimate: the one-hot compare, log_softmax (max,
    shift, exp, sum, log, subtract), labels * log_softmax and its sum: about 7
    per logit; per example the max's checks, the negation and the mean: about 8.
    (XLA: 625 at b=8, c=10; this gives 624.)"""
    return 7 * b * c + 8 * b


def integer_cross_entropy_flops(b: int, c: int) -> int:
    """Mean optax.softmax_cross_entropy_with_integer_labels (tests.formulas.loss_flops)."""
    return 3 * b * c + 12 * b


# ================================================================ 1. Flax ImageNet example


class ResNetBlock(nn.Module):
    """The ImageNet example's basic residual block (two 3x3 convolutions)."""

    filters: int
    conv: Callable[..., nn.Module]
    norm: Callable[..., nn.Module]
    act: Callable[[jax.Array], jax.Array]
    strides: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x):
        residual = x
        y = self.conv(self.filters, (3, 3), self.strides)(x)
        y = self.norm()(y)
        y = self.act(y)
        y = self.conv(self.filters, (3, 3))(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = self.conv(self.filters, (1, 1), self.strides, name="conv_proj")(residual)
            residual = self.norm(name="norm_proj")(residual)
        return self.act(residual + y)


class ResNet(nn.Module):
    """The ImageNet example's ResNet: 7x7/2 stem, BatchNorm with ``axis_name='batch'``
    (written for ``pmap``), 3x3/2 max-pool, stages of blocks, global mean, Dense."""

    stage_sizes: Sequence[int]
    num_classes: int
    num_filters: int = 64
    dtype: Any = jnp.float32
    act: Callable[[jax.Array], jax.Array] = nn.relu

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = functools.partial(nn.Conv, use_bias=False, dtype=self.dtype)
        norm = functools.partial(
            nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5,
            dtype=self.dtype, axis_name="batch",
        )
        x = conv(self.num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], name="conv_init")(x)
        x = norm(name="bn_init")(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for i, block_size in enumerate(self.stage_sizes):
            for j in range(block_size):
                strides = (2, 2) if i > 0 and j == 0 else (1, 1)
                x = ResNetBlock(self.num_filters * 2**i, strides=strides, conv=conv, norm=norm, act=self.act)(x)
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dense(self.num_classes, dtype=self.dtype)(x)
        return jnp.asarray(x, self.dtype)


ResNetTiny = functools.partial(ResNet, stage_sizes=(1, 1), num_filters=32)

IMAGENET = {"batch": 8, "image_size": 32, "num_filters": 32, "stage_sizes": (1, 1), "num_classes": 10}
"""Per-device batch 8 of 32x32 images; stages of 32 and 64 filters."""


class ImageNetTrainState(train_state.TrainState):
    """The example's TrainState: BatchNorm statistics beside the parameters.
    (Its ``dynamic_scale`` is None in float32, as the example leaves it off CPU and TPU.)"""

    batch_stats: Any
    dynamic_scale: Any = None


def cross_entropy_loss(logits, labels):
    one_hot_labels = jax.nn.one_hot(labels, num_classes=logits.shape[-1])
    xentropy = optax.softmax_cross_entropy(logits=logits, labels=one_hot_labels)
    return jnp.mean(xentropy)


def compute_metrics(logits, labels):
    loss = cross_entropy_loss(logits, labels)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    metrics = {"loss": loss, "accuracy": accuracy}
    metrics = lax.pmean(metrics, axis_name="batch")
    return metrics


def create_learning_rate_fn(base_learning_rate: float, warmup_epochs: int, num_epochs: int, steps_per_epoch: int):
    """Linear warmup, then cosine decay (the ImageNet example's schedule)."""
    warmup_fn = optax.linear_schedule(
        init_value=0.0, end_value=base_learning_rate, transition_steps=warmup_epochs * steps_per_epoch,
    )
    cosine_epochs = max(num_epochs - warmup_epochs, 1)
    cosine_fn = optax.cosine_decay_schedule(init_value=base_learning_rate, decay_steps=cosine_epochs * steps_per_epoch)
    return optax.join_schedules(schedules=[warmup_fn, cosine_fn], boundaries=[warmup_epochs * steps_per_epoch])


def imagenet_train_step(state, batch, learning_rate_fn):
    """Perform a single training step (the example's ``train_step``, run under ``pmap``)."""

    def loss_fn(params):
        logits, new_model_state = state.apply_fn(
            {"params": params, "batch_stats": state.batch_stats}, batch["image"], mutable=["batch_stats"],
        )
        loss = cross_entropy_loss(logits, batch["label"])
        weight_penalty_params = jax.tree_util.tree_leaves(params)
        weight_decay = 0.0001
        weight_l2 = sum(jnp.sum(x**2) for x in weight_penalty_params if x.ndim > 1)
        weight_penalty = weight_decay * 0.5 * weight_l2
        loss = loss + weight_penalty
        return loss, (new_model_state, logits)

    step = state.step
    lr = learning_rate_fn(step)
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    aux, grads = grad_fn(state.params)
    # Re-use same axis_name as in the call to `pmap(...train_step...)` below.
    grads = lax.pmean(grads, axis_name="batch")
    new_model_state, logits = aux[1]
    metrics = compute_metrics(logits, batch["label"])
    metrics["learning_rate"] = lr
    new_state = state.apply_gradients(grads=grads, batch_stats=new_model_state["batch_stats"])
    return new_state, metrics


def _imagenet_state(rng, model, image_size, learning_rate_fn):
    tx = optax.sgd(learning_rate=learning_rate_fn, momentum=0.9, nesterov=True)
    variables = jax.jit(functools.partial(model.init, train=False))(
        {"params": rng}, jnp.ones((1, image_size, image_size, 3), model.dtype),
    )
    return ImageNetTrainState.create(
        apply_fn=model.apply, params=variables["params"], tx=tx, batch_stats=variables["batch_stats"],
    )


def resnet_forward_terms(b: int, size: int, width: int, stage_sizes: Sequence[int], classes: int) -> dict[str, int]:
    """The ResNet's forward FLOP by term, in training mode (batch statistics)."""
    terms: dict[str, int] = {}
    h = out_size(size, 7, 2, 3)
    terms["conv_init"] = conv_taps_flops(b, size, 3, width, 7, 2, (3, 3))
    terms["bn_init"] = batch_norm_train_flops(b * h * h * width, width)
    terms["relu_init"] = b * h * h * width
    h_pool = -(-h // 2)
    terms["max_pool"] = 8 * b * h_pool * h_pool * width  # 9 - 1 compares per output (padding included)
    h, c_in, index = h_pool, width, 0
    for i, blocks in enumerate(stage_sizes):
        filters = width * 2**i
        for j in range(blocks):
            s = 2 if i > 0 and j == 0 else 1
            h_out = -(-h // s)
            n = b * h_out * h_out * filters
            name = f"ResNetBlock_{index}"
            terms[f"{name}/Conv_0"] = conv_taps_flops(b, h, c_in, filters, 3, s, same_pads(h, 3, s))
            terms[f"{name}/Conv_1"] = conv_taps_flops(b, h_out, filters, filters, 3, 1, (1, 1))
            norms = 2
            if s != 1 or c_in != filters:
                terms[f"{name}/conv_proj"] = conv_taps_flops(b, h, c_in, filters, 1, s, same_pads(h, 1, s))
                norms = 3
            terms[f"{name}/norms"] = norms * batch_norm_train_flops(n, filters)
            terms[f"{name}/relu_add_relu"] = 3 * n
            h, c_in, index = h_out, filters, index + 1
    terms["mean"] = b * h * h * c_in  # (h*h - 1) adds and a division per (example, channel)
    terms["Dense_0"] = 2 * b * c_in * classes
    terms["Dense_0/bias"] = b * classes
    return terms


RESNET_MATMULS_SUFFIXES = ("conv_init", "/Conv_0", "/Conv_1", "/conv_proj", "Dense_0")


def resnet_parameters(width: int, stage_sizes: Sequence[int], classes: int) -> tuple[int, int, int]:
    """(parameters, kernel parameters (ndim > 1: the L2 penalty's), kernel tensors)."""
    kernels = [49 * 3 * width]
    norms = width  # BatchNorm channels (scale and bias each)
    c_in = width
    for i, blocks in enumerate(stage_sizes):
        filters = width * 2**i
        for j in range(blocks):
            s = 2 if i > 0 and j == 0 else 1
            kernels += [9 * c_in * filters, 9 * filters * filters]
            norms += 2 * filters
            if s != 1 or c_in != filters:
                kernels.append(c_in * filters)
                norms += filters
            c_in = filters
    kernels.append(c_in * classes)
    return sum(kernels) + 2 * norms + classes, sum(kernels), len(kernels)


def _imagenet_parts():
    cfg = IMAGENET
    b, size, width, classes = cfg["batch"], cfg["image_size"], cfg["num_filters"], cfg["num_classes"]
    stages = cfg["stage_sizes"]
    model = ResNet(stage_sizes=stages, num_classes=classes, num_filters=width)
    learning_rate_fn = create_learning_rate_fn(0.1 * b / 256, warmup_epochs=1, num_epochs=4, steps_per_epoch=100)
    state = jax.eval_shape(functools.partial(_imagenet_state, model=model, image_size=size,
                                             learning_rate_fn=learning_rate_fn), jax.random.key(0))
    batch = {
        "image": jnp.zeros((b, size, size, 3), jnp.float32),
        "label": jnp.arange(b, dtype=jnp.int32) % classes,
    }
    terms = resnet_forward_terms(b, size, width, stages, classes)
    parameters, kernel_parameters, kernels = resnet_parameters(width, stages, classes)
    # the loss function: cross-entropy; the penalty: x**2 and the sum per kernel
    # element, the Python sum's adds, * (wd * 0.5), + loss
    loss = softmax_cross_entropy_flops(b, classes) + 2 * kernel_parameters + kernels + 2
    common = dict(  # noqa: C408 - keywords shared by the two ImageNet cases
        forward_terms=terms,
        matmul_terms=tuple(t for t in terms if t.endswith(RESNET_MATMULS_SUFFIXES)),
        first_layer="conv_init",
        parameters=parameters,
        optimizer=state.tx,
        loss_flops=loss,
        model=model,
        inputs=jax.ShapeDtypeStruct(batch["image"].shape, jnp.float32),
        loss=cross_entropy_loss,
        targets=jax.ShapeDtypeStruct((b,), jnp.int32),
        axis_names=("batch",),
    )
    return state, batch, learning_rate_fn, common


def imagenet_case() -> StepCase:
    """The ImageNet example's ``train_step(state, batch, learning_rate_fn)`` with its
    schedule bound by ``functools.partial`` (here: ``kwargs``), as the example does
    before ``pmap``. Its gradient and metric ``pmean`` name the axis ``batch``,
    unbound outside ``pmap``: the caller binds it (``axis_names``)."""
    state, batch, learning_rate_fn, common = _imagenet_parts()
    return StepCase(
        name="imagenet", step=imagenet_train_step, args=(state, batch),
        kwargs={"learning_rate_fn": learning_rate_fn},
        notes="one device's step of a pmap; the L2 penalty is in the loss function, not the model",
        **common,
    )


def imagenet_pmap_case() -> StepCase:
    """The same step as the example runs it: ``jax.pmap(functools.partial(train_step,
    learning_rate_fn=...), axis_name='batch')`` over 8 devices, with the state
    replicated (``flax.jax_utils.replicate``) and the batch split (``shard``).
    The closed forms are for all 8 devices (``forward_flops_per_device`` is
    the ``imagenet`` case's)."""
    state, batch, learning_rate_fn, common = _imagenet_parts()
    devices = 8
    p_train_step = jax.pmap(functools.partial(imagenet_train_step, learning_rate_fn=learning_rate_fn),
                            axis_name="batch")
    replicated = jax.tree.map(lambda a: jax.ShapeDtypeStruct((devices, *a.shape), a.dtype), state)
    sharded = jax.tree.map(lambda a: jnp.stack([a] * devices), batch)
    whole = {k: devices * v for k, v in common["forward_terms"].items()}
    return StepCase(
        name="imagenet_pmap", step=p_train_step, args=(replicated, sharded), kwargs={},
        notes=("pmapped over 8 devices: a leading device axis on every argument; figures for all 8 devices; "
               "model and inputs are one device's, as for imagenet"),
        **{**common, "forward_terms": whole, "loss_flops": devices * common["loss_flops"], "axis_names": (),
           "devices": devices},
    )


# ================================================================ 2. Flax MNIST example (Linen)


class CNN(nn.Module):
    """The MNIST example's CNN."""

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(features=32, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = nn.Conv(features=64, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dense(features=256)(x)
        x = nn.relu(x)
        x = nn.Dense(features=10)(x)
        return x


MNIST_BATCH = 8


@jax.jit
def apply_model(state, images, labels):
    """Computes gradients, loss and accuracy for a single batch."""

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, images)
        one_hot = jax.nn.one_hot(labels, 10)
        loss = jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=one_hot))
        return loss, logits

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(state.params)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    return grads, loss, accuracy


@jax.jit
def update_model(state, grads):
    return state.apply_gradients(grads=grads)


def mnist_train_step(state, images, labels):
    """The body of the example's ``train_epoch`` loop: two jitted calls."""
    grads, loss, accuracy = apply_model(state, images, labels)
    state = update_model(state, grads)
    return state, loss, accuracy


def mnist_forward_terms(b: int) -> dict[str, int]:
    """The MNIST CNN (28x28x1 images): conv 3x3 SAME with bias, relu, 2x2
    average pool (3 adds and a division per output), twice; Dense 3136 -> 256,
    relu, Dense 256 -> 10."""
    n1, p1 = b * 28 * 28 * 32, b * 14 * 14 * 32
    n2, p2 = b * 14 * 14 * 64, b * 7 * 7 * 64
    return {
        "Conv_0": conv_taps_flops(b, 28, 1, 32, 3, 1, (1, 1)),
        "Conv_0/bias_relu": 2 * n1,
        "avg_pool_0": 4 * p1,
        "Conv_1": conv_taps_flops(b, 14, 32, 64, 3, 1, (1, 1)),
        "Conv_1/bias_relu": 2 * n2,
        "avg_pool_1": 4 * p2,
        "Dense_0": 2 * b * 3136 * 256,
        "Dense_0/bias_relu": 2 * b * 256,
        "Dense_1": 2 * b * 256 * 10,
        "Dense_1/bias": b * 10,
    }


MNIST_PARAMETERS = (9 * 32 + 32) + (9 * 32 * 64 + 64) + (3136 * 256 + 256) + (256 * 10 + 10)
"""conv 3x3x1x32 + bias, conv 3x3x32x64 + bias, Dense 3136x256 + bias, Dense 256x10 + bias."""


def _mnist_state(rng, learning_rate: float, momentum: float):
    cnn = CNN()
    params = cnn.init(rng, jnp.ones([1, 28, 28, 1]))["params"]
    tx = optax.sgd(learning_rate, momentum)
    return train_state.TrainState.create(apply_fn=cnn.apply, params=params, tx=tx)


def _one_hot_loss(logits, labels):
    return jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=jax.nn.one_hot(labels, 10)))


def _mnist_case(name: str, step: Callable[..., Any], notes: str) -> StepCase:
    b = MNIST_BATCH
    state = jax.eval_shape(functools.partial(_mnist_state, learning_rate=0.1, momentum=0.9), jax.random.key(0))
    images = jnp.zeros((b, 28, 28, 1), jnp.float32)
    labels = jnp.arange(b, dtype=jnp.int32) % 10
    terms = mnist_forward_terms(b)
    return StepCase(
        name=name, step=step, args=(state, images, labels), kwargs={},
        forward_terms=terms, matmul_terms=("Conv_0", "Conv_1", "Dense_0", "Dense_1"), first_layer="Conv_0",
        parameters=MNIST_PARAMETERS, optimizer=state.tx, loss_flops=softmax_cross_entropy_flops(b, 10),
        model=CNN(), inputs=jax.ShapeDtypeStruct(images.shape, jnp.float32), loss=_one_hot_loss,
        targets=jax.ShapeDtypeStruct((b,), jnp.int32), notes=notes,
    )


def mnist_case() -> StepCase:
    """The MNIST example's step: ``apply_model`` and ``update_model`` (both
    ``@jax.jit``) called in turn, bare (not jitted as a whole)."""
    return _mnist_case("mnist", mnist_train_step, "two nested jits: apply_model, then update_model")


def mnist_donated_case() -> StepCase:
    """The same step jitted as a whole with its state donated: ``jax.jit(step, donate_argnums=0)``."""
    return _mnist_case("mnist_donated", jax.jit(mnist_train_step, donate_argnums=0),
                       "jax.jit(train_step, donate_argnums=0) around the two nested jits")


# ================================================================ 3. Flax NNX MNIST tutorial


class NnxCNN(nnx.Module):
    """The NNX MNIST tutorial's CNN (the same layers as the Linen example's)."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 32, kernel_size=(3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(32, 64, kernel_size=(3, 3), rngs=rngs)
        self.avg_pool = functools.partial(nnx.avg_pool, window_shape=(2, 2), strides=(2, 2))
        self.linear1 = nnx.Linear(3136, 256, rngs=rngs)
        self.linear2 = nnx.Linear(256, 10, rngs=rngs)

    def __call__(self, x):
        x = self.avg_pool(nnx.relu(self.conv1(x)))
        x = self.avg_pool(nnx.relu(self.conv2(x)))
        x = x.reshape(x.shape[0], -1)  # flatten
        x = nnx.relu(self.linear1(x))
        x = self.linear2(x)
        return x


def nnx_loss_fn(model: NnxCNN, batch):
    logits = model(batch["image"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch["label"]).mean()
    return loss, logits


@nnx.jit
def nnx_train_step(model: NnxCNN, optimizer: nnx.Optimizer, metrics: nnx.MultiMetric, batch):
    """Train for a single step."""
    grad_fn = nnx.value_and_grad(nnx_loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])  # In-place updates.
    optimizer.update(model, grads)  # In-place updates.


def nnx_case() -> StepCase:
    """The NNX tutorial's ``@nnx.jit train_step(model, optimizer, metrics, batch)``:
    it returns nothing and updates its arguments in place. The model, the
    optimizer (``nnx.Optimizer(model, optax.adamw(0.005, 0.9), wrt=nnx.Param)``:
    flax 0.12 requires ``wrt`` and ``update(model, grads)``; it holds no model)
    and the metrics are abstract (``nnx.eval_shape``)."""
    b = MNIST_BATCH
    tx = optax.adamw(0.005, 0.9)
    model = nnx.eval_shape(lambda: NnxCNN(rngs=nnx.Rngs(0)))
    optimizer = nnx.eval_shape(lambda: nnx.Optimizer(NnxCNN(rngs=nnx.Rngs(0)), tx, wrt=nnx.Param))
    metrics = nnx.eval_shape(lambda: nnx.MultiMetric(
        accuracy=nnx.metrics.Accuracy(), loss=nnx.metrics.Average("loss"),
    ))
    batch = {
        "image": jnp.zeros((b, 28, 28, 1), jnp.float32),
        "label": jnp.arange(b, dtype=jnp.int32) % 10,
    }
    linen = mnist_forward_terms(b)
    rename = {"Conv_0": "conv1", "Conv_1": "conv2", "Dense_0": "linear1", "Dense_1": "linear2"}
    terms = {"/".join([rename.get(k.split("/")[0], k.split("/")[0]), *k.split("/")[1:]]): v for k, v in linen.items()}
    return StepCase(
        name="nnx", step=nnx_train_step, args=(model, optimizer, metrics, batch), kwargs={},
        forward_terms=terms, matmul_terms=("conv1", "conv2", "linear1", "linear2"), first_layer="conv1",
        parameters=MNIST_PARAMETERS, optimizer=tx, loss_flops=integer_cross_entropy_flops(b, 10),
        model=model, inputs=jax.ShapeDtypeStruct(batch["image"].shape, jnp.float32),
        notes="updates model, optimizer and metrics in place; returns None",
    )


# ================================================================ 4. nanoGPT-style Linen port, gradient accumulation


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 256
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 128
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    config: GPTConfig

    @nn.compact
    def __call__(self, x, deterministic: bool):
        cfg = self.config
        B, T, C = x.shape
        qkv = nn.Dense(3 * C, name="c_attn")(x)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q = q.reshape(B, T, cfg.n_head, C // cfg.n_head).transpose(0, 2, 1, 3)  # (B, nh, T, hs)
        k = k.reshape(B, T, cfg.n_head, C // cfg.n_head).transpose(0, 2, 1, 3)
        v = v.reshape(B, T, cfg.n_head, C // cfg.n_head).transpose(0, 2, 1, 3)
        att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(k.shape[-1]))
        mask = jnp.tril(jnp.ones((T, T))).reshape((1, 1, T, T))
        att = jnp.where(mask == 0, float("-inf"), att)
        att = jax.nn.softmax(att, axis=-1)
        att = nn.Dropout(cfg.dropout)(att, deterministic=deterministic)
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, C)
        y = nn.Dense(C, name="c_proj")(y)
        return nn.Dropout(cfg.dropout)(y, deterministic=deterministic)


class MLP(nn.Module):
    config: GPTConfig

    @nn.compact
    def __call__(self, x, deterministic: bool):
        x = nn.Dense(4 * self.config.n_embd, name="c_fc")(x)
        x = nn.gelu(x)
        x = nn.Dense(self.config.n_embd, name="c_proj")(x)
        return nn.Dropout(self.config.dropout)(x, deterministic=deterministic)


class Block(nn.Module):
    config: GPTConfig

    @nn.compact
    def __call__(self, x, deterministic: bool):
        x = x + CausalSelfAttention(self.config, name="attn")(nn.LayerNorm(epsilon=1e-5, name="ln_1")(x), deterministic)
        x = x + MLP(self.config, name="mlp")(nn.LayerNorm(epsilon=1e-5, name="ln_2")(x), deterministic)
        return x


class GPT(nn.Module):
    """A nanoGPT port: learned positions, pre-LayerNorm blocks, lm_head tied to wte."""

    config: GPTConfig

    @nn.compact
    def __call__(self, idx, deterministic: bool = True):
        cfg = self.config
        _, t = idx.shape
        assert t <= cfg.block_size, f"Cannot forward sequence of length {t}, block size is only {cfg.block_size}"
        pos = jnp.arange(0, t, dtype=jnp.int32)[None]  # shape (1, t)
        wte = nn.Embed(cfg.vocab_size, cfg.n_embd, name="wte")
        tok_emb = wte(idx)  # (b, t, n_embd)
        pos_emb = nn.Embed(cfg.block_size, cfg.n_embd, name="wpe")(pos)  # (1, t, n_embd)
        x = nn.Dropout(cfg.dropout)(tok_emb + pos_emb, deterministic=deterministic)
        for i in range(cfg.n_layer):
            x = Block(cfg, name=f"h_{i}")(x, deterministic)
        x = nn.LayerNorm(epsilon=1e-5, name="ln_f")(x)
        return wte.attend(x)  # weight tying


GPT_CONFIG = GPTConfig()
GPT_MICRO_BATCH = 2
GRADIENT_ACCUMULATION_STEPS = 4


def gpt_optimizer(learning_rate: float = 6e-4, warmup_steps: int = 10, decay_steps: int = 100):
    """nanoGPT's recipe: clip the global norm at 1, AdamW (0.9, 0.95) with a
    warmup-cosine schedule and weight decay 0.1 on the matrices only."""
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=learning_rate, warmup_steps=warmup_steps, decay_steps=decay_steps,
        end_value=learning_rate / 10,
    )

    def decay_mask(params):
        return jax.tree.map(lambda p: p.ndim >= 2, params)

    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=0.1, mask=decay_mask),
    )


def gpt_train_step(state, batch):
    """One optimizer step over GRADIENT_ACCUMULATION_STEPS micro-batches:
    gradients summed in a ``lax.scan``, then divided."""

    def loss_fn(params, x, y):
        logits = state.apply_fn({"params": params}, x, deterministic=False)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    x, y = batch
    x = x.reshape(GRADIENT_ACCUMULATION_STEPS, -1, x.shape[-1])
    y = y.reshape(GRADIENT_ACCUMULATION_STEPS, -1, y.shape[-1])

    def accumulate(carry, micro_batch):
        loss_sum, grad_sum = carry
        loss, grads = jax.value_and_grad(loss_fn)(state.params, *micro_batch)
        return (loss_sum + loss, jax.tree.map(jnp.add, grad_sum, grads)), None

    zeros = jax.tree.map(jnp.zeros_like, state.params)
    (loss, grads), _ = lax.scan(accumulate, (jnp.zeros(()), zeros), (x, y))
    grads = jax.tree.map(lambda g: g / GRADIENT_ACCUMULATION_STEPS, grads)
    state = state.apply_gradients(grads=grads)
    return state, {"loss": loss / GRADIENT_ACCUMULATION_STEPS}


def gpt_forward_terms(b: int, cfg: GPTConfig) -> dict[str, int]:
    """The port's forward FLOP on b sequences of block_size tokens."""
    t, d, heads = cfg.block_size, cfg.n_embd, cfg.n_head
    n = b * t  # tokens
    # nn.Embed looks up with jnp.take in "fill" mode: a select per element looked
    # up, and per token index the wrap of negative indices (lt, add, select) and
    # the bounds check (>= 0, < size, and): 6; the positions are constants, their
    # checks fold away but one per position. Then tok_emb + pos_emb.
    terms = {"wte": n * d + 6 * n, "wpe": t * d + t, "embeddings_add": n * d}
    for i in range(cfg.n_layer):
        p = f"h_{i}"
        terms[f"{p}/ln_1"] = layer_norm_flops(n, d)
        terms[f"{p}/attn/c_attn"] = 2 * n * d * 3 * d
        terms[f"{p}/attn/scores"] = 2 * b * heads * t * t * (d // heads)  # q @ k^T
        terms[f"{p}/attn/softmax"] = causal_softmax_flops(b * heads * t, t)
        terms[f"{p}/attn/values"] = 2 * b * heads * t * t * (d // heads)  # att @ v
        terms[f"{p}/attn/c_proj"] = 2 * n * d * d
        terms[f"{p}/ln_2"] = layer_norm_flops(n, d)
        terms[f"{p}/mlp/c_fc"] = 2 * n * d * 4 * d
        terms[f"{p}/mlp/gelu"] = GELU_FLOPS * n * 4 * d
        terms[f"{p}/mlp/c_proj"] = 2 * n * 4 * d * d
        terms[f"{p}/biases_residuals"] = n * (3 * d + d + 4 * d + d) + 2 * n * d
    terms["ln_f"] = layer_norm_flops(n, d)
    terms["lm_head"] = 2 * n * d * cfg.vocab_size  # wte.attend
    return terms


def gpt_parameters(cfg: GPTConfig) -> int:
    d = cfg.n_embd
    # per block: two LayerNorms (4d), c_attn (3d^2 + 3d), attn c_proj (d^2 + d),
    # c_fc (4d^2 + 4d), mlp c_proj (4d^2 + d): 12d^2 + 13d
    return cfg.vocab_size * d + cfg.block_size * d + cfg.n_layer * (12 * d * d + 13 * d) + 2 * d


def gpt_case() -> StepCase:
    """A nanoGPT-style Linen port's step with gradient accumulation over 4
    micro-batches of 2 sequences (``lax.scan``; sum, then divide), and
    ``optax.chain(clip_by_global_norm(1.0), adamw(warmup-cosine))``. The
    closed forms are for the whole batch of 8 sequences (the scan's 4 micro
    forwards). XLA counts 0.24% more than ``forward_flops``: its fusion
    recomputes the causal mask (iota, compare, select) and the scores' scale
    in each consumer of the scores, work the model does once."""
    cfg = GPT_CONFIG
    b = GPT_MICRO_BATCH * GRADIENT_ACCUMULATION_STEPS
    model = GPT(cfg)
    tx = gpt_optimizer()

    def create_state(rng):
        params = model.init(rng, jnp.zeros((1, cfg.block_size), jnp.int32))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    state = jax.eval_shape(create_state, jax.random.key(0))
    tokens = jnp.arange(b * (cfg.block_size + 1), dtype=jnp.int32).reshape(b, -1) % cfg.vocab_size
    batch = (tokens[:, :-1], tokens[:, 1:])
    terms = gpt_forward_terms(b, cfg)
    matmuls = tuple(k for k in terms if k.endswith(("c_attn", "scores", "values", "c_proj", "c_fc", "lm_head")))
    return StepCase(
        name="gpt", step=gpt_train_step, args=(state, batch), kwargs={},
        forward_terms=terms, matmul_terms=matmuls, first_layer=None, parameters=gpt_parameters(cfg),
        optimizer=tx, loss_flops=integer_cross_entropy_flops(b * cfg.block_size, cfg.vocab_size),
        model=model, inputs=jax.ShapeDtypeStruct((b, cfg.block_size), jnp.int32),
        notes="gradient accumulation: a lax.scan over 4 micro-batches; figures for all 8 sequences",
    )


# ================================================================ 6. data parallel over a mesh


class DataParallelMLP(nn.Module):
    """An MNIST MLP, as in JAX's data-parallel training examples."""

    features: Sequence[int] = (512, 512, 10)

    @nn.compact
    def __call__(self, x):
        for f in self.features[:-1]:
            x = nn.relu(nn.Dense(f)(x))
        return nn.Dense(self.features[-1])(x)


DATA_PARALLEL = {"devices": 8, "batch": 64, "inputs": 784}


def data_parallel_forward_terms(b: int, n_in: int, features: Sequence[int]) -> dict[str, int]:
    """Dense layers with biases, a ReLU after each but the last."""
    terms = {}
    for i, f in enumerate(features):
        last = i == len(features) - 1
        terms[f"Dense_{i}"] = 2 * b * n_in * f
        terms[f"Dense_{i}/bias" + ("" if last else "_relu")] = (1 if last else 2) * b * f
        n_in = f
    return terms


def data_parallel_case() -> StepCase:
    """A step jitted with ``in_shardings``/``out_shardings`` over a 1-D mesh of
    8 devices named ``data``: the batch split on ``data``, the state
    replicated. XLA's partitioner inserts the gradient all-reduce (every
    parameter's gradient: ``gradient_allreduce_bytes``); each device's forward
    is 1/8 of the whole (``forward_flops_per_device``)."""
    cfg = DATA_PARALLEL
    devices, b, n_in = cfg["devices"], cfg["batch"], cfg["inputs"]
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("data",))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    data_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    model = DataParallelMLP()
    tx = optax.adam(1e-3)

    def create_state(rng):
        params = model.init(rng, jnp.ones((1, n_in)))["params"]
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    def train_step(state, batch):
        def loss_fn(params):
            logits = state.apply_fn({"params": params}, batch["image"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    step = jax.jit(train_step, in_shardings=(replicated, data_sharding), out_shardings=(replicated, replicated))
    state = jax.eval_shape(create_state, jax.random.key(0))
    batch = jax.device_put({
        "image": jnp.zeros((b, n_in), jnp.float32),
        "label": jnp.arange(b, dtype=jnp.int32) % 10,
    }, data_sharding)
    features = model.features
    sizes = [n_in, *features]
    parameters = sum(i * o + o for i, o in itertools.pairwise(sizes))
    return StepCase(
        name="data_parallel", step=step, args=(state, batch), kwargs={},
        forward_terms=data_parallel_forward_terms(b, n_in, features),
        matmul_terms=tuple(f"Dense_{i}" for i in range(len(features))), first_layer="Dense_0",
        parameters=parameters, optimizer=tx, loss_flops=integer_cross_entropy_flops(b, features[-1]),
        model=model, inputs=jax.ShapeDtypeStruct((b, n_in), jnp.float32), devices=devices,
        notes="jit with in_shardings/out_shardings on a ('data',) mesh of 8 devices; batch 64, 8 per device",
    )


# ================================================================ the cases


CASES: dict[str, Callable[[], StepCase]] = {
    "imagenet": imagenet_case,
    "imagenet_pmap": imagenet_pmap_case,
    "mnist": mnist_case,
    "mnist_donated": mnist_donated_case,
    "nnx": nnx_case,
    "gpt": gpt_case,
    "data_parallel": data_parallel_case,
}
"""Each case's builder; `case(name)` builds it once."""


@functools.cache
def case(name: str) -> StepCase:
    return CASES[name]()
