"""ResNet zoo family: torchvision's parameter counts, exact forward convolution FLOP.

Everything is abstract (`jax.eval_shape`, `jax.ShapeDtypeStruct`): no ResNet is
ever allocated. The tests build the models from `models.resnet` directly (and put
its `SPECS` into the registry only inside a test, with ``monkeypatch``), so they
hold whether or not the family is registered in `models.REGISTRY`.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xla_cost import zoo as models
import xla_cost
from xla_cost.zoo import resnet
from xla_cost.zoo.resnet import SPECS, ResNet, ResNet18, ResNet34, ResNet50, ResNet101, ResNet152
from tests import formulas as F

# Source: torchvision, `sum(p.numel() for p in resnetN().parameters())` at 1000
# classes (BatchNorm weight and bias included, running statistics are buffers).
PUBLISHED = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
}
CLASSES = {
    "resnet18": ResNet18,
    "resnet34": ResNet34,
    "resnet50": ResNet50,
    "resnet101": ResNet101,
    "resnet152": ResNet152,
}


def _abstract_variables(model, batch: int = 1):
    x = jax.ShapeDtypeStruct((batch, model.image_size, model.image_size, 3), jnp.float32)
    return jax.eval_shape(lambda x: model.init(jax.random.key(0), x), x), x


def _count(tree) -> int:
    return int(sum(np.prod(leaf.shape) for leaf in jax.tree.leaves(tree)))


# ------------------------------------------------------------------ closed forms


def _out(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


def resnet50_convs(image: int = 224) -> dict[str, tuple[int, int, int, int, int, int]]:
    """Every convolution of ResNet-50 (torchvision v1.5), written out from the paper.

    Returns ``{path: (input size, C_in, C_out, kernel, stride, padding)}`` for
    square feature maps; paths are the Flax module paths.
    """
    convs = {"conv1": (image, 3, 64, 7, 2, 3)}
    size = _out(_out(image, 7, 2, 3), 3, 2, 1)  # conv1, then the 3x3/2 max-pool
    channels = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            name = f"layer{stage + 1}_{i}"
            convs[f"{name}/conv1"] = (size, channels, width, 1, 1, 0)
            convs[f"{name}/conv2"] = (size, width, width, 3, stride, 1)  # v1.5: stride on the 3x3
            out_size = _out(size, 3, stride, 1)
            convs[f"{name}/conv3"] = (out_size, width, 4 * width, 1, 1, 0)
            if i == 0:  # 64 -> 256 channels in layer1, stride 2 in layer2..4
                convs[f"{name}/downsample_conv"] = (size, channels, 4 * width, 1, stride, 0)
            size, channels = out_size, 4 * width
    assert channels == 2048 and (image != 224 or size == 7)
    return convs


def textbook_macs(convs, fc_in: int = 2048, classes: int = 1000) -> int:
    """Multiply-adds per image counting every tap, padding included: H_out*W_out*C_in*C_out*k*k."""
    total = 0
    for size, cin, cout, k, s, p in convs.values():
        total += _out(size, k, s, p) ** 2 * cin * cout * k * k
    return total + fc_in * classes


def valid_macs(size: int, cin: int, cout: int, k: int, s: int, p: int) -> int:
    """Multiply-adds per image of one convolution, taps on padding left out (XLA's count).

    The valid (output, tap) pairs per spatial dimension come from the tests' own
    enumeration (tests/formulas.py), not from the library's rule."""
    return F.valid_pairs(size, k, s, p) ** 2 * cin * cout


# ------------------------------------------------------------------ parameters


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_parameter_counts(name):
    cls = CLASSES[name]
    variables, _ = _abstract_variables(cls())
    assert _count(variables["params"]) == PUBLISHED[name]
    assert resnet.resnet_parameters(cls.stage_sizes, cls.bottleneck) == PUBLISHED[name]
    # The running statistics are state, not parameters: mean and var per BN channel.
    bn_scales = sum(
        leaf.size for path, leaf in jax.tree_util.tree_leaves_with_path(variables["params"])
        if path[-1].key == "scale"
    )
    assert _count(variables["batch_stats"]) == 2 * bn_scales


def test_generic_resnet_equals_named_depth():
    generic = ResNet(stage_sizes=(3, 4, 6, 3), bottleneck=True, num_classes=10, image_size=64)
    named = ResNet50(num_classes=10, image_size=64)
    a, _ = _abstract_variables(generic)
    b, _ = _abstract_variables(named)
    assert jax.tree.map(lambda x: x.shape, a) == jax.tree.map(lambda x: x.shape, b)
    assert _count(a["params"]) == resnet.resnet_parameters((3, 4, 6, 3), True, 10)


def test_torchvision_layout():
    params = _abstract_variables(ResNet50())[0]["params"]
    assert set(params) == {"conv1", "bn1", "fc"} | {
        f"layer{s}_{i}" for s, n in zip(range(1, 5), (3, 4, 6, 3)) for i in range(n)
    }
    assert params["conv1"]["kernel"].shape == (7, 7, 3, 64) and "bias" not in params["conv1"]
    assert set(params["layer1_0"]) == {
        "conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "downsample_conv", "downsample_bn"
    }
    assert set(params["layer1_1"]) == {"conv1", "bn1", "conv2", "bn2", "conv3", "bn3"}
    assert params["layer2_0"]["conv1"]["kernel"].shape == (1, 1, 256, 128)
    assert params["layer2_0"]["conv2"]["kernel"].shape == (3, 3, 128, 128)
    assert params["layer2_0"]["downsample_conv"]["kernel"].shape == (1, 1, 256, 512)
    assert params["fc"]["kernel"].shape == (2048, 1000) and params["fc"]["bias"].shape == (1000,)

    basic = _abstract_variables(ResNet18())[0]["params"]
    assert set(basic["layer1_0"]) == {"conv1", "bn1", "conv2", "bn2"}  # 64 -> 64: identity
    assert set(basic["layer2_0"]) == {"conv1", "bn1", "conv2", "bn2", "downsample_conv", "downsample_bn"}
    assert basic["layer4_1"]["conv2"]["kernel"].shape == (3, 3, 512, 512)


@pytest.mark.parametrize("image_size", [224, 100, 33])
def test_output_shape_any_image_size(image_size):
    model = ResNet18(num_classes=7, image_size=image_size)
    variables, x = _abstract_variables(model, batch=2)
    out, state = jax.eval_shape(lambda v, x: model.apply(v, x, mutable=["batch_stats"]), variables, x)
    assert out.shape == (2, 7) and out.dtype == jnp.float32
    assert set(state) == {"batch_stats"}


def test_bfloat16_computation_float32_parameters():
    model = ResNet18(dtype=jnp.bfloat16, num_classes=10, image_size=32)
    x = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.bfloat16)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), x)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables["params"])} == {jnp.dtype(jnp.float32)}
    out, _ = jax.eval_shape(lambda v, x: model.apply(v, x, mutable=["batch_stats"]), variables, x)
    assert out.dtype == jnp.bfloat16


