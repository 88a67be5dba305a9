"""Every form of recomputation, recognised by `xla_cost.analyze` and `xla_cost.analyze_step` (issue 50).

Language models written as today's repositories write them (`tests.remat_models`): blocks
rematted with ``nn.remat(Block, static_argnums=..., policy=...)`` made in ``setup()`` and kept
in a list (inside a decoder module inside a causal-LM wrapper, as Hugging Face's and EasyLM's
Flax Llama nest them), the same in a compact ``__call__``, ``nn.remat_scan``, ``nn.scan`` over
a rematted block, ``nnx.remat`` per block and ``nnx.scan`` over ``nnx.remat``; each through
``analyze`` and through its own train step (a Linen ``TrainState`` step, an NNX step).

For each: the recomputation (``hardware_flops - model_flops``) equals the closed form of what
the policy makes the backward pass recompute (`tests.remat_models.recomputed_flops`), and is
noted; the forward equals the model's without remat; the model's backward (recomputation left
out) equals the backward without remat, plus the rounding jax's checkpoint puts on each value a
policy saves (a ``reduce_precision`` per element); and the train step's parts agree with
``analyze``'s: the recomputation in its backward, flagged there, not in its forward.

Before the fix (issue 50), checkpoints called in a module nested in another (Linen blocks made
in ``setup()`` of a decoder, NNX blocks of a wrapped model) were not recognised: the backward
pass's checkpoint repeats its call site in the name stack
(``transpose(jvp(CausalLM))/model/decoder/jvp(CausalLM)/model/decoder/rematted_computation/0/q``),
so no recomputed equation matched the forward's; ``analyze`` gave model = hardware FLOP
(backward/forward 2.66 here) and ``analyze_step`` counted the recomputation as forward
(+69%, backward/forward 1.16). In every form, ``analyze_step``'s backward model FLOP kept the
recomputation (the parts carried none of it), and a checkpoint's derivative work that repeats
no forward (an RMSNorm's rsqrt derivative) and jax's rounding of saved values went to the forward.
"""

from __future__ import annotations

import functools

import pytest

import xla_cost
from tests import remat_models as R
from xla_cost.count.interpret import SCAN_COUNTER_FLOPS

CFG = R.CONFIG
L = CFG.layers
TOKENS = R.tokens_of(CFG)


def rounded_elements(cfg: R.Config, policy: str) -> int:
    """The elements of the values a policy saves, which jax's checkpoint rounds to their own
    type once (``reduce_precision``, 1 FLOP each) in the forward pass, for the backward pass:
    none for ``nothing_saveable``; every product the backward reads for ``dots_saveable``: q,
    k, v, o (B*T*d each), the scores (B*H*T*T), the values product (B*T*d), gate and up
    (B*T*hidden each; down's result is read by nothing but the residual add); the same but
    the two batched attention products for ``checkpoint_dots_with_no_batch_dims``."""
    n, d, f = cfg.tokens, cfg.d_model, cfg.hidden
    projections = 4 * n * d + 2 * n * f
    if policy == "nothing_saveable":
        return 0
    if policy == "dots_saveable":
        return projections + cfg.batch * cfg.heads * cfg.seq * cfg.seq + n * d
    return projections


def _linen(model):
    report = xla_cost.analyze(model, TOKENS, counter="jaxpr", optimizer="sgd", loss=R.lm_loss, targets=TOKENS)
    step = xla_cost.analyze_step(R.linen_train_step, R.linen_state(model), R.batch_of(CFG), counter="jaxpr")
    return report, step


def _nnx(cls, policy):
    model = R.nnx_model(cls, policy)
    report = xla_cost.analyze(model, TOKENS, counter="jaxpr", optimizer="sgd", loss=R.lm_loss, targets=TOKENS)
    step = xla_cost.analyze_step(R.nnx_train_step, model, R.nnx_optimizer(cls, policy), R.batch_of(CFG),
                                 counter="jaxpr")
    return report, step


FORMS = {
    # form: (how it is analysed, the policy, the same model without remat)
    "setup list in nested modules, nothing_saveable": (lambda: _linen(R.CausalLM(CFG, "nothing_saveable")),
                                                       "nothing_saveable", "linen"),
    "setup list in nested modules, dots_saveable": (lambda: _linen(R.CausalLM(CFG, "dots_saveable")),
                                                    "dots_saveable", "linen"),
    "setup list, checkpoint_dots_with_no_batch_dims": (
        lambda: _linen(R.SetupLM(CFG, "checkpoint_dots_with_no_batch_dims")),
        "checkpoint_dots_with_no_batch_dims", "linen"),
    "compact, nothing_saveable": (lambda: _linen(R.CompactLM(CFG, "nothing_saveable")), "nothing_saveable", "linen"),
    "compact, dots_saveable": (lambda: _linen(R.CompactLM(CFG, "dots_saveable")), "dots_saveable", "linen"),
    "nn.remat around nn.remat'd blocks": (lambda: _linen(R.NestedRematLM(CFG)), "nothing_saveable", "nested"),
    "nn.scan over nn.remat": (lambda: _linen(R.ScanLM(CFG, "nothing_saveable")), "nothing_saveable", "scan"),
    "nn.remat_scan": (lambda: _linen(R.RematScanLM(CFG)), "nothing_saveable", "remat_scan"),
    "nnx.remat, nothing_saveable": (lambda: _nnx(R.NnxRematLM, "nothing_saveable"), "nothing_saveable", "nnx"),
    "nnx.remat, dots_saveable": (lambda: _nnx(R.NnxRematLM, "dots_saveable"), "dots_saveable", "nnx"),
    "nnx.remat in a nested module": (lambda: _nnx(R.NnxCausalLM, "nothing_saveable"), "nothing_saveable", "nnx"),
    "nnx.scan over nnx.remat": (lambda: _nnx(R.NnxScanLM, "nothing_saveable"), "nothing_saveable", "nnx_scan"),
}

