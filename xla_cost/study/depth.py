"""An unrolled program of many identical blocks, from its compiles at two and three blocks.

A framework that does not scan its layers (Megatron-LM, DeepSpeed, PyTorch)
runs them unrolled, and its program is compiled unrolled: the compile time
grows with the blocks (minutes for a stage of dozens). `extend_depth` builds
the analysis of the program of ``L`` blocks from the same program compiled at
`DEPTHS` (2 and 3 blocks, everything else the same): every figure the pricing
reads is extended as ``f(3) + (L - 3) * (f(3) - f(2))``.

Why 2 and 3: both programs have one first block and one last block, which a
compiler may treat apart (the first block's input gradient that nothing
needs, the last block's recomputation right before the loss); their
difference is one middle block, the block the ``L``-block program repeats
``L - 2`` times. Figure by figure:

* numbers (FLOP, bytes, kernels, arguments, memory, parameters, the sharding's
  bytes): the formula;
* the kernel list: kernels alike in everything the pricing reads (category,
  kind, bytes, FLOP, product's shape and dtype, group) counted in each program, and
  each such count extended by the formula (the pricing sums kernels, so the
  priced time is extended by the same formula). The count is signed: a
  compiler fuses a few small kernels otherwise at two blocks than at three, so
  a kind it makes more of at two blocks carries negative runs in the extension;
* collectives: a row of the first or the last block, or outside the blocks,
  has its runs extended by the formula; the middle block's rows (block 1 of
  the 3-block program) are repeated for blocks 1 to ``L - 2``, in the order
  the program runs the blocks, and the last block's renamed ``L - 1`` (the
  ZeRO-3 schedule reads its units, one per block, from them);
* per-parameter mappings (the sharding's specs): likewise by block.

Where the blocks are not identical the rule is refused (`block_structure`):
the ``L``-block model's parameters, module by module, must be ``L`` blocks
``P_0`` ... ``P_{L-1}`` of the same modules and sizes (Mixtral's dense first
layers, a pattern of unlike blocks, a block stack under two names are
refused), and the extension's parameter count must be the model's. Blocks
that differ only in what they compute from the same parameters (Gemma 2's
local and global attention) are not told apart: the zoo computes a local
window as a select over every key pair, at a global layer's cost. A figure
unknown in either compile is unknown in the extension; a collective's runs the
formula takes below zero refuse the rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from xla_cost.errors import InputError

__all__ = ["DEPTHS", "LAYERS_FIELD", "NOTE", "extend_depth", "extend_figures", "extend_kernels", "extend_collectives",
           "block_structure",
           "applies", "describe"]

DEPTHS: tuple[int, int] = (2, 3)
"""The blocks the program is compiled at: two programs with one first and one last block each."""

LAYERS_FIELD = "n_layer"
"""The zoo configurations' field for the number of blocks."""

NOTE = "extrapolated by depth"
"""How an extended report's note begins (`describe`)."""

_INDEXED = re.compile(r"^(.+)_(\d+)$")

_KERNEL_NAMES = frozenset({"name", "computation", "executions", "op_name", "overlaps", "groups", "done"})
"""A kernel's fields that name it or its place in the program, not what it costs: left out of its signature."""


def applies(config: Mapping[str, Any]) -> bool:
    """Whether a zoo configuration is an unrolled program of more blocks than `DEPTHS`' last
    (``scan_layers`` False and ``n_layer`` above 3): where the rule saves a compile."""
    return config.get("scan_layers", True) is False and int(config.get(LAYERS_FIELD, 0)) > DEPTHS[1]


def _refuse(why: str, layers: int) -> InputError:
    return InputError(f"a program of {layers} identical blocks to extend from its compiles at "
                      f"{DEPTHS[0]} and {DEPTHS[1]} blocks", why,
                      "Compile the whole program (without the depth rule).")


def _linear(two: Any, three: Any, layers: int) -> Any:
    value = three + (layers - DEPTHS[1]) * (three - two)
    return int(value) if isinstance(two, int) and isinstance(three, int) else float(value)