def test_batchnorm_training_mode():
    model = ResNet18(num_classes=10, image_size=32)
    variables, x = _abstract_variables(model, batch=2)
    # Training mode (the default) updates the running statistics: batch_stats must be mutable.
    with pytest.raises(Exception, match="batch_stats"):
        jax.eval_shape(lambda v, x: model.apply(v, x), variables, x)
    # Inference mode reads them and leaves them alone.
    assert jax.eval_shape(lambda v, x: model.apply(v, x, train=False), variables, x).shape == (2, 10)


def test_bad_inputs_raise_input_error():
    model = ResNet18(image_size=64)
    variables, _ = _abstract_variables(model)
    with pytest.raises(xla_cost.InputError, match="64, 64, 3"):
        jax.eval_shape(model.apply, variables, jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32))
    with pytest.raises(xla_cost.InputError, match="floating-point"):
        jax.eval_shape(model.apply, variables, jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.int32))
    with pytest.raises(xla_cost.InputError, match="stage_sizes"):
        _abstract_variables(ResNet(stage_sizes=(1, 1, 1, 1, 1), bottleneck=False, image_size=32))


# ------------------------------------------------------------------ specs / registry


def test_specs():
    assert [s.name for s in SPECS] == list(PUBLISHED)
    for spec in SPECS:
        assert spec.module is CLASSES[spec.name]
        # stage_sizes and bottleneck are class constants, not configuration.
        assert spec.defaults == {"num_classes": 1000, "image_size": 224}
        assert spec.input_shape(spec.defaults) == (224, 224, 3)
        assert spec.input_shape({"image_size": 96}) == (96, 96, 3)
        assert spec.input_dtype == "float"
        assert "He et al. 2016" in spec.source and "torchvision" in spec.source
        assert spec.name.removeprefix("resnet") in spec.description
    with pytest.raises(TypeError):
        ResNet50(stage_sizes=(1, 1, 1, 1))


