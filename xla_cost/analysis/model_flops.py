"""What ``model_flops`` leaves out of a phase's count: the share of the attention's products
that ``attention_flops="causal"`` (`xla_cost.analysis.options.ATTENTION_CONVENTIONS`) drops (half
of those a causal mask masks, and what a sliding window leaves out beyond that), and the routed
experts' products on capacity padding; with the notes that say so.
`xla_cost.analysis.costs.phase_costs` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xla_cost.count.attribution import REMAINDER, in_root, module_path, module_tree, owner
from xla_cost.count.interpret import JaxprCount
from xla_cost.count.registry import MATRIX_PRODUCTS
from xla_cost.count.rules import FUSED_ATTENTION
from xla_cost.step import phases

__all__ = ["attention_flops", "causal_attention", "window_flops", "causal_halves",
           "causal_windows", "causal_note", "padding_flops"]


def attention_flops(counted: JaxprCount, modules: Sequence[str], root: str | Sequence[str],
                    recompute: bool = True) -> int:
    """FLOP of the attention products: the matrix products the data flow finds to be
    attention's wherever they run (`xla_cost.count.attention_flow`, `Cost.attention`:
    scores = q k^T between two activations, a softmax's exp of them read by the next
    product, outputs = p v, and their gradients; a pure JAX model's, a module's with a
    parameter of its own), and the products of fused attention wherever it runs
    (`xla_cost.count.attention`: the same products, without the softmax), loops
    multiplied out; the update's optimizer arithmetic has none. ``recompute``: with
    the forward attention ``jax.checkpoint`` (remat) repeats in the backward pass (as
    computed), or without it (the model's, as ``model_flops`` counts: the causal
    convention halves those alone, so that remat leaves ``model_flops`` as it is).

    Not a module's products: a module without parameters of its own also holds a
    mixture of experts' dispatch and combine (the zoo's Mixtral, whose ``mlp`` holds
    only its router's and experts' submodules: its einsums were counted as attention,
    3.6x the attention's forward FLOP, and the causal convention halved them out of
    ``model_flops``). Attention without a softmax (linear attention) is not found. A block-scaled
    product (``jax.nn.scaled_matmul``, whose ``products`` are its whole work) is no attention."""
    total = 0
    for eqn in counted.equations:
        if eqn.primitive in FUSED_ATTENTION or eqn.primitive == "pallas_call":  # (a splash kernel's products)
            total += eqn.cost.products - (0 if recompute else eqn.recomputed.products)
        elif eqn.primitive == "dot_general":
            total += eqn.cost.attention - (0 if recompute else eqn.recomputed.attention)
    return total


def causal_attention(counted: JaxprCount) -> tuple[int, int]:
    """FLOP of the model's attention products (remat's recomputation left out) whose scores a causal
    mask masks, and of those whose mask the data flow cannot see (`Cost.causal`, `Cost.unseen`:
    `xla_cost.count.attention_flow.attention_masks`): what ``attention_flops="causal"`` halves."""
    causal = sum(e.cost.causal - e.recomputed.causal for e in counted.equations)
    return causal, sum(e.cost.unseen - e.recomputed.unseen for e in counted.equations)


def window_flops(counted: JaxprCount) -> int:
    """Of `causal_attention`'s causal FLOP, those ``attention_flops="causal"`` leaves out beyond half where
    their mask was evaluated (`Cost.window`: a sliding window keeps less than half), remat's left out."""
    return sum(e.cost.window - e.recomputed.window for e in counted.equations)


def causal_halves(counted: Mapping[str, JaxprCount], modules: Sequence[str], root: str,
                  phase: str = "train_step") -> tuple[int, int, int, int] | None:
    """``phase``'s model attention FLOP (no remat's recomputation) as ``attention_flops="causal"`` reads
    them: (causal, mask unseen, neither: every pair the model's, left out beyond half of the causal ones:
    `window_flops`), from the phase's program's count, else by its formula over the programs'
    (``train_step = grad + update``); it halves the first two, and leaves out the last too."""
    parts = {}
    for name, count in counted.items():
        causal, unseen = causal_attention(count)
        parts[name] = (causal, unseen, attention_flops(count, modules, root, recompute=False) - causal - unseen,
                       window_flops(count))
    if phase in parts:
        return parts[phase]
    formula = next((p.formula for p in phases.DECLARED if p.name == phase), None)
    if not formula:
        return None
    split = [phases.combine(formula, {name: part[k] for name, part in parts.items()}) for k in range(4)]
    return None if None in split else (split[0], split[1], split[2], split[3])