def extend_figures(two: Any, three: Any, layers: int, what: str = "") -> Any:
    """``f(3) + (L - 3) (f(3) - f(2))`` of two like JSON values (a report's dict), number by
    number, in dicts of the same keys and lists of the same length; unknown (None) where
    either is; a string, a flag or a list of strings the 3-block program's.

    Raises:
      InputError: the two differ in structure (keys, lengths, kinds) at ``what``.
    """
    if two is None or three is None:
        return None
    if isinstance(three, bool) or isinstance(three, str):
        return three
    if isinstance(three, (int, float)) and isinstance(two, (int, float)) and not isinstance(two, bool):
        return _linear(two, three, layers)
    if isinstance(three, Mapping) and isinstance(two, Mapping):
        if set(two) != set(three):
            raise _refuse(f"{what or 'the reports'} with other keys at {DEPTHS[0]} and {DEPTHS[1]} blocks: "
                          f"{sorted(set(two) ^ set(three))[:4]}", layers)
        return {k: extend_figures(two[k], three[k], layers, f"{what}/{k}") for k in three}
    if isinstance(three, list) and isinstance(two, list):
        if all(isinstance(x, str) for x in three):
            return list(three)
        if len(two) != len(three):
            raise _refuse(f"{what} of {len(two)} and {len(three)} entries", layers)
        return [extend_figures(a, b, layers, f"{what}[{i}]") for i, (a, b) in enumerate(zip(two, three))]
    raise _refuse(f"{what}: {type(two).__name__} and {type(three).__name__}", layers)


def _block(name: str, prefix: str) -> tuple[int | None, str]:
    """(the block index, the rest of the path) of a module path under ``prefix_i``; (None, name) outside."""
    head, _, rest = name.partition("/")
    found = _INDEXED.match(head)
    if found is None or found.group(1) != prefix:
        return None, name
    return int(found.group(2)), rest


def _named(prefix: str, index: int, rest: str) -> str:
    return f"{prefix}_{index}" + (f"/{rest}" if rest else "")


def block_structure(module_params: Mapping[str, int], layers: int) -> str:
    """The block prefix (``h`` for GPT's ``h_0`` ... ``h_{L-1}``) of a model whose parameters, by
    module path (`xla_cost.step.trees.module_param_counts`), are ``layers`` identical blocks
    (the same modules, each of the same size) beside modules outside them.

    Raises:
      InputError: no such prefix, or blocks that differ (the rule is refused).
    """
    blocks: dict[str, dict[int, dict[str, int]]] = {}
    for path, count in module_params.items():
        head = path.partition("/")[0]
        found = _INDEXED.match(head)
        if found is not None:
            blocks.setdefault(found.group(1), {}).setdefault(int(found.group(2)), {})[path.partition("/")[2]] = count
    prefixes = [p for p, found in blocks.items() if set(found) == set(range(layers))]
    if len(prefixes) != 1:
        raise _refuse(f"no one stack of {layers} blocks among its modules' names "
                      f"({', '.join(f'{p}: {len(b)}' for p, b in blocks.items()) or 'none indexed'})", layers)
    prefix = prefixes[0]
    first = blocks[prefix][0]
    unlike = [i for i, block in sorted(blocks[prefix].items()) if block != first]
    if unlike:
        raise _refuse(f"blocks {prefix}_{unlike[0]} and {prefix}_0 with other parameters "
                      f"({len(unlike)} of {layers} blocks unlike the first)", layers)
    others = [p for p in blocks if p != prefix and p.startswith(prefix)]
    if others:
        raise _refuse(f"a second stack beside {prefix}: {others[0]}", layers)
    return prefix


def _signature(kernel: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in kernel.items() if k not in _KERNEL_NAMES}, sort_keys=True)


def extend_kernels(two: Sequence[Mapping[str, Any]], three: Sequence[Mapping[str, Any]], layers: int
             ) -> list[dict[str, Any]]:
    """The kernel list of ``layers`` blocks: the 3-block program's kernels, and each signature's
    runs changed by ``(L - 3) (n(3) - n(2))`` (on its last kernel in the 3-block program, or on
    the 2-block program's where the 3-block one has none). The change is signed: a compiler
    fuses a few small kernels otherwise at two blocks than at three, and a signature it has
    more of at two blocks is taken away ``L - 3`` times, so that every total the pricing sums
    over kernels (`xla_cost.timemodel.kernel_time.price_table`: runs times each kernel's time)
    is exactly ``f(3) + (L - 3) (f(3) - f(2))``. Unknown runs stay unknown."""
    def runs(kernels: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int | None, Mapping[str, Any]]]:
        counted: dict[str, tuple[int | None, Mapping[str, Any]]] = {}
        for kernel in kernels:
            key, n = _signature(kernel), kernel.get("executions")
            before = counted.get(key, (0, kernel))[0]
            counted[key] = (None if before is None or n is None else before + n, kernel)
        return counted

    at_two, at_three = runs(two), runs(three)
    out = [dict(k) for k in three]
    last = {_signature(kernel): kernel for kernel in out}
    for key in dict.fromkeys([*at_three, *at_two]):
        n3, n2 = at_three.get(key, (0, None))[0], at_two.get(key, (0, None))[0]
        if n3 is None or n2 is None or n3 == n2:
            continue
        change = (layers - DEPTHS[1]) * (n3 - n2)
        if key in last:
            last[key]["executions"] += change
        else:
            out.append({**at_two[key][1], "executions": change})
    return [k for k in out if k.get("executions") != 0]