def test_registry_path(monkeypatch):
    for spec in SPECS:
        monkeypatch.setitem(models.REGISTRY, spec.name, spec)
    config = {"num_classes": 10, "image_size": 64}
    model = models.build_model("resnet34", dtype="bfloat16", **config)
    assert isinstance(model, ResNet34) and model.dtype == jnp.bfloat16 and model.num_classes == 10
    inputs = models.example_inputs("resnet34", 4, **config)
    assert inputs.shape == (4, 64, 64, 3) and inputs.dtype == jnp.float32
    assert models.count_parameters("resnet18") == PUBLISHED["resnet18"]
    assert models.count_parameters("resnet50", num_classes=10) == PUBLISHED["resnet50"] - 2049 * 990
    with pytest.raises(xla_cost.InputError, match="num_classes, image_size"):
        models.build_model("resnet50", stage_sizes=(1, 1, 1, 1))
    with pytest.raises(xla_cost.InputError):
        models.build_model("resnet50", image_size=0)


# ------------------------------------------------------------------ FLOP


def test_resnet50_forward_macs():
    convs = resnet50_convs()
    assert len(convs) == 53  # 1 stem + 16 blocks x 3 + 4 projections (+ fc: 50 weight layers)
    textbook = textbook_macs(convs)
    # He et al. 2016, Table 1: 3.8e9 multiply-adds (v1, stride on the 1x1);
    # torchvision's model card of resnet50 (v1.5): 4.09 GFLOPS (multiply-adds),
    # printed to 3 significant digits.
    assert round(textbook / 1e9, 2) == 4.09

    model = ResNet50()
    variables, x = _abstract_variables(model)
    count = xla_cost.count_function(
        lambda v, x: model.apply(v, x, train=True, mutable=["batch_stats"]), variables, x
    )
    assert not count.unsupported
    measured = {}
    for e in count.equations:
        if e.primitive in ("conv_general_dilated", "dot_general"):
            path = e.name_stack.removeprefix("ResNet50/")
            measured[(path, e.primitive)] = measured.get((path, e.primitive), 0) + e.cost.flops
    expected = {(path, "conv_general_dilated"): 2 * valid_macs(*c) for path, c in convs.items()}
    expected[("fc", "dot_general")] = 2 * 2048 * 1000
    assert measured == expected

    valid = sum(expected.values()) // 2
    # the 7x7 and 3x3 borders read padding: 3.4% of the textbook count at 224 px
    assert valid < textbook


@pytest.fixture(scope="module")
def small_report():
    # Full analysis, compiled: ResNet-18 at 64x64, 10 classes, batch 2.
    model = ResNet18(image_size=64, num_classes=10)
    inputs = jax.ShapeDtypeStruct((2, 64, 64, 3), jnp.float32)
    return xla_cost.analyze(model, inputs, optimizer="sgd", per_layer=True, name="resnet18")


