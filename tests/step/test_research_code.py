"""Research code as people wrote it: models from public Flax codebases' patterns,
called the way their own training loops call them (tests/research_models.py)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

import xla_cost
from tests import research_models as R
from tests.formulas import dense_flops, loss_flops

B = 4


def _layers(report: xla_cost.Report) -> dict[str, xla_cost.LayerCosts]:
    return {layer.path: layer for layer in report.layers}


def _assert_rows_add_up(report: xla_cost.Report) -> None:
    for column, phase in (("forward_flops", "forward"), ("backward_flops", "backward"), ("update_flops", "update")):
        assert sum(getattr(layer, column) for layer in report.layers) == report.phases[phase].jaxpr_flops


# ------------------------------------------------------------------ axis names


@pytest.fixture(scope="module")
def data_parallel_report() -> xla_cost.Report:
    x = jax.ShapeDtypeStruct((B, 8, 8, 3), jnp.float32)
    return xla_cost.analyze(R.DataParallelResNet(), x, optimizer="sgd", per_layer=True)


def test_batchnorm_axis_name_is_bound_and_its_collectives_listed(data_parallel_report):
    report = data_parallel_report
    # 5 BatchNorms (bn_init, two per block) and 2 + 5*2 + 4*2 + 2 = 16 parameter
    # leaves... counted from the model: conv_init, 4 block convs (kernels only),
    # 5 BatchNorms (scale, bias) and the head (kernel, bias).
    n_bn = 1 + 2 * 2
    n_leaves = 1 + 4 + 2 * n_bn + 2
    # psum per BatchNorm forward (its batch statistics), one per BatchNorm in the
    # backward pass (the transpose of that psum), and the data-parallel gradient
    # all-reduce of every parameter leaf.
    assert report.collectives == {"psum": 2 * n_bn + n_leaves}
    assert any("axis names batch detected" in note for note in report.notes)
    assert not report.unsupported


def test_bound_axis_name_gives_the_same_counts_as_a_detected_one(data_parallel_report):
    x = jax.ShapeDtypeStruct((B, 8, 8, 3), jnp.float32)
    given = xla_cost.analyze(R.DataParallelResNet(), x, optimizer="sgd", axis_names=["batch"], counter="jaxpr")
    for phase in ("forward", "grad", "update"):
        assert given.phases[phase].jaxpr_flops == data_parallel_report.phases[phase].jaxpr_flops
    assert any("axis names batch bound" in note for note in given.notes)


def test_data_parallel_rows_match_the_model_and_add_up(data_parallel_report):
    rows = _layers(data_parallel_report)
    # conv_init: 3x3 SAME on 8x8, 3 -> 16 channels; head: Dense(16 -> 10) on B rows.
    assert rows["conv_init"].parameters == 3 * 3 * 3 * R.WIDTH
    assert rows["head"].forward_flops == dense_flops(B, R.WIDTH, R.CLASSES)
    _assert_rows_add_up(data_parallel_report)


def test_jaxpr_and_xla_agree_with_bound_axes(data_parallel_report):
    # Measured (jaxpr - XLA) / XLA: forward -3.9e-3, grad -1.8e-2, update 0: at
    # 8x8 pixels and 16 channels XLA's fusion recomputes BatchNorm's small
    # elementwise producers per consumer, a large share of so small a model.
    for phase in ("forward", "grad", "update"):
        costs = data_parallel_report.phases[phase]
        assert costs.jaxpr_flops == pytest.approx(costs.xla_flops, rel=0.02), phase


def test_a_model_naming_its_own_data_axis():
    report = xla_cost.analyze(
        R.CrossReplicaMean(), jax.ShapeDtypeStruct((B, 5), jnp.float32), optimizer="sgd",
        counter="jaxpr",
    )
    assert "psum" in report.collectives
    assert any("axis names data detected" in note for note in report.notes)


# ------------------------------------------------------------------ call arguments


def test_nnx_call_that_takes_rngs():
    model = nnx.eval_shape(lambda: R.NnxMnistCNN(rngs=nnx.Rngs(0)))
    report = xla_cost.analyze(
        model, jax.ShapeDtypeStruct((B, 28, 28, 1), jnp.float32), optimizer="adam", per_layer=True
    )
    rows = _layers(report)
    # linear1: Dense(16*7*7 -> 32) on B rows.
    assert rows["linear1"].forward_flops == dense_flops(B, 16 * 7 * 7, 32)
    # The dropout mask (its random bits, compare, select, scale) has a row of its own.
    assert rows["dropout"].parameters == 0 and rows["dropout"].forward_flops > 0
    assert not report.unsupported
    _assert_rows_add_up(report)


def test_linen_call_needing_keywords_rng_streams_and_a_method():
    tokens = jax.ShapeDtypeStruct((B, R.SEQ), jnp.int32)
    mask = jax.ShapeDtypeStruct((B, R.SEQ), jnp.bool_)
    report = xla_cost.analyze(
        R.MaskedEncoder(), tokens, optimizer="adam", per_layer=True,
        call_kwargs={"mask": mask},  # deterministic=False is set for training
    )
    rows = _layers(report)
    assert rows["head"].forward_flops == dense_flops(B * R.SEQ, R.D_MODEL, R.VOCAB)
    assert rows["drop"].forward_flops > 0 and rows["drop"].parameters == 0
    assert any("RNG streams" in note and "noise" in note for note in report.notes)
    assert not report.unsupported
    _assert_rows_add_up(report)

    embed = xla_cost.analyze(
        R.MaskedEncoder(), tokens, optimizer="sgd", method="embed", counter="jaxpr",
        loss=lambda outputs, targets: jnp.mean(outputs**2),
    )
    # Only the embedding table exists when the model is initialised through `embed`.
    assert embed.parameters == R.VOCAB * R.D_MODEL


def test_a_mask_in_call_kwargs_is_traced_not_folded():
    tokens = jax.ShapeDtypeStruct((B, R.SEQ), jnp.int32)
    abstract = xla_cost.analyze(
        R.MaskedEncoder(), tokens, optimizer="sgd", counter="jaxpr",
        call_kwargs={"mask": jax.ShapeDtypeStruct((B, R.SEQ), jnp.bool_)},
    )
    concrete = xla_cost.analyze(
        R.MaskedEncoder(), tokens, optimizer="sgd", counter="jaxpr",
        call_kwargs={"mask": jnp.ones((B, R.SEQ), jnp.bool_)},
    )
    assert abstract.phases["grad"].jaxpr_flops == concrete.phases["grad"].jaxpr_flops


def test_overridden_init_is_not_called():
    tokens = jax.ShapeDtypeStruct((B, R.SEQ), jnp.int32)
    report = xla_cost.analyze(R.GPTPort(), tokens, optimizer="adam", counter="jaxpr")
    cfg = R.GPTConfig
    # wte V*d, wpe T*d, per layer: LayerNorm 2d and Dense d*d + d; lm_head d*V.
    expected = (
        cfg.vocab_size * cfg.n_embd + cfg.block_size * cfg.n_embd
        + cfg.n_layer * (2 * cfg.n_embd + cfg.n_embd**2 + cfg.n_embd)
        + cfg.n_embd * cfg.vocab_size
    )
    assert report.parameters == expected


# ------------------------------------------------------------------ outputs


def test_tuple_output_error_names_the_structure_and_the_fix():
    x = jax.ShapeDtypeStruct((B, 12), jnp.float32)
    with pytest.raises(xla_cost.InputError) as info:
        xla_cost.analyze(R.TupleOutput(), x, optimizer="sgd")
    message = str(info.value)
    assert "(float32[4,10], float32[])" in message
    assert "output=0" in message and "loss=lambda outputs, targets: outputs[1]" in message
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("model, output", [(R.TupleOutput(), 0), (R.DictOutput(), "logits"),
                                           (R.StructOutput(), "logits"), (R.NamedTupleOutput(), "logits")])
def test_output_picks_the_logits(model, output):
    x = jax.ShapeDtypeStruct((B, 12), jnp.float32)
    picked = xla_cost.analyze(model, x, optimizer="sgd", output=output, counter="jaxpr")
    plain = xla_cost.analyze(R.LogitsOnly(), x, optimizer="sgd", counter="jaxpr")
    # The unused outputs are dead code: the same step as a logits-only model.
    for phase in ("forward", "grad", "update"):
        assert picked.phases[phase].jaxpr_flops == plain.phases[phase].jaxpr_flops


def test_model_returning_logits_and_loss_with_its_own_loss():
    tokens = jax.ShapeDtypeStruct((B, R.SEQ), jnp.int32)
    report = xla_cost.analyze(
        R.GPTPort(), tokens, optimizer="adam", call_kwargs={"targets": tokens},
        loss=lambda outputs, targets: outputs[1], per_layer=True,
    )
    cfg = R.GPTConfig
    assert _layers(report)["lm_head"].forward_flops == 2 * B * R.SEQ * cfg.n_embd * cfg.vocab_size
    _assert_rows_add_up(report)


def test_bad_output_selector():
    x = jax.ShapeDtypeStruct((B, 12), jnp.float32)
    with pytest.raises(xla_cost.InputError, match="output= naming one of the model's outputs"):
        xla_cost.analyze(R.TupleOutput(), x, optimizer="sgd", output=5, counter="jaxpr")


@pytest.mark.parametrize("output", [None, "logit", 0])
def test_a_dataclass_output_is_answered_with_its_fields(output):
    # gemma's Output(logits=..., cache=...): the default loss, a misspelt field, an index all say which fields
    # there are and name the logits' field
    x = jax.ShapeDtypeStruct((B, 12), jnp.float32)
    with pytest.raises(xla_cost.InputError) as info:
        xla_cost.analyze(R.StructOutput(), x, optimizer="sgd", output=output, counter="jaxpr")
    message = str(info.value)
    assert f"Output(logits=float32[{B},{R.CLASSES}], cache=NoneType)" in message
    assert "--output-index logits" in message and len(message.splitlines()) == 1


# ------------------------------------------------------------------ apply functions


@pytest.mark.parametrize("wrap", ["variables", "params"])
def test_apply_function_calling_linen_apply_has_the_module_rows(wrap):
    model = R.TwoLayerMLP()
    x = jax.ShapeDtypeStruct((B, 12), jnp.float32)
    variables = jax.eval_shape(model.init, jax.random.key(0), x)
    if wrap == "variables":  # TrainState.apply_fn with the variables dict
        fn, params = (lambda p, x: model.apply(p, x)), variables
    else:  # apply_fn({'params': params}, x), params = state.params
        fn, params = (lambda p, x: model.apply({"params": p}, x)), variables["params"]
    through_fn = xla_cost.analyze(fn, x, params=params, optimizer="adam", per_layer=True, counter="jaxpr")
    direct = xla_cost.analyze(model, x, optimizer="adam", per_layer=True, counter="jaxpr")
    assert [(r.path, r.parameters) for r in through_fn.layers] == [
        ("hidden", 12 * R.WIDTH + R.WIDTH), ("out", R.WIDTH * R.CLASSES + R.CLASSES), ("(remainder)", 0)
    ]
    assert through_fn.layers == direct.layers
    assert _layers(through_fn)["hidden"].forward_flops == dense_flops(B, 12, R.WIDTH)


# ------------------------------------------------------------------ errors


def test_error_hint_names_the_shape_when_shapes_are_the_cause():
    with pytest.raises(xla_cost.InputError, match="Check the input shape") as info:
        xla_cost.analyze(
            nnx.eval_shape(lambda: R.NnxMnistCNN(rngs=nnx.Rngs(0))),
            jax.ShapeDtypeStruct((B, 20, 20, 1), jnp.float32), optimizer="sgd",
        )
    assert "dot_general" in str(info.value)


def test_error_hint_for_a_missing_call_argument():
    tokens = jax.ShapeDtypeStruct((B, R.SEQ), jnp.int32)
    with pytest.raises(xla_cost.InputError) as info:
        xla_cost.analyze(R.MaskedEncoder(), tokens, optimizer="sgd")
    message = str(info.value)
    assert "mask" in message and "--call-kwarg" in message and "input shape" not in message


def test_error_hint_for_an_unrelated_failure():
    with pytest.raises(xla_cost.InputError) as info:
        xla_cost.analyze(R.Failing(), jax.ShapeDtypeStruct((B, 12), jnp.float32), optimizer="sgd")
    message = str(info.value)
    assert "RuntimeError: 'the config file was not found'" in message
    assert "input shape" not in message and "--debug" in message


def test_model_without_parameters():
    with pytest.raises(xla_cost.InputError, match="with no parameters"):
        xla_cost.analyze(R.NoParams(), jax.ShapeDtypeStruct((B, 12), jnp.float32), optimizer="sgd")


@pytest.mark.parametrize("dtype", ["nonsense", "int32", 3])
def test_api_rejects_a_bad_dtype(dtype):
    with pytest.raises(xla_cost.InputError, match="floating-point dtype"):
        xla_cost.analyze(R.LogitsOnly(), jax.ShapeDtypeStruct((B, 12), jnp.float32), optimizer="sgd", dtype=dtype)


def test_batch_beyond_int32_indexing():
    x = jax.ShapeDtypeStruct((10**12, 12), jnp.float32)
    with pytest.raises(xla_cost.InputError, match="at most 2,147,483,647"):
        xla_cost.analyze(R.LogitsOnly(), x, optimizer="sgd", counter="jaxpr")


class _OwnKeywordTypo(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.sum(nn.Dense(8)(x)[:, None, :], axes=1)  # jnp.sum takes axis=: the model's own bug


class _OwnMissingArgument(nn.Module):
    def scale(self, x, factor):
        return x * factor

    @nn.compact
    def __call__(self, x):
        return self.scale(nn.Dense(8)(x))  # the model's own call of its helper lacks `factor`


@pytest.mark.parametrize("model", [_OwnKeywordTypo(), _OwnMissingArgument()], ids=["keyword", "missing"])
def test_a_type_error_in_the_models_own_code_is_not_blamed_on_call_kwargs(model):
    # the TypeError names the function the model's code called (sum(), scale()), not the model's __call__, and
    # no call_kwargs were given: the model's own exception, with the hint for any other failure
    with pytest.raises(xla_cost.InputError) as info:
        xla_cost.analyze(model, jax.ShapeDtypeStruct((B, 12), jnp.float32), optimizer="sgd", counter="jaxpr")
    message = str(info.value)
    assert "TypeError" in message and "--debug" in message
    assert "call_kwargs" not in message.split("TypeError", 1)[1].split(".", 1)[1]  # not in the fix


def test_an_unexpected_keyword_given_in_call_kwargs_is_blamed_on_them():
    with pytest.raises(xla_cost.InputError, match="Drop that argument from call_kwargs"):
        xla_cost.analyze(R.MaskedEncoder(), jax.ShapeDtypeStruct((B, R.SEQ), jnp.int32), optimizer="sgd",
                         call_kwargs={"mask": jnp.ones((B, R.SEQ), jnp.bool_), "temperature": 2.0})


class _RefusesItsWidth(nn.Module):
    @nn.compact
    def __call__(self, x):
        y = nn.Dense(8)(x)
        if y.shape[-1] % 128:  # a kernel's block-size check (MaxDiffusion's flash attention)
            raise ValueError(f"bkv_compute={y.shape[-1]} must be a multiple of 128")
        return y


def test_the_models_own_error_is_quoted_so_the_refusal_reads_apart_from_it():
    # "...failed with ValueError: bkv_compute=8 must be a multiple of 128 instead." read as the model's words
    with pytest.raises(xla_cost.InputError) as info:
        xla_cost.analyze(_RefusesItsWidth(), jax.ShapeDtypeStruct((2, 4), jnp.float32), optimizer="sgd",
                         counter="jaxpr")
    message = str(info.value)
    assert "on which the model failed with ValueError: 'bkv_compute=8 must be a multiple of 128' instead." in message
    assert "128 instead" not in message and "\n" not in message


def test_a_loss_refusing_the_targets_made_for_it_says_they_were_made_and_asks_for_them():
    # a loss of the user's own, no targets=: the analysis makes targets like the outputs (float), else integer
    # labels, both of which this one refuses (it wants them B x 5 x 2); the refusal says they were made, and
    # quotes jax's own error ("... instead") without doubling it
    def loss(logits, pairs):
        return jnp.mean(logits[..., None] * pairs.reshape(B, 5, 2))

    with pytest.raises(xla_cost.InputError) as info:
        xla_cost.analyze(nn.Dense(5), jax.ShapeDtypeStruct((B, 12), jnp.float32), loss=loss, counter="jaxpr")
    message = str(info.value)
    assert (f"outputs float32[{B},5] and targets float32[{B},5] made by default (no targets= given), on which the "
            "loss failed with " in message)
    assert "instead instead" not in message and message.endswith("Pass targets= as the loss takes them, e.g. "
                                                                 "integer labels of shape batch x positions.")


def test_a_loss_of_integer_labels_gets_integer_targets_by_default_and_says_so():
    # an integer-label loss of the user's own, no targets=: targets made like the outputs (float) were refused
    # (jax-llm-examples' one-hot cross-entropy on integer t, the loss a refusal suggests); integer labels of the
    # outputs' shape without its last axis are made where the loss takes those alone, and a note says so
    def loss(logits, labels):
        return jnp.mean(jnp.take_along_axis(logits, labels[..., None], axis=-1))

    report = xla_cost.analyze(nn.Dense(5), jax.ShapeDtypeStruct((B, 12), jnp.float32), loss=loss, counter="jaxpr",
                              optimizer="sgd")
    [note] = [n for n in report.notes if n.startswith("targets: none given")]
    assert f"integer labels int32[{B}]" in note
    assert report.phases["forward"].flops >= 2 * B * 12 * 5  # the product x W


def test_the_default_loss_takes_logits_sharded_over_explicit_axes_on_their_classes():
    # Flax's examples/gemma built under jax.set_mesh of Explicit axes (jax.make_mesh's default) shards its logits'
    # vocabulary over the tensor axis: the default loss's gather of each label's logit was refused (jax's
    # ShardingTypeError "Use `.at[...].get(out_sharding=)` ..."). It is now that gather partitioned as on Auto axes.
    from jax.sharding import AxisType, PartitionSpec

    t, d, v = 8, 8, 16  # positions, width, vocabulary (split over the 2 devices of "model")
    mesh = jax.make_mesh((2,), ("model",), axis_types=(AxisType.Explicit,))
    x = jax.ShapeDtypeStruct((B, t, d), jnp.float32)
    with jax.set_mesh(mesh):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))
        head = nnx.eval_shape(lambda: nnx.Linear(d, v, use_bias=False, kernel_init=init, rngs=nnx.Rngs(0)))
        logits = jax.eval_shape(lambda m, x: m(x), head, x)
        assert logits.sharding.spec == PartitionSpec(None, None, "model")  # the classes sharded
        whole = xla_cost.analyze(head, x, optimizer="sgd", counter="jaxpr")
        per_device = xla_cost.analyze(head, x, optimizer="sgd")
    n = B * t
    # the whole step (jaxpr): the head's product 2 n d v and optax's cross-entropy over n positions of v classes
    assert whole.phases["forward"].flops == 2 * n * d * v + loss_flops(n, v)
    # each device: the product over its half of the classes, and its share of the loss (less than all of it)
    share = 2 * n * d * (v // 2)
    assert share < per_device.phases["forward"].flops < share + loss_flops(n, v)
    # no device gathers the logits (n x v floats): all-reduces of the n maxima, sums and label logits alone
    collectives = per_device.phases["forward"].communication
    assert collectives and all(c.kind == "all-reduce" and c.bytes <= 2 * n * 4 for c in collectives)


def test_the_one_hot_loss_takes_logits_sharded_over_explicit_axes_on_their_classes():
    # the named one-hot loss (MaxText's, T5X's custom gradient) on the same head: its backward rule returned the
    # targets' cotangent typed like the logits (classes over model), which jax refused ("Custom VJP bwd rule must
    # produce an output with the same type as the args"); it is now typed as the targets
    from jax.sharding import AxisType

    t, d, v = 8, 8, 16  # positions, width, vocabulary (split over the 2 devices of "model")
    mesh = jax.make_mesh((2,), ("model",), axis_types=(AxisType.Explicit,))
    x, labels = jax.ShapeDtypeStruct((B, t, d), jnp.float32), jax.ShapeDtypeStruct((B, t), jnp.int32)
    with jax.set_mesh(mesh):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "model"))
        head = nnx.eval_shape(lambda: nnx.Linear(d, v, use_bias=False, kernel_init=init, rngs=nnx.Rngs(0)))
        kw = dict(optimizer="sgd", loss=xla_cost.one_hot_cross_entropy, targets=labels)
        whole = xla_cost.analyze(head, x, counter="jaxpr", **kw)
        per_device = xla_cost.analyze(head, x, **kw)
    n = B * t
    # the loss op by op: one-hot eq + convert 2nv; max-shift n(v-1) + nv; exp (transcendental); sum n(v-1);
    # log (transcendental); log-softmax nv; x targets nv; sum n(v-1); neg n; mean n - 1 + 1 = 8nv - n
    one_hot_loss = 8 * n * v - n
    assert whole.phases["forward"].flops == 2 * n * d * v + one_hot_loss
    assert whole.phases["backward"].flops > 2 * n * d * v  # the kernel's gradient at least
    share = 2 * n * d * (v // 2)  # each device: the product over its half of the classes, a share of the loss
    assert share < per_device.phases["forward"].flops < share + one_hot_loss


def test_a_loss_of_ones_own_indexing_logits_sharded_over_explicit_axes_is_refused_naming_one_that_works():
    # a user's loss taking each label's logit as optax does, on logits sharded over a mesh's Explicit axes as
    # Flax's examples/gemma builds them: the refusal names the cause and losses that work, which then do
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    def gathering(o, t):
        return -jnp.take_along_axis(jax.nn.log_softmax(o), t[..., None], axis=-1).mean()

    mesh = jax.make_mesh((1, 1), ("fsdp", "tensor"), axis_types=(AxisType.Explicit, AxisType.Explicit))
    with jax.set_mesh(mesh):
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("fsdp", "tensor"))
        model = nnx.eval_shape(lambda: nnx.Linear(12, 5, kernel_init=init, rngs=nnx.Rngs(0)))
        x = jax.ShapeDtypeStruct((B, 12), jnp.float32, sharding=NamedSharding(mesh, PartitionSpec("fsdp", None)))
        labels = jax.ShapeDtypeStruct((B,), jnp.int32)
        with pytest.raises(xla_cost.InputError, match="sharded over a mesh's Explicit axes") as info:
            xla_cost.analyze(model, x, optimizer="sgd", counter="jaxpr", loss=gathering, targets=labels)
        assert "the default, loss=None, or a one-hot cross-entropy" in str(info.value)
        assert f"integer targets t (jax.ShapeDtypeStruct(({B},), jnp.int32)" in str(info.value)  # the labels' shape
        hint = lambda o, t: -(jax.nn.one_hot(t, o.shape[-1]) * jax.nn.log_softmax(o)).sum(-1).mean()  # noqa: E731
        given = xla_cost.analyze(model, x, optimizer="sgd", counter="jaxpr", loss=hint, targets=labels)
        made = xla_cost.analyze(model, x, optimizer="sgd", counter="jaxpr", loss=hint)  # as the refusal words it
        default = xla_cost.analyze(model, x, optimizer="sgd", counter="jaxpr")
    for report in (given, made, default):
        assert report.phases["forward"].flops >= 2 * B * 12 * 5  # the product x W


def test_a_model_mixing_explicit_mesh_arrays_with_unsharded_ones_is_refused_for_the_mesh_not_the_inputs():
    # bonsai's Qwen3 pattern: a call argument made under jax.set_mesh of Explicit axes (concrete: analyze keeps
    # no sharding of it) meets an array the model reshards onto the caller's mesh; jax's ShardingTypeError was
    # blamed on the inputs ("Expected inputs and call arguments the model accepts, got inputs float32[...]")
    from jax.sharding import AxisType, get_abstract_mesh, reshard

    class Net(nnx.Module):
        def __init__(self):
            self.fc = nnx.Linear(12, 5, rngs=nnx.Rngs(0))

        def __call__(self, x, *, start):
            pads = jnp.sum(x, -1).astype(jnp.int32)
            if not get_abstract_mesh().empty:
                pads = reshard(pads, jax.P("fsdp"))
            return self.fc(x) * jnp.where(start < 0, pads, start)[:, None]

    mesh = jax.make_mesh((1,), ("fsdp",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        net, start = Net(), jnp.full((B,), -1, jnp.int32, out_sharding=jax.P("fsdp"))
        with pytest.raises(xla_cost.InputError) as info:
            xla_cost.analyze(net, jax.ShapeDtypeStruct((B, 12), jnp.float32), optimizer="sgd", counter="jaxpr",
                             call_kwargs={"start": start})
    message = str(info.value)
    assert "a mesh of Explicit axes (the caller's: fsdp=1; Explicit)" in message and "ShardingTypeError" in message
    assert "the model accepts" not in message and "xla_cost.analyze_step" in message and "\n" not in message