def _role(index: int | None, blocks: int) -> str:
    """A block's role in a program of ``blocks`` blocks: first, middle or last (None: outside the blocks)."""
    if index is None:
        return "outside"
    return "first" if index == 0 else "last" if index == blocks - 1 else "middle"


def extend_collectives(two: Sequence[Mapping[str, Any]], three: Sequence[Mapping[str, Any]], layers: int,
                       prefix: str, what: str = "the collectives") -> list[dict[str, Any]]:
    """The collective rows of ``layers`` blocks (`extend_depth`): rows of the first and last block
    and outside the blocks extended by the formula; the middle block's repeated."""
    def keyed(rows: Sequence[Mapping[str, Any]], blocks: int) -> dict[tuple[Any, ...], int | None]:
        found: dict[tuple[Any, ...], int | None] = {}
        for row in rows:
            index, rest = _block(row.get("layer", ""), prefix)
            role = _role(index, blocks)
            key = (role, rest, row["kind"], tuple(row["axes"]), row["group_size"], row["bytes"])
            n, before = row.get("executions"), found.get(key, 0)
            found[key] = None if n is None or before is None else before + n
        return found

    at_two = keyed(two, DEPTHS[0])
    out: list[dict[str, Any]] = []
    rows = list(three)
    i = 0
    direction = _direction(rows, prefix)
    while i < len(rows):
        index, rest = _block(rows[i].get("layer", ""), prefix)
        role = _role(index, DEPTHS[1])
        if role == "middle":  # the run of the middle block's rows, repeated for blocks 1 .. L-2
            j = i
            while j < len(rows) and _role(_block(rows[j].get("layer", ""), prefix)[0], DEPTHS[1]) == "middle":
                j += 1
            order = range(1, layers - 1) if direction >= 0 else range(layers - 2, 0, -1)
            for block in order:
                for row in rows[i:j]:
                    out.append({**row, "layer": _named(prefix, block, _block(row["layer"], prefix)[1])})
            i = j
            continue
        row = dict(rows[i])
        key = (role, rest, row["kind"], tuple(row["axes"]), row["group_size"], row["bytes"])
        n2, n3 = at_two.get(key, 0), row.get("executions")
        if n3 is not None and n2 is not None:
            row["executions"] = _linear(n2, n3, layers)
            if row["executions"] < 0:
                raise _refuse(f"{what}: a collective run {n2} times at {DEPTHS[0]} blocks and {n3} at "
                              f"{DEPTHS[1]}", layers)
        else:
            row["executions"] = None
        if role == "last":
            row["layer"] = _named(prefix, layers - 1, rest)
        if row["executions"] != 0:
            out.append(row)
        i += 1
    return out


def _direction(rows: Sequence[Mapping[str, Any]], prefix: str) -> int:
    """+1 where the program's rows run the blocks in ascending order (a forward pass), -1 descending
    (a backward pass): which of the first block's and the last's rows comes first."""
    seen = [index for index, _ in (_block(r.get("layer", ""), prefix) for r in rows) if index is not None]
    first = seen.index(0) if 0 in seen else None
    last = seen.index(DEPTHS[1] - 1) if DEPTHS[1] - 1 in seen else None
    return -1 if first is not None and last is not None and last < first else 1