def test_small_resnet18_full_analysis(small_report):
    report = small_report
    assert report.parameters == resnet.resnet_parameters((2, 2, 2, 2), False, 10)
    assert report.counter == "xla" and not report.unsupported
    p = report.phases
    for phase in ("forward", "grad", "update", "train_step"):
        assert p[phase].xla_flops is not None and p[phase].jaxpr_flops is not None
        # Measured (XLA - jaxpr) / jaxpr: forward 8.6e-4, grad 3.2e-3, update 0,
        # train_step 3.1e-3: XLA's fusion recomputes BatchNorm's and ReLU's small
        # elementwise producers once per consumer (docs/conventions.md).
        assert p[phase].xla_flops == pytest.approx(p[phase].jaxpr_flops, rel=5e-3), phase
    # SGD: 2 FLOP per parameter, exactly
    assert p["update"].flops == p["update"].jaxpr_flops == 2 * report.parameters

    # Training mode: the running statistics are carried as mutable state.
    workload, _ = xla_cost.build_workload(
        ResNet18(image_size=64, num_classes=10),
        jax.ShapeDtypeStruct((2, 64, 64, 3), jnp.float32),
        optimizer="sgd",
    )
    assert set(workload.state) == {"batch_stats"}
    assert set(workload.state["batch_stats"]["layer1_0"]["bn1"]) == {"mean", "var"}


def test_small_resnet18_layer_rows(small_report):
    rows = {row.path: row for row in small_report.layers}
    for path in ("conv1", "bn1", "layer1_0/conv1", "layer2_0/downsample_conv", "layer4_1/conv2", "fc"):
        assert path in rows, path
    b = 2
    # The stem convolution: 64x64 -> 32x32, batch 2; after the 3x3/2 max-pool,
    # layer1 runs on 16x16x64, layer2 on 8x8x128, layer3 4x4x256, layer4 2x2x512.
    convs = {
        "conv1": (64, 3, 64, 7, 2, 3),
        "layer1_0/conv1": (16, 64, 64, 3, 1, 1),
        "layer1_1/conv2": (16, 64, 64, 3, 1, 1),
        "layer2_0/conv1": (16, 64, 128, 3, 2, 1),
        "layer2_0/conv2": (8, 128, 128, 3, 1, 1),
        "layer2_0/downsample_conv": (16, 64, 128, 1, 2, 0),
        "layer2_1/conv1": (8, 128, 128, 3, 1, 1),
        "layer4_1/conv2": (2, 512, 512, 3, 1, 1),
    }
    for path, conv in convs.items():
        assert rows[path].forward_flops == 2 * b * valid_macs(*conv), path
    # The first layer computes no input gradient (1:1): its weight gradient
    # reads the same valid taps as its forward pass.
    assert rows["conv1"].backward_flops == rows["conv1"].forward_flops
    # Deeper convolutions compute the input gradient and the weight gradient
    # (2:1); a block's first conv also adds its input gradient to the
    # shortcut's (one add per element of the block input, b*H*W*C).
    for path in ("layer1_1/conv2", "layer2_0/conv2", "layer2_0/downsample_conv", "layer4_1/conv2"):
        assert rows[path].backward_flops == 2 * rows[path].forward_flops, path
    for path, (size, c_in, *_) in [("layer1_0/conv1", convs["layer1_0/conv1"]),
                                   ("layer2_0/conv1", convs["layer2_0/conv1"]),
                                   ("layer2_1/conv1", convs["layer2_1/conv1"])]:
        assert rows[path].backward_flops == 2 * rows[path].forward_flops + b * size * size * c_in, path
    # fc: 512 -> 10 on the pooled features
    assert rows["fc"].forward_flops == F.dense_flops(b, 512, 10)
    assert rows["fc"].backward_flops == F.dense_backward_flops(b, 512, 10)


@pytest.mark.slow  # compiles ResNet-50: ~45 s on 2 CPU cores
def test_resnet50_compiled_forward_near_closed_form():
    report = xla_cost.analyze(
        ResNet50(), jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32), optimizer="sgd"
    )
    valid = sum(2 * valid_macs(*c) for c in resnet50_convs().values()) + 2 * 2048 * 1000
    # Convolutions and fc are ~99% of the forward FLOP; BatchNorm, ReLU and pooling the rest.
    assert 1.0 < report.phases["forward"].flops / valid < 1.02