def causal_windows(counted: Mapping[str, JaxprCount], phase: str = "train_step") -> dict[str, tuple[int, int]]:
    """``phase``'s masks that are no plain causal ones (`JaxprCount.windows`), each with its attention's
    causal FLOP and those ``attention_flops="causal"`` keeps of them: from the phase's program's count,
    else by its formula over the programs'."""
    formula = {phase: 1} if phase in counted else next((p.formula for p in phases.DECLARED if p.name == phase), {})
    found: dict[str, tuple[int, int]] = {}
    for name, k in (formula or {}).items():
        for words, cost in getattr(counted.get(name), "windows", {}).items():
            causal, kept = found.get(words, (0, 0))
            found[words] = (causal + k * cost.causal, kept + k * (cost.causal - cost.causal // 2 - cost.window))
    return {words: figures for words, figures in found.items() if figures[0]}


def causal_note(split: tuple[int, int, int, int] | None, model_flops: int,
                windows: Mapping[str, tuple[int, int]] | None = None) -> str:
    """The note of ``attention_flops="causal"``: what it halved, what it kept of a mask evaluated (a sliding
    window), and what it left whole (not causal)."""
    causal, unseen, whole, window = split or (0, 0, 0, 0)
    if not causal + unseen + whole:
        return ("attention_flops causal: no attention products found (products in a module without parameters "
                "of its own, products of activations with a softmax between them, or fused attention): causal "
                "changes nothing, model_flops are as computed")
    note = (f"attention_flops causal: model_flops (MFU's numerator, Report.model_flops: {model_flops:,} a train "
            f"step) count half of the score and value products of the causally masked attention, "
            f"{(causal + unseen) // 2 + window:,} FLOP fewer a step than computed (half of {causal + unseen:,}"
            + (f", and {window:,} more that a sliding window masks" if window > 0 else
               f", less {-window:,} that a two-sided window keeps beyond half" if window else "") + "); "
            f"{whole:,} FLOP of attention not causally masked (unmasked, or masked by the data alone: "
            "an encoder's, a cross-attention's) are left whole")
    for words, (flops, kept) in (windows or {}).items():
        if words.startswith("not evaluated"):
            note += f"; a causal mask {words}: halved, {flops - flops // 2:,} FLOP kept of {flops:,}"
        else:
            note += (f"; {words}: {kept:,} FLOP kept of {flops:,} (the pairs it allows, less half its diagonal, "
                     "as a causal mask's T²/2)")
    if unseen:
        note += (f"; {unseen:,} of those halved are of attention whose mask is passed in (an argument the data "
                 "flow cannot see: a mask or a bias), halved as if causal: pass a mask made inside the step "
                 "(jnp.tril, an arange comparison) for it to be seen, or use attention_flops='full'")
    return note + ("; remat's recomputation is no model FLOP, halved or not; the FLOP columns are the "
                   "program's, every pair of positions")


def padding_flops(counted: JaxprCount, modules: Sequence[str], root: str | Sequence[str],
                  padded: Sequence[tuple[frozenset[str], float]]) -> int:
    """The FLOP of routed experts' products computed on capacity padding (`Workload.padded`: the
    experts' modules and the share of their slots no routed token fills), remat's recomputation
    left out as model FLOP leave it out: no model's arithmetic, as MFU counts it. Experts whose
    parameters are the root module's own (module ``""``) own the products inside the model's call
    that no module below the root holds (`in_root`), not those outside it (a loss's)."""
    if not padded:
        return 0
    tree = module_tree(modules)
    at_root = any("" in found for found, _ in padded)
    total = 0.0
    for eqn in counted.equations:
        if eqn.primitive not in MATRIX_PRODUCTS:
            continue
        module = owner(module_path(eqn.name_stack, root, tree), modules)
        if module == REMAINDER and at_root and in_root(eqn.name_stack, root):
            module = ""
        share = next((share for found, share in padded if module in found), 0.0)
        total += share * (eqn.cost.flops - eqn.recomputed.flops)
    return round(total)