PLAIN = {
    "linen": lambda: _linen(R.SetupLM(CFG, None)),
    "scan": lambda: _linen(R.ScanLM(CFG, None)),
    "nnx": lambda: _nnx(R.NnxRematLM, None),
    "nnx_scan": lambda: _nnx(R.NnxScanLM, None),
}


@functools.cache
def analysed(form: str):
    return FORMS[form][0]()


@functools.cache
def plain(kind: str):
    # nn.remat_scan's stack is a scan of L scans of one block each: compared with nn.scan's
    return PLAIN[{"remat_scan": "scan", "nested": "linen"}.get(kind, kind)]()


def recomputed(cfg: R.Config, form: str) -> int:
    """L blocks' recomputation; ``nn.remat_scan`` (lengths (L, 1): a checkpointed scan of one
    block per layer) recomputes each block's whole forward, the down projection and the last
    residual add included: the inner scan's carry is its result. A checkpoint around
    checkpointed blocks recomputes the blocks' forward for their inputs, then each block's
    own checkpoint recomputes its block again."""
    policy, kind = FORMS[form][1], FORMS[form][2]
    if kind == "remat_scan":
        return cfg.layers * R.block_forward_flops(cfg)
    if kind == "nested":  # the outer checkpoint recomputes every block but the last (whose input the last's saves)
        return (cfg.layers - 1) * R.block_forward_flops(cfg) + cfg.layers * R.recomputed_flops(cfg, policy)
    return cfg.layers * R.recomputed_flops(cfg, policy)


def extra_loop_counters(cfg: R.Config, form: str) -> tuple[int, int]:
    """(forward, backward) loop-counter FLOP beyond ``nn.scan``'s: ``nn.remat_scan``'s L inner
    loops of one iteration each count their counter once in the forward, and twice in the
    backward (the recomputed loop and its transpose)."""
    if FORMS[form][2] != "remat_scan":
        return 0, 0
    return cfg.layers * SCAN_COUNTER_FLOPS, 2 * cfg.layers * SCAN_COUNTER_FLOPS


@pytest.mark.parametrize("form", list(FORMS))
def test_analyze_separates_the_recomputation(form):
    report, _ = analysed(form)
    baseline, _ = plain(FORMS[form][2])
    forward, backward = report.phases["forward"], report.phases["backward"]
    assert backward.hardware_flops - backward.model_flops == recomputed(CFG, form)
    assert report.phases["train_step"].hardware_flops - report.phases["train_step"].model_flops == recomputed(CFG, form)
    assert any("jax.checkpoint recomputes" in n and f"{recomputed(CFG, form):,} FLOP" in n for n in report.notes)
    counters = extra_loop_counters(CFG, form)
    assert forward.flops == baseline.phases["forward"].flops + counters[0]
    rounding = L * rounded_elements(CFG, FORMS[form][1])
    assert backward.model_flops == baseline.phases["backward"].flops + rounding + counters[1]
    assert 1.9 < backward.model_flops / forward.flops < 2.1  # the model's arithmetic: about 2 (the embedding's is 1)


@pytest.mark.parametrize("form", list(FORMS))
def test_the_train_step_puts_the_recomputation_in_its_backward_and_flags_it(form):
    report, step = analysed(form)
    forward, backward = step.phases["forward"], step.phases["backward"]
    assert backward.hardware_flops - backward.model_flops == recomputed(CFG, form)
    assert any(n.startswith("backward:") and "jax.checkpoint recomputes" in n for n in step.notes)
    # the forward is analyze's (before the first fix: +69%, the recomputation in it; before the second,
    # B*T divisions more: the final RMSNorm's rsqrt derivative, computed beside the forward for the
    # backward pass alone through a forward equation, which analyze's forward program never computes)
    assert forward.flops == report.phases["forward"].flops
    assert backward.model_flops == report.phases["backward"].model_flops
    assert step.phases["train_step"].hardware_flops - step.phases["train_step"].model_flops == recomputed(CFG, form)


