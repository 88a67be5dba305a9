"""A reader of compiled XLA programs: the HLO text ``compiled.as_text()`` prints.

`parse_module` gives the computations of a module, each instruction with its
shape, opcode, operands, attributes and the ``op_name`` jax left in its
metadata; `computation_runs` how often each computation runs per execution of
the program (the trip counts of the ``while`` loops around it multiplied out,
unknown where a loop has none); `parse_shape` and `shape_bytes` read shapes
(`xla_cost.compiled.shapes`); `code_computations` which of them run as code of their own
(`xla_cost.compiled.work` reads the bytes their kernels move).
`xla_cost.compiled.collectives` and `xla_cost.compiled.liveness` are built on it.

Only the standard library is used (no jax), so HLO text from any source can
be read.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence

from xla_cost.compiled.reads import result_shape, untouched_bytes
from xla_cost.compiled.shapes import COMMENT as _COMMENT
from xla_cost.compiled.shapes import (
    Array, Shape, device_memory_bytes, element_bits, parse_shape, shape_bytes, shape_dtypes, shape_leaves,
    split_top_level,
)

__all__ = [
    "Array", "Shape", "parse_shape", "shape_leaves", "shape_bytes", "shape_dtypes", "element_bits",
    "split_top_level", "attribute_value", "Instruction", "Computation", "Module", "parse_module",
    "parse_instruction", "describe_instruction", "program_order", "Runs", "computation_runs", "merge_names",
    "NAME_PATTERN", "matching_bracket", "custom_call_targets", "entry_output_bytes", "has_while_loop", "remat_clones", "LibraryBytes",
    "library_call_bytes", "library_call_target", "instruction_bytes",
    "entry_arguments", "unsized_conv_scratch", "CONTROL_FLOW", "ASYNC_WRAPPERS", "code_computations",
    "AsyncChain", "async_chains",
]

# ---------------------------------------------------------------------------
# Instructions and computations


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    shape_text: str
    opcode: str
    operands: str
    attributes: str
    is_root: bool

    @property
    def op_name(self) -> str:
        """The jax name stack of the instruction's metadata, its text's escapes undone (XLA prints
        ``\\'`` and ``\\"``: an NNX state's ``args[0]['layers']`` path)."""
        match = _OP_NAME.search(self.attributes)
        return _ESCAPED.sub(r"\1", match.group(1)) if match else ""

    @functools.cached_property
    def callees(self) -> tuple[tuple[str, str], ...]:
        """(attribute, computation) of every computation the instruction runs."""
        if self.opcode in _CALLS_NOTHING or self.opcode.endswith(("-done", "-update")):
            return ()  # (the start of an async pair is what runs its computation)
        if _CALLEE_KEY.search(self.attributes) is None:
            return ()  # most instructions: one search for the keys, not a scan of their metadata
        found = list(_SINGLE_CALLEE.findall(self.attributes))
        for key, body in _CALLEE_LIST.findall(self.attributes):
            found.extend((key, callee.lstrip("%")) for callee in split_top_level(body))
        return tuple(found)

    def operand_names(self) -> list[str]:
        """Operand names without ``%`` (an operand may be spelled ``f32[8] %x``)."""
        names = self.__dict__.get("_operand_names")  # read once: the analyses ask many times
        if names is None:
            found = []
            operands = self.operands
            if "/*" in operands:
                operands = _COMMENT.sub("", operands)  # drop /*index=5*/
            for operand in split_top_level(operands):
                token = operand.split()[-1]
                match = _OPERAND_NAME.search(token)
                if match is not None:
                    found.append(match.group(1))
            names = tuple(found)
            object.__setattr__(self, "_operand_names", names)  # a frozen dataclass's own cache
        return list(names)


@dataclasses.dataclass
class Computation:
    name: str
    is_entry: bool
    instructions: list[Instruction] = dataclasses.field(default_factory=list)

    def root(self) -> Instruction | None:
        for instruction in self.instructions:
            if instruction.is_root:
                return instruction
        return self.instructions[-1] if self.instructions else None

_CALLS_NOTHING = frozenset({
    "parameter", "constant", "iota", "tuple", "get-tuple-element", "bitcast", "bitcast-convert", "convert",
    "copy", "broadcast", "reshape", "transpose", "slice", "dynamic-slice", "dynamic-update-slice", "concatenate",
    "pad", "reverse", "gather", "dot", "convolution", "select", "clamp", "compare", "add", "subtract",
    "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and", "or", "xor", "not",
    "negate", "abs", "sign", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "exponential",
    "exponential-minus-one", "log", "log-plus-one", "logistic", "sqrt", "rsqrt", "cbrt", "tanh", "tan", "sine",
    "cosine", "erf", "is-finite", "shift-left", "shift-right-logical", "shift-right-arithmetic", "popcnt", "clz",
    "real", "imag", "complex", "partition-id", "replica-id", "after-all", "opt-barrier",
})
"""Opcodes whose instructions never run a computation: their ``callees`` are
known without a search of their attributes (most of a module's instructions)."""

NAME_PATTERN = r"%?([A-Za-z_][\w.\-]*)"

_INSTRUCTION_START = re.compile(r"^\s*(ROOT\s+)?" + NAME_PATTERN + r"\s*=\s+")

_OP_NAME = re.compile(r'\bop_name="((?:[^"\\]|\\.)*)"')
_ESCAPED = re.compile(r"\\(.)")

_OPERAND_NAME = re.compile(r"^%?([A-Za-z_][\w.\-]*)$")

_HEADER = re.compile(r"^(ENTRY\s+)?" + NAME_PATTERN + r"(?=[\s({])")

_TOKEN = re.compile(r"\S+")

_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")


_BRACKET_OR_QUOTE = re.compile(r'[()\[\]{}"\\]')

_CLOSING = {"(": ")", "[": "]", "{": "}"}


def matching_bracket(text: str, start: int) -> int:
    """Index just past the bracket that closes the one at ``text[start]`` (brackets
    inside a quoted string, where a backslash escapes the next character, do not
    count); ``len(text)`` when none closes it."""
    opener = text[start]
    closer = _CLOSING.get(opener)
    if closer is not None:  # most brackets hold no bracket of their kind and no string: the first closer
        close = text.find(closer, start + 1)
        if close >= 0 and text.find(opener, start + 1, close) < 0 and text.find('"', start + 1, close) < 0:
            return close + 1
    stack: list[str] = []
    quoted = False
    pos = start
    search = _BRACKET_OR_QUOTE.search  # jump from one character that matters to the next
    while (match := search(text, pos)) is not None:
        char, i = match.group(), match.start()
        pos = i + 1
        if quoted:
            if char == "\\":
                pos = i + 2
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in _CLOSING:
            stack.append(_CLOSING[char])
        elif stack and char == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
    return len(text)


def attribute_value(attributes: str, key: str) -> str | None:
    """The raw text after ``key=`` (up to the next top-level ``, word=``), or None."""
    match = re.search(r"(?:^|[\s,])" + re.escape(key) + r"=", attributes)
    if match is None:
        return None
    start = match.end()
    i = start
    while i < len(attributes):
        char = attributes[i]
        if char in "([{":
            i = matching_bracket(attributes, i)
            continue
        if char == "," and re.match(r",\s*[a-z_]+=", attributes[i:]):
            if not attributes[i:].lstrip(", ").startswith("device_ids="):
                break
        i += 1
    return attributes[start:i].strip()


_SIMPLE_INSTRUCTION = re.compile(
    r"\s*(ROOT\s+)?" + NAME_PATTERN + r"\s*=\s+([^\s(]\S*)\s+([a-z][\w\-]*)\(([^()\"]*)\)"
)
"""An instruction whose shape is one token and whose operands hold no bracket or
string (most of them): read by one match, as `parse_instruction`'s general path
reads it (ResNet-50's gradient: 16,808 instructions, 0.048 -> 0.02 s)."""


def parse_instruction(text: str) -> Instruction | None:
    simple = _SIMPLE_INSTRUCTION.match(text)
    if simple is not None:
        root, name, shape_text, opcode, operands = simple.groups()
        return Instruction(name=name, shape_text=shape_text, opcode=opcode, operands=operands,
                           attributes=text[simple.end():], is_root=root is not None)
    head = _INSTRUCTION_START.match(text)
    if head is None:
        return None
    pos = head.end()
    if text.startswith("(", pos):
        end = matching_bracket(text, pos)
    else:
        match = _TOKEN.match(text, pos)
        if match is None:
            return None
        end = match.end()
    shape_text = text[pos:end]
    opcode_match = _OPCODE.match(text, end)
    if opcode_match is None:
        return None
    open_paren = opcode_match.end() - 1
    close = matching_bracket(text, open_paren)
    return Instruction(
        name=head.group(2),
        shape_text=shape_text,
        opcode=opcode_match.group(1),
        operands=text[open_paren + 1:close - 1],
        attributes=text[close:],
        is_root=head.group(1) is not None,
    )


@dataclasses.dataclass(frozen=True)
class Module:
    computations: dict[str, Computation]
    entry: str | None
    replica_count: int
    num_partitions: int
    aliased_parameters: frozenset[int] = frozenset()
    """The entry parameters whose buffers an output takes (the header's
    ``input_output_alias``: donated arguments)."""

    @property
    def num_devices(self) -> int:
        return self.replica_count * self.num_partitions


@functools.lru_cache(maxsize=4)
def parse_module(hlo_text: str) -> Module:
    """Computations (in text order) and the header's replica/partition counts.

    The same text is parsed once while it is among the last few parsed: one
    compiled program's text is read by several analyses (kernels, bytes,
    liveness, collectives), none of which changes what it is given."""
    computations: dict[str, Computation] = {}
    entry: str | None = None
    replica_count = num_partitions = 1
    aliased: frozenset[int] = frozenset()
    current: Computation | None = None
    pending: list[str] = []

    def flush() -> None:
        if current is not None and pending:
            instruction = parse_instruction(pending[0] if len(pending) == 1 else " ".join(pending))
            if instruction is not None:
                current.instructions.append(instruction)
        pending.clear()

    for raw in hlo_text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if line.startswith("HloModule"):
            replicas = re.search(r"[\s,]replica_count=(\d+)", line)
            partitions = re.search(r"[\s,]num_partitions=(\d+)", line)
            replica_count = int(replicas.group(1)) if replicas else 1
            num_partitions = int(partitions.group(1)) if partitions else 1
            aliases = _ALIASES.search(line)
            if aliases is not None:
                aliased = frozenset(int(n) for n in _ALIASED_PARAMETER.findall(aliases.group(1)))
            continue
        if current is None:
            match = _HEADER.match(line)
            if match is not None and line.endswith("{"):
                current = Computation(match.group(2), match.group(1) is not None)
                computations[current.name] = current
                if current.is_entry:
                    entry = current.name
            continue
        if line.startswith("}") and not line.startswith("}}"):  # a computation's end ("}", "} // x", libtpu's
            flush()  # "}, execution_thread=..."), not the continuation a Pallas kernel's kernel_metadata={\n...\n}}, ends
            current = None
            continue
        if _INSTRUCTION_START.match(line):
            flush()
        pending.append(stripped)
    flush()
    return Module(computations, entry, replica_count, num_partitions, aliased)


_ALIASES = re.compile(r"input_output_alias=\{(.*?)\}\s*(?:,\s*[a-z_]+=|$)")
"""The header's ``input_output_alias={ {0}: (0, {}, may-alias), ... }``."""

_ALIASED_PARAMETER = re.compile(r":\s*\((\d+),")
"""The parameter number of one alias entry (``{1}: (3, {}, may-alias)`` -> 3)."""


# ---------------------------------------------------------------------------
# Call graph and loop multiplicity

_KNOWN_TRIP_COUNT = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')

_CALLEE_KEYS = (
    "condition=", "body=", "calls=", "to_apply=", "select=", "scatter=", "true_computation=",
    "false_computation=", "comparator=", "branch_computations=", "called_computations=",
)
_CALLEE_KEY = re.compile("|".join(re.escape(key) for key in _CALLEE_KEYS))

_SINGLE_CALLEE = re.compile(
    r"(?:^|[\s,])(condition|body|calls|to_apply|select|scatter|true_computation|"
    r"false_computation|comparator)=" + NAME_PATTERN
)

_CALLEE_LIST = re.compile(r"(?:^|[\s,])(branch_computations|called_computations|calls)=\{([^}]*)\}")


@dataclasses.dataclass(frozen=True)
class _Call:
    """``caller`` runs ``callee`` ``factor`` times (None: unknown) per execution."""

    caller: str
    callee: str
    factor: int | None
    unknown_loop: str = ""
    conditional: str = ""
    loop: bool = False  # a while loop's body or condition


def describe_instruction(instruction: Instruction) -> str:
    op_name = instruction.op_name
    return f"{instruction.name} ({op_name})" if op_name else instruction.name


def _calls(module: Module) -> list[_Call]:
    return [
        _edge(computation.name, callee, key, instruction, module, computation)
        for computation in module.computations.values()
        for instruction in computation.instructions
        if instruction.opcode not in _CALLS_NOTHING  # (most: no look at `callees` at all)
        for key, callee in instruction.callees
        if callee in module.computations
    ]


_CONSTANT = re.compile(r"^\s*(-?\d+)\s*$")
_INDEX = re.compile(r"index=(\d+)")


def _constant_value(instruction: Instruction | None, by_name: Mapping[str, Instruction]) -> int | None:
    """The integer a scalar ``constant`` holds (through copies and bitcasts); None otherwise."""
    seen = 0
    while instruction is not None and instruction.opcode in ("copy", "bitcast", "convert") and seen < 8:
        operands = instruction.operand_names()
        instruction, seen = (by_name.get(operands[0]) if operands else None), seen + 1
    if instruction is None or instruction.opcode != "constant":
        return None
    match = _CONSTANT.match(instruction.operands)
    return int(match.group(1)) if match else None


def _inferred_trip_count(module: Module, caller: Computation, instruction: Instruction) -> int | None:
    """A while loop's trips read from its program where the compiler records
    no ``known_trip_count`` (a TPU's): the condition ``i < N`` (``compare``
    of a tuple element with a constant, ``LT``), that element's start a
    constant ``C`` in the loop's initial tuple, and the body adding a positive
    constant ``s`` to it (1; 2 in XLA's windowed einsum loops, which run two
    steps of a collective matrix product per trip): ``ceil((N - C) / s)``
    trips. None where the loop is not of that form."""
    names = dict(instruction.callees)
    condition, body = module.computations.get(names.get("condition", "")), module.computations.get(names.get("body", ""))
    if condition is None or body is None:
        return None
    inner = {i.name: i for i in condition.instructions}
    root = condition.root()
    if root is None or root.opcode != "compare" or "direction=LT" not in root.attributes:
        return None
    operands = [inner.get(n) for n in root.operand_names()]
    if len(operands) != 2 or operands[0] is None or operands[0].opcode != "get-tuple-element":
        return None
    bound = _constant_value(operands[1], inner)
    index = _INDEX.search(operands[0].attributes)
    if bound is None or index is None:
        return None
    element = int(index.group(1))
    outer = {i.name: i for i in caller.instructions}
    start = instruction.operand_names()
    initial = outer.get(start[0]) if start else None
    if initial is None or initial.opcode != "tuple" or len(initial.operand_names()) <= element:
        return None
    begin = _constant_value(outer.get(initial.operand_names()[element]), outer)
    body_names = {i.name: i for i in body.instructions}
    body_root = body.root()
    if begin is None or body_root is None or body_root.opcode != "tuple" or len(body_root.operand_names()) <= element:
        return None
    step = body_names.get(body_root.operand_names()[element])
    if step is None or step.opcode != "add":
        return None
    strides = [s for n in step.operand_names() if (s := _constant_value(body_names.get(n), body_names)) is not None and s > 0]
    if not strides:
        return None
    return max(0, -(-(bound - begin) // strides[0]))


def program_order(module: Module) -> dict[tuple[str, int], int]:
    """Rank of every (computation, instruction position) in program order.

    From ENTRY, instruction by instruction; a called computation is walked where
    it is first called. Computations never reached follow, in text order.
    """
    rank: dict[tuple[str, int], int] = {}
    seen: set[str] = set()

    def walk(name: str) -> None:
        stack = [(name, 0)]
        seen.add(name)
        while stack:
            current, start = stack.pop()
            instructions = module.computations[current].instructions
            for position in range(start, len(instructions)):
                rank[(current, position)] = len(rank)
                callees = [callee for _, callee in instructions[position].callees
                           if callee in module.computations and callee not in seen]
                if callees:
                    stack.append((current, position + 1))
                    for callee in reversed(callees):
                        seen.add(callee)
                        stack.append((callee, 0))
                    break

    if module.entry is not None:
        walk(module.entry)
    for name in module.computations:
        if name not in seen:
            walk(name)
    return rank


def _edge(caller: str, callee: str, key: str, instruction: Instruction, module: Module | None = None,
          computation: Computation | None = None) -> _Call:
    if instruction.opcode == "while" and key in ("body", "condition"):
        trip = _KNOWN_TRIP_COUNT.search(instruction.attributes)
        count = int(trip.group(1)) if trip is not None else (
            _inferred_trip_count(module, computation, instruction) if module is not None and computation is not None
            else None)
        if count is None:
            return _Call(caller, callee, None, unknown_loop=describe_instruction(instruction), loop=True)
        return _Call(caller, callee, count if key == "body" else count + 1, loop=True)
    if instruction.opcode == "conditional":
        return _Call(caller, callee, 1, conditional=describe_instruction(instruction))
    return _Call(caller, callee, 1)


@dataclasses.dataclass(frozen=True)
class Runs:
    """How often a computation runs, and the unknowns behind that figure."""

    executions: int | None
    unknown_loops: tuple[str, ...] = ()
    conditionals: tuple[str, ...] = ()
    reachable: bool = True


def merge_names(*names: Sequence[str]) -> tuple[str, ...]:
    merged: list[str] = []
    for group in names:
        for name in group:
            if name not in merged:
                merged.append(name)
    return tuple(merged)


def computation_runs(module: Module, *, loops_once: bool = False) -> dict[str, Runs]:
    """Executions of every computation per execution of ENTRY; with ``loops_once``,
    as XLA's cost analysis counts them: a while loop's body and condition once."""
    callers: dict[str, list[_Call]] = {}
    for call in _calls(module):
        if loops_once and call.loop:
            call = dataclasses.replace(call, factor=1, unknown_loop="")
        callers.setdefault(call.callee, []).append(call)
    memo: dict[str, Runs] = {}

    def visit(name: str, active: frozenset[str]) -> Runs:
        if name in memo:
            return memo[name]
        if name == module.entry:
            result = Runs(1)
        elif name in active:  # a cycle: not valid HLO, say unknown
            return Runs(None)
        else:
            total: int | None = 0
            loops: tuple[str, ...] = ()
            conditionals: tuple[str, ...] = ()
            reachable = False
            for call in callers.get(name, []):
                parent = visit(call.caller, active | {name})
                if not parent.reachable:
                    continue
                reachable = True
                loops = merge_names(loops, parent.unknown_loops, [call.unknown_loop] if call.unknown_loop else [])
                conditionals = merge_names(conditionals, parent.conditionals,
                                      [call.conditional] if call.conditional else [])
                if total is None or parent.executions is None or call.factor is None:
                    total = None
                else:
                    total += parent.executions * call.factor
            result = Runs(total if reachable else 0, loops, conditionals, reachable)
        memo[name] = result
        return result

    return {name: visit(name, frozenset()) for name in module.computations}

_CUSTOM_CALL_TARGET = re.compile(r"custom_call_target=\"([^\"]+)\"")

_BOOKKEEPING_TARGETS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "AllocateBuffer",
    "annotate_device_placement", "MoveToHost", "MoveToDevice", "LayoutConstraint", "ConcatBitcast",
})
"""Custom calls that do no arithmetic (sharding and placement annotations; libtpu's
``ConcatBitcast``, the halves of an array its memory-space slicing split put back by a bitcast)."""


def custom_call_targets(hlo_text: str) -> dict[str, int]:
    """How many custom calls of each target the HLO text holds
    (``__cublas$gemm``, ``__cudnn$convForward``, ...), annotations that do no
    arithmetic left out."""
    counts: dict[str, int] = {}
    for line in hlo_text.splitlines():
        if " custom-call(" not in line:
            continue
        found = _CUSTOM_CALL_TARGET.search(line)
        target = found.group(1) if found else "?"
        if target not in _BOOKKEEPING_TARGETS:
            counts[target] = counts.get(target, 0) + 1
    return counts


@dataclasses.dataclass(frozen=True)
class LibraryBytes:
    """What a program's library calls read and write per execution.

    Attributes:
      bytes: their operands' and results' bytes, each call times the runs of
        its computation; None where a shape or a loop's trip count is unknown.
      calls: library calls, per execution (None: a trip count unknown).
      unknown: the calls whose bytes could not be read (``name (op_name)``).
    """

    bytes: int | None
    calls: int | None
    unknown: tuple[str, ...] = ()


_SCRATCH = frozenset({"u8", "s8"})
"""The element types of the scratch space a library call returns beside its result."""


def library_call_bytes(hlo_text: str) -> LibraryBytes:
    """The operand and result bytes of every custom call that does arithmetic
    (`custom_call_targets`'s), per execution of the program.

    XLA's cost analysis leaves these out on GPUs (a cuBLAS gemm, a cuDNN
    convolution reads its operands and writes its result all the same), so
    that a roofline on its ``bytes accessed`` misses them. An operand's shape
    is the one printed beside it or its instruction's; a result tuple's
    one-dimensional ``u8``/``s8`` element is the library's scratch space, left
    out. A call inside a loop counts once per iteration (`computation_runs`).
    """
    module = parse_module(hlo_text)
    runs = computation_runs(module)
    total: int | None = 0
    calls: int | None = 0
    unknown: list[str] = []
    for computation in module.computations.values():
        shapes = {i.name: i.shape_text for i in computation.instructions}
        executions = runs[computation.name].executions
        for instruction in computation.instructions:
            if instruction.opcode != "custom-call":
                continue
            target = _CUSTOM_CALL_TARGET.search(instruction.attributes)
            if target is not None and target.group(1) in _BOOKKEEPING_TARGETS:
                continue
            size = _call_bytes(instruction, shapes)
            if size is None:
                unknown.append(describe_instruction(instruction))
            if executions is None:
                total = calls = None
                continue
            if calls is not None:
                calls += executions
            total = None if total is None or size is None else total + executions * size
    return LibraryBytes(total, calls, tuple(unknown))


def unsized_conv_scratch(hlo_text: str) -> int:
    """An allowance for the cuDNN workspaces a deviceless GPU program leaves out:
    the largest operand + result bytes of a ``__cudnn$conv*`` call whose scratch
    element is ``u8[0]`` (0 when no convolution is left so).

    A deviceless compile cannot autotune, so XLA picks no convolution algorithm and
    gives no call a workspace; the device's autotuner gives each the scratch of the
    algorithm it chose (up to 4 GiB, XLA's ``TF_CUDNN_WORKSPACE_LIMIT_IN_MB``), and the
    buffer assignment, schedule and rematerialization change with them. Measured on
    an H200 (reports/data/conv_workspaces_nvidia-h200_2026-11-26.json: the real
    compile's final peak less the deviceless one's, 7 train steps of ResNet-18/34/50
    and ConvNet, batch 32 to 299, bfloat16 and float32): from 0 to 0.87 of this
    allowance (ResNet-18 at batch 256: 425 MB against its stem convolution's 488 MB;
    ResNet-50: 0.002 to 0.41), while the allowance is 8.5% to 27% of the peak; one
    workspace took up to 1.37 times its call's operands and result (ViT-B/16's patch
    embedding at batch 64). On an H100 ResNet-50's answer without it (batch 299 in
    a tenth of the memory) ran out of memory
    (reports/data/device_check_nvidia-h100-80gb-hbm3_2026-11-26-8.json)."""
    module = parse_module(hlo_text)
    largest = 0
    for computation in module.computations.values():
        shapes = {i.name: i.shape_text for i in computation.instructions}
        for instruction in computation.instructions:
            if instruction.opcode != "custom-call" or "__cudnn$conv" not in instruction.attributes:
                continue
            result = result_shape(instruction)
            scratch = result[-1] if isinstance(result, tuple) and result else None
            if not (isinstance(scratch, Array) and scratch.dtype in _SCRATCH and scratch.dims == (0,)):
                continue  # a workspace the compiler sized (a compile on the device, or loaded autotuning)
            size = _call_bytes(instruction, shapes)
            largest = max(largest, size or 0)
    return largest


def _call_bytes(instruction: Instruction, shapes: dict[str, str]) -> int | None:
    sizes: list[int | None] = []
    for operand in split_top_level(_COMMENT.sub("", instruction.operands)):
        words = operand.split()
        name = _OPERAND_NAME.search(words[-1])
        text = " ".join(words[:-1]) if len(words) > 1 else (shapes.get(name.group(1), "") if name else "")
        shape = parse_shape(text)
        sizes.append(None if shape is None else device_memory_bytes(shape))
    result = result_shape(instruction)
    if result is None:
        return None
    elements = list(result) if isinstance(result, tuple) else [result]
    kept = [e for e in elements if not (isinstance(e, Array) and e.dtype in _SCRATCH and len(e.dims) == 1)]
    sizes += [device_memory_bytes(e) for e in kept]
    return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


CONTROL_FLOW = frozenset({"while", "call", "conditional"})
"""Opcodes that run their computations as code of their own and no code
themselves (`code_computations`); every other computation an instruction names
(a fusion's, a reduction's, a sort's comparator) is part of that instruction."""

ASYNC_WRAPPERS = frozenset({"async-start"})
"""Opcodes whose computation is the op that runs (an asynchronous start and its
done are that op's launch and wait; `xla_cost.compiled.work.work_bytes` counts the op)."""


@dataclasses.dataclass(frozen=True)
class AsyncChain:
    """An asynchronous start's chain in its computation: ``start``, ``update``s, ``done``.

    Attributes:
      done: the name of the ``*-done`` that ends it ("" when none is found).
      fed: the operands its ``*-update`` instructions hand the op besides the chain's state
        (their first operand), in order. libtpu starts a SparseCore offload with no
        operands and gives them in an ``async-update`` (`xla_cost.compiled.printed`);
        open-source XLA's updates take the state alone.
    """

    done: str = ""
    fed: tuple[str, ...] = ()


def async_chains(computation: Computation) -> dict[str, AsyncChain]:
    """The `AsyncChain` of each asynchronous start of ``computation`` that has an
    update or a done, by the start's name."""
    by_name = {i.name: i for i in computation.instructions}
    dones: dict[str, str] = {}
    fed: dict[str, list[str]] = {}
    for instruction in computation.instructions:
        if not instruction.opcode.endswith(("-done", "-update")):
            continue
        operands = instruction.operand_names()
        source = by_name.get(operands[0]) if operands else None
        while source is not None and source.opcode.endswith("-update"):
            inner = source.operand_names()
            source = by_name.get(inner[0]) if inner else None
        if source is None:
            continue
        if instruction.opcode.endswith("-done"):
            dones[source.name] = instruction.name
        else:
            fed.setdefault(source.name, []).extend(operands[1:])
    return {start: AsyncChain(dones.get(start, ""), tuple(fed.get(start, ()))) for start in {*dones, *fed}}


def code_computations(module: Module) -> list[str]:
    """The computations whose instructions run as code of their own: ENTRY and,
    depth first in program order, what its loops, conditionals and calls run
    (`CONTROL_FLOW`) and the ops asynchronous starts wrap. A fused computation,
    a reduction's or scatter's computation and a sort's comparator run inside
    the instruction that names them: their instructions are not kernels."""
    if module.entry is None or module.entry not in module.computations:
        return []
    found: list[str] = []
    seen = {module.entry}
    stack = [module.entry]
    while stack:
        name = stack.pop()
        found.append(name)
        # each once: a computation called twice (from here, or by another path) runs as one
        # computation, its executions counted by `computation_runs`
        callees = list(dict.fromkeys(
            callee for instruction in module.computations[name].instructions
            if instruction.opcode in CONTROL_FLOW or instruction.opcode in ASYNC_WRAPPERS
            for _, callee in instruction.callees
            if callee in module.computations and callee not in seen))
        seen.update(callees)
        stack.extend(reversed(callees))
    return found


def entry_output_bytes(hlo_text: str) -> int | None:
    """The bytes of the arrays the program returns: its entry computation's root's leaves, each by
    its own shape and dtype (the output tuple's index table, 8 bytes an array that
    ``memory_analysis()``'s ``output_size_in_bytes`` counts, left out). None: no entry root, or a
    leaf of unknown size."""
    module = parse_module(hlo_text)
    if module.entry is None:
        return None
    root = module.computations[module.entry].root()
    shape = None if root is None else parse_shape(root.shape_text)
    return None if shape is None else shape_bytes(shape)


def entry_arguments(hlo_text: str) -> int | None:
    """The arrays a call of the program is passed: its entry computation's
    parameters (what the runtime hands over, one buffer each; a tuple
    parameter counts its leaves). None: no entry computation in the text."""
    module = parse_module(hlo_text)
    if module.entry is None:
        return None
    shapes = [parse_shape(i.shape_text) for i in module.computations[module.entry].instructions
              if i.opcode == "parameter"]
    return sum(1 if shape is None else len(shape_leaves(shape)) for shape in shapes)


_WHILE = re.compile(r"\swhile\(")
"""A ``while`` instruction's opcode and operand list (``%while.5 = (s32[], f32[4]) while(%tuple.3), ...``);
an ``op_name`` holds ``while/body``, a computation's name ``%while_body``: neither matches."""


def has_while_loop(hlo_text: str) -> bool:
    """Whether the HLO text keeps a ``while`` instruction (a loop XLA did not unroll)."""
    return _WHILE.search(hlo_text) is not None


_REMAT_CLONE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\.remat\d*\s*=", re.MULTILINE)


def remat_clones(hlo_text: str) -> int:
    """Instructions of an optimized module that XLA's rematerialization pass
    made (it names each recomputed clone ``<name>.remat``, ``.remat2``, ...):
    the compiler recomputing values to fit the device's memory."""
    if ".remat" not in hlo_text:  # most programs: one scan for the suffix, not a match at every line
        return 0
    return len(_REMAT_CLONE.findall(hlo_text))


def library_call_target(instruction: Instruction) -> str | None:
    """The target of a custom call that does arithmetic (``__cudnn$convForward``,
    ``__cublas$lt$matmul``, ...), as `custom_call_targets` counts them; None for
    any other instruction and for the annotations that do none (``Sharding``, ...)."""
    if instruction.opcode != "custom-call":
        return None
    found = _CUSTOM_CALL_TARGET.search(instruction.attributes)
    target = found.group(1) if found else "?"
    return None if target in _BOOKKEEPING_TARGETS else target


def instruction_bytes(instruction: Instruction, shapes: dict[str, str], module: Module | None = None) -> int | None:
    """The bytes one instruction reads and writes, as `xla_cost.compiled.work.work_bytes` counts each:
    its operands' and its result's in the device's memory (a library call's scratch space left out,
    and an array a TPU's memory-space assignment put on the chip, `xla_cost.compiled.shapes.ON_CHIP_SPACES`),
    less, where ``module`` is given, what it does not touch (the unread part
    of an operand it only slices, a buffer it updates in place). ``shapes``
    maps the names of its computation's instructions to their shape text.
    None where a shape is not understood."""
    size = _call_bytes(instruction, shapes)
    if size is None or module is None:
        return size
    return size - untouched_bytes(instruction, shapes, module.computations)