def _by_block(two: Mapping[str, Any], three: Mapping[str, Any], layers: int, prefix: str) -> dict[str, Any]:
    """A mapping keyed by parameter path (the sharding's specs): block 1's entries repeated for blocks
    1 .. L-2, block 2's renamed L-1, the rest the 3-block program's."""
    out: dict[str, Any] = {}
    for name, value in three.items():
        index, rest = _block(name, prefix)
        if index == 1:
            out.update({_named(prefix, b, rest): value for b in range(1, layers - 1)})
        elif index == DEPTHS[1] - 1:
            out[_named(prefix, layers - 1, rest)] = value
        else:
            out[name] = value
    return out


def extend_depth(two: Any, three: Any, layers: int, prefix: str, model_parameters: int | None = None) -> Any:
    """The `xla_cost.Report` of the program of ``layers`` blocks from the same program's reports at
    `DEPTHS` (``two``, ``three``): see the module's docstring. ``prefix``: the blocks' module
    prefix (`block_structure`); ``model_parameters``: the ``layers``-block model's parameters,
    which the extension's must equal (None: not checked). Its notes say it was extended and that
    the figures the notes above quote are the 3-block program's; its target memory verdict is
    unknown (the 3-block program's says nothing of the whole one's fit).

    Raises:
      InputError: the rule does not hold (`block_structure`, a count below zero, unlike reports).
    """
    from xla_cost.analysis.report import Report

    if layers <= DEPTHS[1]:
        raise _refuse(f"{layers} blocks (the rule extends past {DEPTHS[1]})", layers)
    a, b = (_plain(r) for r in (two, three))
    special = {"kernel_list", "communication", "sharding", "config", "notes", "target_memory", "layers",
               "ratios", "xla_to_jaxpr", "communication_bytes"}
    data = {k: extend_figures(a.get(k), b[k], layers, k) for k in b if k not in special}
    data["config"] = {**b["config"], LAYERS_FIELD: layers}
    data["kernel_list"] = {phase: None if listed is None or (a.get("kernel_list") or {}).get(phase) is None
                           else extend_kernels(a["kernel_list"][phase], listed, layers)
                           for phase, listed in (b.get("kernel_list") or {}).items()}
    data["communication"] = {phase: extend_collectives((a.get("communication") or {}).get(phase) or [], rows, layers,
                                                 prefix, f"{phase}'s collectives")
                             for phase, rows in (b.get("communication") or {}).items()}
    sharding = dict(b.get("sharding") or {})
    if sharding:
        specs = sharding.pop("param_specs", None)
        sharding = extend_figures({k: v for k, v in a["sharding"].items() if k != "param_specs"}, sharding, layers,
                                  "sharding")
        sharding["devices"], sharding["mesh"] = b["sharding"]["devices"], b["sharding"]["mesh"]
        if specs is not None:
            sharding["param_specs"] = _by_block(a["sharding"].get("param_specs") or {}, specs, layers, prefix)
    data["sharding"] = sharding
    data["notes"] = [*b.get("notes", ()), describe(layers)]
    memory, before = b.get("target_memory"), a.get("target_memory")
    if memory is not None:
        data["target_memory"] = None  # the 3-block program's verdict says nothing of the whole one's fit
        if before is not None and None not in (memory.get("peak"), before.get("peak"), memory.get("usable")):
            peak = _linear(before["peak"], memory["peak"], layers)
            if peak > memory["usable"]:
                data["notes"].append(
                    f"{memory.get('peak_of') or 'its peak'} extended by depth peaks at {peak / 1e9:,.1f} GB, above "
                    f"the {memory['usable'] / 1e9:,.1f} GB usable on {memory.get('title') or memory.get('target')}: "
                    "compiled whole, its compiler would recompute instructions to bring it toward the memory "
                    "(XLA's rematerialization), which the extension, from programs that fit, does not price")
    if model_parameters is not None and data["parameters"] != model_parameters:
        raise _refuse(f"an extension of {data['parameters']:,} parameters for a model of {model_parameters:,}",
                      layers)
    return Report.from_dict(data)


def describe(layers: int) -> str:
    """The note an extended report carries."""
    return (f"{NOTE}: the program of {layers} identical blocks from its compiles at {DEPTHS[0]} and "
            f"{DEPTHS[1]} blocks, every figure f(3) + ({layers} - 3) (f(3) - f(2)) "
            "(xla_cost.study.depth.extend_depth); figures quoted in the notes above are the 3-block program's, and "
            "its memory verdict is unknown")


def _plain(report: Any) -> dict[str, Any]:
    data = report.to_dict() if hasattr(report, "to_dict") else dict(report)
    data.pop("layers", None)
    return data