def test_the_compiled_path_separates_the_recomputation_too():
    # blocks made in setup() in nested modules, compiled for the CPU: model and hardware FLOP come from the
    # jaxpr (XLA may keep or drop the recomputation), and the note says which XLA did
    report = xla_cost.analyze(R.CausalLM(CFG, "nothing_saveable"), TOKENS, optimizer="sgd", loss=R.lm_loss,
                              targets=TOKENS)
    grad = report.phases["grad"]
    assert grad.hardware_flops - grad.model_flops == L * R.recomputed_flops(CFG, "nothing_saveable")
    assert any(n.startswith("grad: jax.checkpoint recomputes") for n in report.notes)


# A remat inside a scanned block's body (maxdiffusion's Flux single blocks: ``self.mlp_and_out =
# nn.remat(MlpAndOutputBlock)`` in a block that ``nn.scan`` stacks): the backward scan's body writes the
# scan's scope again before the checkpoint's (``transpose(jvp(Net))/blocks/blocks/rematted_computation/mlp``),
# its forward ran under ``jvp(Net)/blocks/mlp``; nothing matched, so the recomputation stayed in
# model FLOP, unnoted (backward 3x the forward on the rematted rows).
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.ad_checkpoint import checkpoint_name  # noqa: E402

MB, ML, MW, DEPTH = 2, 4, 8, 2  # batch, tokens, width, scanned blocks


class _Mlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x + nn.Dense(MW, name="lin2")(nn.gelu(nn.Dense(4 * MW, name="lin1")(x)))


class _ScannedBlock(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        return nn.remat(_Mlp, prevent_cse=True)(name="mlp")(nn.Dense(MW, name="qkv")(x)), None


class _ScannedNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.scan(_ScannedBlock, variable_axes={"params": 0}, split_rngs={"params": True},
                       length=DEPTH)(name="blocks")(x, None)[0]


def test_a_remat_inside_a_scanned_body_is_recomputation():
    report = xla_cost.analyze(_ScannedNet(), jax.ShapeDtypeStruct((MB, ML, MW), jnp.float32), optimizer="sgd",
                              loss=lambda y, t: jnp.mean((y - t) ** 2), per_layer=True, counter="jaxpr")
    rows = {row.path: row for row in report.layers}
    # the checkpoint recomputes what lin2's backward reads, once per block: lin1's product and bias, 2 MB ML
    # MW 4MW + MB ML 4MW per block, and the gelu of it (lin2's own product is not needed again)
    lin1 = DEPTH * (2 * MB * ML * MW * 4 * MW + MB * ML * 4 * MW)
    assert rows["blocks/mlp/lin1"].forward_flops == lin1
    assert rows["blocks/mlp/lin1"].recomputed_flops == lin1
    assert rows["blocks/mlp"].recomputed_flops > 0 and rows["blocks/qkv"].recomputed_flops == 0  # gelu; not rematted
    backward = report.phases["backward"]
    assert backward.hardware_flops - backward.model_flops == sum(row.recomputed_flops for row in report.layers)
    assert any("recomput" in n for n in report.notes)


class _OuterBlock(nn.Module):
    """The Flux single block as maxdiffusion scans it: a remat'd block (saving only its named projection)
    whose MLP is a remat of its own."""

    @nn.compact
    def __call__(self, x, _):
        h = checkpoint_name(nn.Dense(MW, name="qkv")(x), "saved")
        return nn.remat(_Mlp, prevent_cse=True)(name="mlp")(h), None


class _ScannedRematNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        outer = nn.remat(_OuterBlock, prevent_cse=True,
                         policy=jax.checkpoint_policies.save_only_these_names("saved"))
        return nn.scan(outer, variable_axes={"params": 0}, split_rngs={"params": True},
                       length=DEPTH)(name="blocks")(x, None)[0]


def test_a_remat_inside_a_remat_scanned_is_recomputation():
    # the scanned body keeps the inner checkpoint's primal in its call (under jvp, inside a checkpoint), where
    # only equations outside every checkpoint were taken for the forward that ran: nothing matched
    report = xla_cost.analyze(_ScannedRematNet(), jax.ShapeDtypeStruct((MB, ML, MW), jnp.float32),
                              optimizer="sgd", loss=lambda y, t: jnp.mean((y - t) ** 2), per_layer=True,
                              counter="jaxpr")
    rows = {row.path: row for row in report.layers}
    # the outer policy saves qkv's output alone: the backward recomputes what the MLP's backward reads, lin1
    # (2 MB ML MW 4MW + bias adds) and its gelu, once per block; lin2's output feeds a residual add alone, which
    # its backward does not read: not run again
    lin1 = DEPTH * (2 * MB * ML * MW * 4 * MW + MB * ML * 4 * MW)
    assert (rows["blocks/mlp/lin1"].recomputed_flops, rows["blocks/mlp/lin2"].recomputed_flops) == (lin1, 0)
    assert rows["blocks/qkv"].recomputed_flops == 0  # saved by name
    backward = report.phases["backward"]
    assert backward.hardware_flops - backward.model_flops == sum(row.recomputed_flops for row in report.layers)
