"""Plant one bug at a time in a copy of the repository and see which tests catch it.

Each mutation below is a small, deliberate bug: exact text replacements in the
library (``file``, ``old`` text, ``new`` text), and the tests written to catch
it. For each one this script copies the repository to a temporary directory,
applies the replacements (failing loudly unless each ``old`` text occurs exactly
once), runs the test suite there against the copy's own ``xla_cost`` (the
mutation's own tests first, then the rest) and reports which tests failed. A test
run of the unmodified copy comes first: tests that fail there are left out of
the mutations' runs and reported.

Usage::

    python benchmarks/mutations.py                        # every mutation, the suite, first failure each
    python benchmarks/mutations.py --jobs 2               # two mutations at a time, in two copies
    python benchmarks/mutations.py --every-failure        # count every failing test (a whole suite each)
    python benchmarks/mutations.py --list                 # the mutations, nothing run
    python benchmarks/mutations.py --only dot_mac_as_one_flop best_counted_part \\
        --tests tests/count/test_closed_forms.py tests/analysis/test_unknown.py   # only these tests
    python benchmarks/mutations.py --source HEAD          # the last commit, not the working tree
    python benchmarks/mutations.py --check                # only check that every edit applies

By default a mutation's run stops at its first failing test, so a mutation its
own tests catch costs a pytest start-up and those tests; one they miss runs on
through the rest of the suite (about 7 minutes on 2 cores), after the baseline
of the whole suite (once, the first time one is needed). The output
is a markdown table: mutation, the failing tests' count and the first few names,
seconds; a mutation no test catches is marked NOT CAUGHT and the script exits
with status 1.

To update a mutation after a refactor, edit its ``Edit`` texts below: ``old``
must be copied exactly (whitespace included) from the current source and occur
once in its file; ``--check`` verifies all of them in seconds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Edit:
    """Replace ``old`` (which must occur exactly once) by ``new`` in ``file``."""

    file: str
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class Mutation:
    """A planted bug: its ``edits``, and ``tests``, the test files or node ids
    written to catch it, which run first (the rest of the suite after them)."""

    name: str
    description: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...] = ()


MUTATIONS: tuple[Mutation, ...] = (
    # ------------------------------------------------------------------ rules
    Mutation(
        "dot_mac_as_one_flop",
        "dot_general counts a multiply-add as 1 FLOP instead of 2",
        (Edit(
            "xla_cost/count/rules.py",
            "flops = size(outs[0]) if k == 1 else FLOPS_PER_FMA * size(outs[0]) * k",
            "flops = size(outs[0]) if k == 1 else size(outs[0]) * k",
        ),),
        tests=("tests/count/test_rules.py",),
    ),
    Mutation(
        "length_one_contraction_as_fma",
        "a contraction of length 1 counted as 2 FLOP per output (XLA: a multiply, 1)",
        (Edit(
            "xla_cost/count/rules.py",
            "flops = size(outs[0]) if k == 1 else FLOPS_PER_FMA * size(outs[0]) * k",
            "flops = FLOPS_PER_FMA * size(outs[0]) * k",
        ),),
        tests=("tests/count/test_rules.py",),
    ),
    Mutation(
        "conv_padded_taps",
        "convolutions count kernel taps that land on padding",
        (Edit(
            "xla_cost/count/rules.py",
            "valid = (u >= 0) & (u % lhs_dilation == 0) & (u // lhs_dilation < in_size)",
            "valid = u % lhs_dilation == 0",
        ),),
        tests=("tests/count/test_rules.py",),
    ),
    Mutation(
        "relu_max_costs_nothing",
        "the rule for the elementwise max (ReLU) returns 0 FLOP",
        (Edit(
            "xla_cost/count/rules.py",
            "@register(*sorted(ELEMENTWISE))\ndef _elementwise(",
            "@register(\"max\")\ndef _max_free(ins, outs, **_):\n    return Cost()\n\n\n"
            "@register(*sorted(ELEMENTWISE - {\"max\"}))\ndef _elementwise(",
        ),),
        tests=("tests/count/test_rules.py",),
    ),
    Mutation(
        "transcendental_as_flop",
        "exp, log, tanh, sqrt, ... counted as FLOP instead of transcendentals",
        (Edit(
            "xla_cost/count/rules.py",
            "return Cost(transcendentals=size(outs[0]), bytes_accessed=io_bytes(ins, outs))",
            "return Cost(flops=size(outs[0]), bytes_accessed=io_bytes(ins, outs))",
        ),),
        tests=("tests/count/test_rules.py",),
    ),
    Mutation(
        "reduction_n_not_n_minus_1",
        "a reduction of n inputs to m outputs counted as n operations, not n - m",
        (Edit(
            "xla_cost/count/rules.py",
            "flops=max(0, size(ins[0]) - size(outs[0])), bytes_accessed=io_bytes(ins, outs)",
            "flops=size(ins[0]), bytes_accessed=io_bytes(ins, outs)",
        ),),
        tests=("tests/count/test_rules.py",),
    ),
    # ------------------------------------------------------------------ interpreter
    Mutation(
        "loop_body_once",
        "scan trip count ignored: the body is counted once",
        (Edit(
            "xla_cost/count/interpret.py",
            "n = length if self.trip_counts else min(length, k + length % k)",
            "n = 1",
        ),),
        tests=("tests/count/test_interpret_loops.py",),
    ),
    Mutation(
        "while_body_once",
        "while (fori_loop) trip count ignored: the body is counted once",
        (Edit(
            "xla_cost/count/interpret.py",
            "n = 1 if trip is None or not self.trip_counts else trip",
            "n = 1",
        ),),
        tests=("tests/count/test_rules.py", "tests/count/test_interpret_loops.py"),
    ),
    Mutation(
        "scan_counter_free",
        "the scan's per-iteration counter (2 FLOP) not counted",
        (Edit("xla_cost/count/interpret.py", "SCAN_COUNTER_FLOPS = 2", "SCAN_COUNTER_FLOPS = 0"),),
        tests=("tests/count/test_interpret_loops.py",),
    ),
    Mutation(
        "unsupported_dropped",
        "a primitive without a rule is dropped from the unsupported list (silently 0)",
        (Edit(
            "xla_cost/count/interpret.py",
            "        if rule is None:\n            return self._unknown(name, times, part)",
            "        if rule is None:\n            return Cost()",
        ),),
        tests=("tests/analysis/test_unknown.py",),
    ),
    Mutation(
        "cond_cheapest_branch",
        "a cond is charged its cheapest branch instead of its most expensive",
        (Edit(
            "xla_cost/count/interpret.py",
            "index = max(range(len(costs)), key=lambda i: (costs[i].flops, costs[i].transcendentals))",
            "index = min(range(len(costs)), key=lambda i: (costs[i].flops, costs[i].transcendentals))",
        ),),
        tests=("tests/count/test_rules.py", "tests/count/test_closed_forms.py"),
    ),
    # ------------------------------------------------------------------ analysis
    Mutation(
        "best_counted_part",
        "_best returns the counted part instead of None when XLA has no figure and a rule is missing",
        (Edit(
            "xla_cost/analysis/costs.py",
            'return None, "unknown", (\n                f"{phase}: {key} unknown: XLA gave no figure',
            'return true, "unknown", (\n                f"{phase}: {key} unknown: XLA gave no figure',
        ),),
        tests=("tests/analysis/test_unknown.py",),
    ),
    Mutation(
        "best_ignores_unsupported",
        "_best takes an incomplete jaxpr count as the figure (source jaxpr) when XLA has none",
        (Edit(
            "xla_cost/analysis/costs.py",
            "    if xla_value is None:\n        if counted.unsupported:",
            "    if xla_value is None:\n        if False:",
        ),),
        tests=("tests/analysis/test_unknown.py",),
    ),
    Mutation(
        "loop_correction_dropped",
        "XLA's loop-body-once figure is flagged but not corrected",
        (Edit(
            "xla_cost/analysis/costs.py",
            'return xla_value + extra, "xla+loops", (\n'
            '        f"{phase}: XLA counts a loop body once ({describe_loops(counted)}); "\n',
            'return xla_value, "xla+loops", (\n'
            '        f"{phase}: XLA counts a loop body once ({describe_loops(counted)}); "\n',
        ),),
        tests=("tests/count/test_interpret_loops.py", "tests/analysis/test_jaxpr_vs_xla.py"),
    ),
    Mutation(
        "negative_xla_figure_kept",
        "a negative cost_analysis() value (a GPU custom call's -1) read as a number",
        (Edit(
            "xla_cost/compiled/xla.py",
            "if not math.isfinite(value) or value < 0:",
            "if not math.isfinite(value):",
        ),),
        tests=("tests/analysis/test_unknown.py", "tests/compiled/test_xla.py"),
    ),
    # ------------------------------------------------------------------ phases
    Mutation(
        "backward_grad_plus_forward",
        "backward computed as grad + forward instead of grad - forward",
        (Edit(
            "xla_cost/step/phases.py",
            'formula={"grad": 1, "forward": -1},',
            'formula={"grad": 1, "forward": 1},',
        ),),
        tests=("tests/step/test_phases.py", "tests/count/test_closed_forms.py"),
    ),
    Mutation(
        "train_step_without_update",
        "the derived train step leaves the update out (grad only)",
        (Edit(
            "xla_cost/step/phases.py",
            'formula={"grad": 1, "update": 1},',
            'formula={"grad": 1, "update": 0},',
        ),),
        tests=("tests/step/test_phases.py", "tests/count/test_closed_forms.py"),
    ),
    Mutation(
        "optimizer_not_followed",
        "the optimizer's arithmetic is not traced to the layers (all of it in the remainder)",
        (Edit(
            "xla_cost/step/phases.py",
            'program="update", arguments=("grads", "opt_state", "params"), follow_data=True,',
            'program="update", arguments=("grads", "opt_state", "params"), follow_data=False,',
        ),),
        tests=("tests/count/test_closed_forms.py",),
    ),
    # ------------------------------------------------------------------ attribution
    Mutation(
        "update_attributed_to_forward",
        "per-layer rows: the update's FLOP land in the forward column",
        (Edit(
            "xla_cost/count/attribution.py",
            '                forward=cost["forward"],\n'
            '                backward=cost["backward"],\n'
            '                update=cost["update"],',
            '                forward=cost["forward"] + cost["update"],\n'
            '                backward=cost["backward"],\n'
            '                update=cost["update"] * 0,',
        ),),
        tests=("tests/count/test_closed_forms.py",),
    ),
    Mutation(
        "depth_ignored",
        "depth=N does not merge rows",
        (Edit(
            "xla_cost/count/attribution.py",
            "    if depth is None or path == REMAINDER:\n        return path",
            "    if True:\n        return path",
        ),),
        tests=("tests/count/test_interpret_loops.py", "tests/zoo/test_seed_nets.py"),
    ),
    # ------------------------------------------------------------------ comm
    Mutation(
        "halving_doubling_floor_hops",
        "halving-doubling hops floor(log2 n) instead of ceil: too few at n not a power of two",
        (Edit(
            "xla_cost/timemodel/comm.py",
            "def _halving_doubling_hops(n: int) -> int:\n    return math.ceil(math.log2(n))",
            "def _halving_doubling_hops(n: int) -> int:\n    return int(math.log2(n))",
        ),),
        tests=("tests/timemodel/test_comm.py",),
    ),
    Mutation(
        "all_to_all_algorithm_hops",
        "all-to-all charged the algorithm's hops (log2 n under halving-doubling) instead of n - 1",
        (Edit(
            "xla_cost/timemodel/comm.py",
            '    if name == "all-to-all":\n'
            "        return (n - 1) / n * nbytes / link.bandwidth + (n - 1) * link.latency",
            '    if name == "all-to-all":\n'
            "        return (n - 1) / n * nbytes / link.bandwidth + hops * link.latency",
        ),),
        tests=("tests/timemodel/test_comm.py",),
    ),
    Mutation(
        "ring_across_nodes_over_one_adapter",
        "a ring across nodes priced over one adapter of the node, not over each of its devices' (issue 51: "
        "FSDP across nodes ~8x too slow)",
        (Edit(
            "xla_cost/timemodel/bus.py",
            "            busbw = min(near, reach(nbytes / per_node, network) * per_node)",
            "            busbw = min(near, reach(nbytes, network))",
        ),),
        tests=("tests/timemodel/test_bus.py",),
    ),
    Mutation(
        "bus_curve_linear_in_size",
        "bus bandwidth interpolated linearly in the size between published sizes, not in its logarithm",
        (Edit(
            "xla_cost/timemodel/bus.py",
            "        w = (math.log(nbytes) - math.log(s0)) / (math.log(s1) - math.log(s0))",
            "        w = (nbytes - s0) / (s1 - s0)",
        ),),
        tests=("tests/timemodel/test_bus.py",),
    ),
    # ------------------------------------------------------------------ scaling
    Mutation(
        "estimate_flop_per_step_as_per_sample",
        "estimate: the train step's FLOP not divided by its batch (total FLOP batch x too large)",
        (Edit(
            "xla_cost/runs/estimates.py",
            "per_sample = (flops - update + update / (micro * shards)) / single.batch_size",
            "per_sample = flops - update + update / (micro * shards)",
        ),),
        tests=("tests/runs/test_estimate.py",),
    ),
    # ------------------------------------------------------------------ store
    Mutation(
        "store_key_without_dtype",
        "the results-store key leaves the dtype out: float32 and bfloat16 share one row",
        (Edit(
            "xla_cost/compiled/store.py",
            '{"format": FORMAT, "config": config, "environment": dict(env or environment())}',
            '{"format": FORMAT, "config": {k: v for k, v in config.items() if k != "dtype"}, '
            '"environment": dict(env or environment())}',
        ),),
        tests=("tests/runs/test_sweeps.py",),
    ),
    Mutation(
        "cache_key_without_input_dtype",
        "the analysis-cache key describes arrays by shape only: bfloat16 inputs get the float32 report",
        (Edit(
            "xla_cost/compiled/store.py",
            'return {"shape": list(value.shape), "dtype": str(value.dtype)}',
            'return {"shape": list(value.shape)}',
        ),),
        tests=("tests/compiled/test_hlo.py", "tests/runs/test_sweeps.py"),
    ),
    # ------------------------------------------------------------------ sweeps
    Mutation(
        "killed_worker_config_dropped",
        "a configuration whose worker process died is not retried (left missing until a rerun)",
        (Edit(
            "xla_cost/runs/sweeps.py",
            "queue.insert(0, config)",
            "pass  # dropped",
        ),),
        tests=("tests/runs/test_sweeps.py",),
    ),
    # ------------------------------------------------------------------ timing
    Mutation(
        "timing_median_is_the_min",
        "a phase's reported median time is the fastest run instead of the median",
        (Edit(
            "xla_cost/analysis/timing.py",
            "median_s=statistics.median(times), min_s=min(times)",
            "median_s=min(times), min_s=min(times)",
        ),),
        tests=("tests/analysis/test_timing.py",),
    ),
    # ------------------------------------------------------------------ step parts (issue 29)
    Mutation(
        "step_forward_cascades_into_backward",
        "forward work that refined backward work reads turns backward too: under jax.grad the loss is "
        "dead and the whole forward becomes backward (issue 30, row 1)",
        (Edit(
            "xla_cost/count/step_parts.py",
            "                if node.part == FORWARD and (said == {BACKWARD} or rounding):",
            "                if node.part == FORWARD and (seen == {BACKWARD} or rounding):",
        ),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "step_metrics_on_gradients_are_update",
        "update work that only a returned metric reads stays the update's (a logged gradient norm; "
        "issue 30, row 4)",
        (Edit(
            "xla_cost/count/step_parts.py",
            "                elif node.part == UPDATE and seen and seen <= {OTHER, _METRIC}:",
            "                elif node.part == UPDATE and not seen and seen <= {OTHER, _METRIC}:",
        ),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "remat_every_recomputation_has_a_twin",
        "every equation of a jax.checkpoint recomputation counts as repeated, even where its primal "
        "is dead code (jax.grad of a checkpointed loss; issue 30, row 2)",
        (Edit(
            "xla_cost/count/interpret.py",
            "            if primal[key] > 0:",
            "            if True:",
        ),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "step_scan_carry_one_round",
        "a scan's carries classified once, not to the fixpoint: a running sum of the gradients' "
        "accumulator is 'other'",
        (Edit(
            "xla_cost/count/step_parts.py",
            "            for _ in range(_rounds(carry)):\n                out_taint, out_owner",
            "            for _ in range(1):\n                out_taint, out_owner",
        ),),
        tests=("tests/step/test_step_parts.py",),
    ),
    Mutation(
        "step_while_carry_four_rounds",
        "a while loop's carries classified at most 4 times: the 5th link of a chain of carried sums is 'other'",
        (Edit(
            "xla_cost/count/step_parts.py",
            "        for _ in range(_rounds(len(carry_taint))):",
            "        for _ in range(4):",
        ),),
        tests=("tests/step/test_step_parts.py",),
    ),
    Mutation(
        "step_cond_operands_shifted",
        "a cond's branches see their operands shifted by one (the branch index's taint first): "
        "cond(flag, f, g, params, grads) has no update",
        (Edit(
            "xla_cost/count/step_parts.py",
            "results = [self.classify(b, taint[1:], owners[1:], state[1:]) for b in node.levels]",
            "results = [self.classify(b, taint[:-1], owners[:-1], state[:-1]) for b in node.levels]",
        ),),
        tests=("tests/step/test_step_parts.py::"
               "test_a_cond_given_two_layers_params_and_grads_charges_each_layer_its_own_update",),
    ),
    Mutation(
        "step_rollout_of_updated_params_is_update",
        "the model run outside autodiff on parameters an earlier iteration updated (a rollout of the policy in "
        "a jitted loop of training iterations) is the update: purejaxrl's update holds its rollout's network calls",
        (Edit(
            "xla_cost/count/step_parts.py",
            "node.part = autodiff or (UPDATE if any_taint and not self.runs_model(node.stack) else OTHER)",
            "node.part = autodiff or (UPDATE if any_taint else OTHER)",
        ),),
        tests=("tests/step/test_step_parts.py",),
    ),
    Mutation(
        "privatizer_noise_kept_in_state_is_other",
        "other work that only the new state reads blocks what also feeds the update: a DP privatizer's noise "
        "written into its buffer (jax_privacy's BandMF) is 'other', not the update (241,670 FLOP of a small MLP)",
        (Edit(
            "xla_cost/count/update_work.py",
            "    allowed = {*confirming, _STATE}",
            "    allowed = set(confirming)",
        ),),
        tests=("tests/step/test_step_parts.py::test_a_privatizers_noise_is_the_update_whether_or_not_its_state_keeps_it",),
    ),
    Mutation(
        "unknown_trip_loop_said_on_the_step_only",
        "a while loop of unknown trip count noted on train_step alone: the parts whose work it holds once (a "
        "fori_loop over micro-batches bounded at run time) say nothing of being a lower bound",
        (Edit(
            "xla_cost/analysis/user_step.py",
            "notes=tuple(unknown_loop_notes(counted.loops, counted.equations,\n",
            "notes=tuple(unknown_loop_notes((), counted.equations,\n",
        ),),
        tests=("tests/step/test_analyze_step.py::test_a_loop_of_micro_batches_of_unknown_trip_count_is_said_on_every_part_it_holds",),
    ),
    Mutation(
        "step_class_trees_kept_when_worse",
        "the trees named after their classes only where that resolves fewer of the passes' stacks: several "
        "models' trees side by side (cleanrl's AgentParams) keep paths no stack names, every row 0 FLOP",
        (Edit(
            "xla_cost/analysis/step_classes.py",
            "return candidate if matched(candidate) > matched(prepared) else prepared",
            "return candidate if matched(candidate) < matched(prepared) else prepared",
        ),),
        tests=("tests/step/test_step_parts.py",),
    ),
    Mutation(
        "nested_scan_not_named_inside",
        "a scan's loops are recorded without the scans they run inside: the loop note lists a minibatch "
        "scan inside an epoch scan as 'scan x2 at <top>, scan x2 at <top>'",
        (Edit(
            "xla_cost/count/interpret.py",
            "within, self.within = self.within, (*self.within, loop_label(\"scan\", length, stack))",
            "within, self.within = self.within, self.within",
        ),),
        tests=("tests/count/test_interpret_loops.py",),
    ),
    Mutation(
        "step_combined_collective_first_member",
        "a collective XLA combined goes to its first member's part, not the majority's: the gradients' "
        "all-reduce combined after the loss's is 'other'",
        (Edit(
            "xla_cost/analysis/user_step.py",
            "return max(dict.fromkeys(found), key=lambda p: (found.count(p), work[p])) == part",
            "return found[0] == part",
        ),),
        tests=("tests/step/test_step_parts.py",),
    ),
    Mutation(
        "step_combined_collective_tie_to_first",
        "a collective XLA combined from as many members of two parts goes to the first member's, not "
        "the one with the most work: the loss's all-reduce combined with a gradient's is 'other'",
        (Edit(
            "xla_cost/analysis/user_step.py",
            "return max(dict.fromkeys(found), key=lambda p: (found.count(p), work[p])) == part",
            "return max(dict.fromkeys(found), key=found.count) == part",
        ),),
        tests=("tests/step/test_step_parts.py",),
    ),
    Mutation(
        "psum_invariant_unknown",
        "shard_map's default pmean (psum_invariant) has no rule: the step's backward and update unknown",
        (Edit(
            "xla_cost/count/rules.py",
            '@register("psum", "psum_invariant", "pmax", "pmin", "reduce_scatter")',
            '@register("psum", "pmax", "pmin", "reduce_scatter")',
        ),),
        tests=("tests/step/test_step_parts.py",),
    ),
    Mutation(
        "psum_scatter_unknown",
        "lax.psum_scatter (reduce_scatter) has no rule: a step holding one has forward, backward and grad unknown",
        (Edit(
            "xla_cost/count/rules.py",
            '@register("psum", "psum_invariant", "pmax", "pmin", "reduce_scatter")',
            '@register("psum", "psum_invariant", "pmax", "pmin")',
        ),),
        tests=("tests/count/test_rules.py", "tests/step/test_step_parts.py"),
    ),
    Mutation(
        "step_layer_trip_count_min",
        "a step's per-layer row takes the smallest trip count of its parts (the update's, once): a scanned "
        "layer runs once",
        (Edit(
            "xla_cost/count/attribution.py",
            "    return max(passes.values(), key=weight).trip_count",
            "    return min(row.trip_count for row in found.values())",
        ),),
        tests=("tests/step/test_step_parts.py",),
    ),
    # ------------------------------------------------------------------ runs and parallel (issue 29)
    Mutation(
        "pipeline_stage_filling_a_node_on_nvlink",
        "a pipeline stage of exactly node_size devices sends to the next over NVLink, not the network "
        "(a block of stages whose last device is the next node's first counted as within the node)",
        (Edit(
            "xla_cost/parallel/placement.py",
            "k * block // node_size != ((k + 1) * block - 1) // node_size",
            "k * block // node_size != ((k + 1) * block - 2) // node_size",
        ),),
        tests=("tests/runs/test_predict.py", "tests/runs/test_estimate.py"),
    ),
    Mutation(
        "replicas_of_a_node_filling_stage_within_the_node",
        "the replicas of a stage of exactly node_size devices all-reduce over NVLink, not the network "
        "(the replicas placed as consecutive devices, not as the run's outermost axis)",
        (Edit(
            "xla_cost/runs/step_communication.py",
            "span(mesh, (schedule.REPLICAS,), cluster.node_size)",
            "span([(schedule.REPLICAS, layout.data)], (schedule.REPLICAS,), cluster.node_size)",
        ),),
        tests=("tests/runs/test_estimate.py",),
    ),
    Mutation(
        "estimate_drops_the_partial_last_step",
        "a run's optimizer steps rounded down: the last, partial step of the data set is not priced",
        (Edit(
            "xla_cost/runs/estimates.py",
            "steps = math.ceil(n / step.global_batch)",
            "steps = math.floor(n / step.global_batch)",
        ),),
        tests=("tests/runs/test_estimate.py", "tests/runs/test_scaling.py"),
    ),
    Mutation(
        "fit_accepts_a_memory_fraction_of_0",
        "max_batch_size accepts memory_fraction=0 (no usable memory) instead of refusing it",
        (Edit(
            "xla_cost/runs/fit.py",
            "or not 0 < memory_fraction <= 1:",
            "or not 0 <= memory_fraction <= 1:",
        ),),
        tests=("tests/runs/test_fit.py",),
    ),
    Mutation(
        "fit_refuses_a_memory_fraction_of_1",
        "max_batch_size refuses memory_fraction=1 (all of the memory), the top of its documented (0, 1]",
        (Edit(
            "xla_cost/runs/fit.py",
            "or not 0 < memory_fraction <= 1:",
            "or not 0 < memory_fraction < 1:",
        ),),
        tests=("tests/runs/test_fit.py",),
    ),
    # fit_search_steps_below_the_smallest_batch (min(max(guess, low + step), high - step) without
    # its max) was taken out on 2026-11-29: an equivalent mutation, no test can catch it. In
    # fit._search a guess below low + step cannot reach that line: a guess at or below the largest
    # fit is moved to low + up, a downward check is top - step (the prediction is never above a
    # batch known to fail, so `down` stays one step), and bisection's isqrt(low * high) with
    # high > 2 * low is at least low + step for every low >= 2 * step (low = step ends the search
    # first: 2 * step is compiled next). Checked on 2,560 curves and limits: the batches asked
    # with and without the max are the same.
    Mutation(
        "simulated_device_limit_excludes_the_maximum",
        "a mesh of exactly MAX_SIMULATED_DEVICES (4,096) devices is refused as too many",
        (Edit(
            "xla_cost/parallel/simulated.py",
            "if count > MAX_SIMULATED_DEVICES:",
            "if count >= MAX_SIMULATED_DEVICES:",
        ),),
        tests=("tests/parallel/test_sharding.py::test_the_cpu_simulates_at_most_4096_devices",),
    ),
    # ------------------------------------------------------------------ mixtures of experts (issue 50)
    Mutation(
        "active_parameters_count_the_routed_experts_whole",
        "a routed expert's parameters count whole in the active parameters, not top_k / experts of them",
        (Edit(
            "xla_cost/step/routing.py",
            "share = Fraction(routing[index].top_k, routing[index].experts)",
            "share = Fraction(1)",
        ),),
        tests=("tests/step/test_routing.py", "tests/zoo/test_mixtral.py::test_total_and_active_parameters_of_the_published_configurations"),
    ),
    Mutation(
        "expert_slots_not_split_by_expert",
        "the logical name of the experts' dimension of the dispatched slots maps to no mesh axis: no all-to-all",
        (Edit(
            "xla_cost/parallel/sharding.py",
            '("activation_exp", "expert"),',
            '("activation_exp", None),',
        ),),
        tests=("tests/parallel/test_sharding.py::test_expert_parallel_mixtral_on_an_h100_mesh_moves_its_tokens_by_all_to_all",),
    ),
    # ------------------------------------------------------------------ compiled, split, units, store (issue 29)
    Mutation(
        "donated_layout_copy_is_the_updates",
        "any copy of a donated argument, also a layout-changing one, is taken for the update's kept old value",
        (Edit(
            "xla_cost/compiled/trace.py",
            "\n                and operands[0] in donated and instruction.shape_text == names[operands[0]].shape_text:",
            "\n                and operands[0] in donated:",
        ),),
        tests=("tests/compiled/test_trace.py",),
    ),
    Mutation(
        "inferred_source_row_ignores_its_reads",
        "an instruction whose op_name was inferred is timed on its name's layer, not the module whose arguments it reads",
        (Edit(
            "xla_cost/analysis/split.py",
            'if len(read) == 1 and (source.inferred or (row == REMAINDER and self.pass_of(source.op_name) == "update")):',
            'if len(read) == 1 and (row == REMAINDER and self.pass_of(source.op_name) == "update"):',
        ),),
        tests=("tests/analysis/test_split.py",),
    ),
    Mutation(
        "tera_prefix_printed_as_peta",
        "the 1e12 prefix is labelled P: TFLOP figures print as PFLOP",
        (Edit("xla_cost/present/units.py", '(1e12, "T")', '(1e12, "P")'),),
        tests=("tests/present/test_units.py",),
    ),
    Mutation(
        "pct_without_100",
        "pct prints the share itself as a percentage (100x too small)",
        (Edit("xla_cost/present/units.py", 'return f"{100 * value:.{digits}f}%"', 'return f"{value:.{digits}f}%"'),),
        tests=("tests/present/test_units.py",),
    ),
    Mutation(
        "pct_sig_without_100",
        "pct_sig prints the share itself as a percentage (100x too small)",
        (Edit("xla_cost/present/units.py", 'return f"{sig(100 * value, digits)}%"', 'return f"{sig(value, digits)}%"'),),
        tests=("tests/present/test_units.py",),
    ),
    Mutation(
        "store_results_newest_first",
        "Store.results lists the newest row first (documented: oldest first)",
        (Edit(
            "xla_cost/compiled/store.py",
            '"SELECT * FROM results ORDER BY created, key"',
            '"SELECT * FROM results ORDER BY created DESC, key"',
        ),),
        tests=("tests/compiled/test_store.py",),
    ),
    Mutation(
        "store_select_newest_first",
        "Store.select (store list, store_contents) lists the newest row first (documented: oldest first)",
        (Edit(
            "xla_cost/compiled/store.py",
            '{clause} ORDER BY created, key"',
            '{clause} ORDER BY created DESC, key"',
        ),),
        tests=("tests/compiled/test_store.py", "tests/cli/test_store_command.py"),
    ),
    Mutation(
        "store_delete_empty_key_deletes_all",
        "store_delete(key='') passes the selection guard and deletes every row",
        (Edit(
            "xla_cost/runs/stores.py",
            "if not (failed or model or key or everything):",
            "if not (failed or model or key is not None or everything):",
        ),),
        tests=("tests/cli/test_store_command.py",),
    ),
    # ------------------------------------------------------------------ the next modules' boundaries (issue 29)
    Mutation(
        "group_filling_a_node_spans_nodes",
        "a collective group of exactly node_size devices priced over the network instead of NVLink",
        (Edit(
            "xla_cost/timemodel/comm.py",
            "span_nodes = group_size > self.node_size",
            "span_nodes = group_size >= self.node_size",
        ),),
        tests=("tests/timemodel/test_comm.py",),
    ),
    Mutation(
        "bucket_at_its_size_left_open",
        "a gradient bucket that reaches exactly bucket_bytes is not closed (merged with the next piece)",
        (Edit(
            "xla_cost/timemodel/schedule.py",
            "        if size >= bucket_bytes:\n            out.append(Piece(size, ready))",
            "        if size > bucket_bytes:\n            out.append(Piece(size, ready))",
        ),),
        tests=("tests/timemodel/test_schedule.py",),
    ),
    Mutation(
        "bubble_p_not_p_minus_1",
        "the 1F1B pipeline bubble counted as p / (v m) instead of (p - 1) / (v m)",
        (Edit(
            "xla_cost/timemodel/schedule.py",
            "    return (stages - 1) / (chunks * micro_batches)",
            "    return stages / (chunks * micro_batches)",
        ),),
        tests=("tests/timemodel/test_schedule.py",),
    ),
    Mutation(
        "communication_longer_than_compute_hidden",
        "communication longer than the compute it overlaps is hidden up to the overlap share only",
        (Edit(
            "xla_cost/timemodel/schedule.py",
            "exposed = max((1 - overlap) * comm, comm - compute, 0.0)",
            "exposed = max((1 - overlap) * comm, 0.0)",
        ),),
        tests=("tests/timemodel/test_comm.py", "tests/timemodel/test_schedule.py"),
    ),
    Mutation(
        "as_many_stages_as_layers_refused",
        "a pipeline of exactly n_layer stages (one layer each) refused",
        (Edit(
            "xla_cost/runs/layouts.py",
            "    if stages > config[\"n_layer\"]:",
            "    if stages >= config[\"n_layer\"]:",
        ),),
        tests=("tests/runs/test_layouts.py",),
    ),
    Mutation(
        "last_device_id_outside_the_mesh",
        "a replica group naming the mesh's last device refused as outside it",
        (Edit(
            "xla_cost/compiled/collectives.py",
            "if ids.min() < 0 or ids.max() >= total:",
            "if ids.min() < 0 or ids.max() >= total - 1:",
        ),),
        tests=("tests/compiled/test_hlo.py::test_group_axes",),
    ),
    Mutation(
        "combined_collective_fusion_unread",
        "a nameless collective's operands are not traced through the fusion that packs them (a GPU's wrapped "
        "concatenate): its combined gradient all-reduce is named by nothing, and a user's step puts it in 'other'",
        (Edit(
            "xla_cost/compiled/collectives.py",
            "        elif not (instruction.opcode in _PASSES_ON or _moves_only(module, instruction)):\n",
            "        elif instruction.opcode not in _PASSES_ON:\n",
        ),),
        tests=("tests/compiled/test_hlo.py::test_a_nameless_collective_is_named_by_the_operands_it_combines",
               "tests/parallel/test_sharding.py::test_a_user_steps_gpu_combined_gradient_all_reduce_is_backwards"),
    ),
    Mutation(
        "calibration_share_of_one_refused",
        "a time-model constant at its upper bound (a matmul share of exactly 1, all of peak) refused",
        (Edit(
            "xla_cost/timemodel/calibration.py",
            "not low <= value <= high",
            "not low <= value < high",
        ),),
        tests=("tests/timemodel/test_calibration.py",),
    ),
    Mutation(
        "last_wave_counted_full",
        "the products' tiles priced as if the last wave filled every unit (no idle tail)",
        (Edit(
            "xla_cost/timemodel/kernel_time.py",
            "waves = parts / (np.ceil(parts / units) * units)",
            "waves = np.minimum(parts / units, 1.0)",
        ),),
        tests=("tests/timemodel/test_kernel_time.py",),
    ),
    Mutation(
        "launches_left_out_of_a_kernel_list",
        "a program priced kernel by kernel without its launches",
        (Edit(
            "xla_cost/timemodel/kernel_time.py",
            "return KernelSeconds(matmul, memory, float((overhead * table.runs).sum()), kernels,",
            "return KernelSeconds(matmul, memory, 0.0, kernels,",
        ),),
        tests=("tests/timemodel/test_kernel_time.py",),
    ),
    Mutation(
        "product_bytes_ignored",
        "a product kernel priced by its FLOP alone, however many bytes it moves",
        (Edit(
            "xla_cost/timemodel/kernel_time.py",
            "work = np.where(has_product, np.maximum(product_s, memory_s), memory_s)",
            "work = np.where(has_product, product_s, memory_s)",
        ),),
        tests=("tests/timemodel/test_kernel_time.py",),
    ),
    Mutation(
        "product_batch_dims_dropped",
        "a batched product read with its batch dimensions in m",
        (Edit(
            "xla_cost/compiled/products.py",
            "m = math.prod(lhs.dims) // max(1, k * batch)",
            "m = math.prod(lhs.dims) // max(1, k)",
        ),),
        tests=("tests/compiled/test_products.py",),
    ),
    Mutation(
        "fusion_product_flop_of_the_largest_only",
        "a fusion's products' FLOP taken from its largest product alone",
        (Edit(
            "xla_cost/compiled/products.py",
            "return dataclasses.replace(largest, flops=sum(p.flops for p in products),",
            "return dataclasses.replace(largest, flops=largest.flops,",
        ),),
        tests=("tests/compiled/test_products.py",),
    ),
    Mutation(
        "si_prefix_before_rounding",
        "si chooses the prefix before rounding: 999,999,999,999 reads 1,000 G instead of 1.000 T",
        (Edit(
            "xla_cost/present/units.py",
            "        if abs(rounded) >= scale:\n            return f\"{sig(rounded / scale, digits)} {prefix}\"",
            "        if abs(value) >= scale:\n            return f\"{sig(value / scale, digits)} {prefix}\"",
        ),),
        tests=("tests/present/test_units.py",),
    ),
    # ------------------------------------------------------------------ targets, kernel pricing, validation (issue 49)
    Mutation(
        "peaks_cache_key_without_arithmetic",
        "the kernel prices' peaks cache keyed without the arithmetic: a program priced again with float32 "
        "arithmetic reuses its first prices",
        (Edit(
            "xla_cost/timemodel/kernel_time.py",
            "key = (id(table), device.name, arithmetic)",
            "key = (id(table), device.name)",
        ),),
        tests=("tests/timemodel/test_kernel_time.py",),
    ),
    Mutation(
        "split_k_without_its_16_way_split",
        "a product's contraction split in at most 8 parts: an output of 8 tiles fills 64 of 132 SMs",
        (Edit("xla_cost/timemodel/kernel_time.py", "SPLIT_K = (1, 2, 4, 8, 16)", "SPLIT_K = (1, 2, 4, 8)"),),
        tests=("tests/timemodel/test_kernel_time.py",),
    ),
    Mutation(
        "conv_batch_group_count_ignored",
        "a convolution's batch_group_count ignored: a depthwise convolution's weight gradient priced G x its FLOP",
        (Edit(
            "xla_cost/compiled/products.py",
            'batch = lhs.dims[lhs_labels.index("b")] // batch_groups',
            'batch = lhs.dims[lhs_labels.index("b")]',
        ),),
        tests=("tests/compiled/test_products.py",),
    ),
    Mutation(
        "attention_backward_matched_lowercase",
        "a fused-attention backward not recognized ('backward' for 'Backward'): half its products counted",
        (Edit(
            "xla_cost/compiled/products.py",
            'backward = "Backward" in target',
            'backward = "backward" in target',
        ),),
        tests=("tests/compiled/test_products.py",),
    ),
    Mutation(
        "async_start_not_looked_into",
        "kernel_product of an async-start does not look into the computation it wraps: its product is lost",
        (Edit(
            "xla_cost/compiled/products.py",
            'if instruction.opcode != "fusion" and instruction.opcode != "async-start":',
            'if instruction.opcode != "fusion":',
        ),),
        tests=("tests/compiled/test_products.py",),
    ),
    Mutation(
        "computation_reached_twice_read_twice",
        "code_computations lists a computation once per path to it: its kernels and bytes counted twice",
        (Edit(
            "xla_cost/compiled/hlo.py",
            "if callee in module.computations and callee not in seen))",
            "if callee in module.computations))",
        ),),
        tests=("tests/compiled/test_code_computations.py",),
    ),
    Mutation(
        "configured_memory_times_the_share",
        "a GPU target's compiler told the allocator's limit times 0.8, not over it: it plans for 0.64 of the limit",
        (Edit(
            "xla_cost/compiled/targets.py",
            "return self.memory_bytes * self.memory_fraction / CONFIGURED_SHARE",
            "return self.memory_bytes * self.memory_fraction * CONFIGURED_SHARE",
        ),),
        tests=("tests/compiled/test_target_memory.py",),
    ),
    Mutation(
        "unknown_cache_file_option_keeps_the_rest",
        "an XLA without the kernel cache's file option: the retry drops that option but keeps the cache's others",
        (Edit(
            "xla_cost/compiled/kernel_cache.py",
            "if name not in cached or name == targets.KERNEL_CACHE_OPTION:",
            "if name not in cached:",
        ),),
        tests=("tests/compiled/test_kernel_cache_retry.py",),
    ),
    Mutation(
        "held_out_priced_with_the_starting_constants",
        "the validation's held-out figures priced with the starting (in-sample) constants, not each paper's own",
        (Edit(
            "xla_cost/study/validation.py",
            "figures[case.name] = price_case(case, reports, constants)[0]",
            "figures[case.name] = price_case(case, reports, start)[0]",
        ),),
        tests=("tests/study/test_validation.py::"
               "test_a_held_out_figure_is_what_the_constants_fitted_without_its_paper_predict",),
    ),
    Mutation(
        "checkpoint_twin_not_used_up",
        "repeated_forward matches every backward equation in a checkpoint to a forward twin, however many the "
        "forward ran: backward work counted as recomputed forward",
        (Edit(
            "xla_cost/count/interpret.py",
            "            if primal[key] > 0:\n                primal[key] -= 1\n",
            "            if primal[key] > 0:\n",
        ),),
        tests=("tests/count/test_recomputed_forward.py",),
    ),
    Mutation(
        "diff_layer_parameters_ignored",
        "xla-cost diff calls a layer 'same' whose parameters changed while its FLOP did not",
        (Edit(
            "xla_cost/analysis/diff.py",
            "same = self.a.parameters == self.b.parameters and all(",
            "same = all(",
        ),),
        tests=("tests/analysis/test_diff.py",),
    ),
    Mutation(
        "optimizer_state_noted_past_three_copies",
        "the step checker notes an optimizer state only past 3x the parameters (Adam plus one copy passes unnoted)",
        (Edit("xla_cost/analysis/step_checks.py", "_MOMENTS = 2\n", "_MOMENTS = 3\n"),),
        tests=("tests/analysis/test_step_checks.py",),
    ),
    # ------------------------------------------------------------------ recomputation, every form (issue 50)
    Mutation(
        "checkpoint_call_site_counted_twice",
        "a checkpoint's backward pass repeats its call site only at the root: blocks rematted in a module "
        "nested in another (transpose(jvp(LM))/model/jvp(LM)/model/rematted_computation/..) match no forward",
        (Edit("xla_cost/count/stacks.py", " and rest[:i] == rest[i:2 * i]), None)",
              " and rest[:i] == rest[i:2 * i] and i == 1), None)"),),
        tests=("tests/analysis/test_remat_forms.py",),
    ),
    Mutation(
        "step_parts_without_their_recomputation",
        "a classified step's parts carry no recomputation: analyze_step's backward model_flops keep it",
        (Edit("xla_cost/count/interpret.py", "recomputed=self.part_recomputed.get(name, Cost()),",
              "recomputed=Cost(),"),),
        tests=("tests/analysis/test_remat_forms.py",),
    ),
    Mutation(
        "nested_checkpoint_matched_against_the_forward_only",
        "a checkpoint inside a checkpoint's backward pass is matched against the forward alone, not what the "
        "outer one ran again: part of a rematted stack of rematted blocks is model arithmetic",
        (Edit("xla_cost/count/interpret.py", "        primal.update(key for _, key in ran)", "        pass"),),
        tests=("tests/analysis/test_remat_forms.py",),
    ),
    Mutation(
        "checkpoint_derivative_work_is_forward",
        "in a checkpoint that repeats a forward, the derivatives' own work (an RMSNorm's rsqrt derivative) "
        "is taken for a forward whose primal is dead code: analyze_step's forward grows",
        (Edit("xla_cost/count/step_parts.py", " and self.remat_call(n.path) not in repeating}", "}"),),
        tests=("tests/analysis/test_remat_forms.py",),
    ),
    Mutation(
        "policy_rounding_is_forward",
        "the rounding a checkpoint policy puts on the values it saves (reduce_precision to their own type) "
        "stays in analyze_step's forward",
        (Edit("xla_cost/count/step_parts.py",
              "                rounding = self.differentiates and residual_rounding(node.eqn)",
              "                rounding = False"),),
        tests=("tests/analysis/test_remat_forms.py",),
    ),
    # ------------------------------------------------------------------ the report cache (issue 49)
    Mutation(
        "report_cache_key_without_custom_rules",
        "the report cache's key leaves out the code of the functions an equation names (a custom_vjp's backward "
        "rule): another gradient rule with the same forward program reads the old report",
        (Edit("xla_cost/analysis/report_cache.py", '                out.append(f"{name}={rule}")\n',
              "                pass\n"),),
        tests=("tests/analysis/test_report_cache.py",),
    ),
    Mutation(
        "report_cache_key_without_the_rules_file",
        "the report cache's key reads a user's custom rule's bytecode but not its file: an edited helper it "
        "calls reads the old report",
        (Edit("xla_cost/analysis/report_cache.py", '    if module.partition(".")[0] not in _VERSIONED:\n',
              "    if False:\n"),),
        tests=("tests/analysis/test_report_cache.py",),
    ),
    # ------------------------------------------------------------------ issue 50's follow-up
    Mutation(
        "hoisted_invariants_not_added_back",
        "a scanned model's backward is grad - forward as it comes, the loop invariants its grad program hoisted "
        "(a rope's sin and cos) left out: backward transcendentals below zero",
        (Edit("xla_cost/analysis/costs.py", "    if not (cost.flops or cost.transcendentals or cost.bytes_accessed):\n"
              "        return backward, []", "    if True:\n        return backward, []"),),
        tests=("tests/analysis/test_hoisted.py",),
    ),
    Mutation(
        "hoisted_invariants_not_in_the_rows",
        "per-layer rows take the grad program's share as it runs: the attention row's backward below zero, the "
        "rows short of the backward phase",
        (Edit("xla_cost/count/attribution.py",
              '        programs["grad"] = hoisted_invariants(programs["forward"], programs["grad"])'
              '.restored(programs["grad"])\n', ""),),
        tests=("tests/analysis/test_hoisted.py",),
    ),
    Mutation(
        "hoisted_invariants_are_other_in_a_step",
        "analyze_step leaves a scanned model's hoisted loop invariants in other, with a note of a second "
        "forward pass outside the gradient",
        (Edit("xla_cost/count/step_parts.py",
              "                    node.part = BACKWARD if seen == {BACKWARD} else FORWARD\n", "                    pass\n"),),
        tests=("tests/analysis/test_hoisted.py",),
    ),
    Mutation(
        "apply_params_one_collection_level",
        "an apply function's params= looked into one level of Linen collections: {'params': {'params': ...}} "
        "has no per-layer rows",
        (Edit("xla_cost/step/trees.py", "            while start < len(names) - 1 and is_collections(node):",
              "            if start < len(names) - 1 and is_collections(node):"),),
        tests=("tests/step/test_apply_collections.py",),
    ),
    Mutation(
        "merge_patched_as_an_attribute_only",
        "nnx.merge patched as flax.nnx's attribute alone: a step that imported merge before the analysis gets "
        "no per-layer rows",
        (Edit("xla_cost/step/nnx_scopes.py",
              "    plain = isinstance(original, types.FunctionType) and not original.__code__.co_freevars",
              "    plain = False"),),
        tests=("tests/step/test_nnx_merge_imported.py",),
    ),
    Mutation(
        "comparison_column_raw_for_loops",
        "the phase table's XLA x N / jaxpr column compares XLA's raw count of a loop body once",
        (Edit("xla_cost/analysis/report_tables.py", "        ratio = c.corrected_to_jaxpr",
              "        ratio = c.xla_to_jaxpr"),),
        tests=("tests/parallel/test_sharding.py",),
    ),
    Mutation(
        "rows_without_their_recomputation",
        "per-layer rows carry no recomputation: a rematted block's recomputed FLOP are none",
        (Edit("xla_cost/count/attribution.py", "            recomputed=recomputed.get(path, Cost()),\n", ""),),
        tests=("tests/analysis/test_remat_rows.py",),
    ),
    Mutation(
        "cuda_plugin_started_with_jax",
        "the CUDA plugin started with jax's CPU backend on a machine without a GPU driver: NVIDIA's "
        "libraries loaded by every process (issue 49's suite time)",
        (Edit("xla_cost/plugins.py", "        if cpu_only:\n            _defer_cuda()\n", ""),),
        tests=("tests/test_plugins.py",),
    ),
    Mutation(
        "eager_call_scope_stops_at_the_last_component",
        "an eager call's operations grouped by their op name without its last component: jax.random's nested "
        "functions each a kernel of their own, a dropout's mask priced as 32-bit words of the whole shape",
        (Edit("xla_cost/compiled/eager.py", "key = (frame.group(1), call_scope(op_name)) if",
              'key = (frame.group(1), op_name.rpartition("/")[0]) if'),),
        tests=("tests/compiled/test_eager_kernels.py",),
    ),
    Mutation(
        "fork_server_started_with_sigint",
        "the sweep's fork server started with Python's SIGINT handler: a worker interrupted while it imports the "
        "main script again prints jax's gc-callback traceback after the sweep's one line",
        (Edit("xla_cost/runs/sweeps.py", "    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)\n",
              "    previous = signal.getsignal(signal.SIGINT)\n"),),
        tests=("tests/runs/test_sweeps.py",),
    ),
    Mutation(
        "cpu_proxy_given_the_held_out_range",
        "a step priced from the CPU program's totals given the held-out range the validation measured on the "
        "devices' own programs: Llama 3 8B on 64 H100s printed 88 days (73 to 107) where its H100 program "
        "prices 24",
        (Edit("xla_cost/runs/scaling.py",
              "interval=None if hardware.is_bound or proxy else calibration.interval(seconds),",
              "interval=None if hardware.is_bound else calibration.interval(seconds),"),),
        tests=("tests/runs/test_predict.py", "tests/runs/test_estimate.py", "tests/cli/test_cli_estimate.py"),
    ),
    Mutation(
        "cpu_proxy_said_to_price_every_kernel",
        "the header of an estimate priced from the CPU program's totals says 'every kernel priced'",
        (Edit("xla_cost/runs/priced.py",
              'how = "from the totals of a program compiled without a target" if proxy else "every kernel priced"',
              'how = "every kernel priced"'),),
        tests=("tests/runs/test_estimate.py",),
    ),
    Mutation(
        "remat_shortfall_printed_raw",
        "XLA's hlo_rematerialization 'Can't reduce memory use below' lines reach the terminal beside the "
        "memory verdict that says the same in words",
        (Edit("xla_cost/compiled/compiler_log.py", "    (\"Can't reduce memory use below\",",
              "    (\"Can't reduce memory use below, never\","),),
        tests=("tests/cli/test_cli_third_user_targets.py",),
    ),
    Mutation(
        "eleventh_line_drawn_like_the_first",
        "a figure's lines past the tenth take the first ones' colour and dashes: the optimizers' share figure "
        "draws Muon exactly as SGD",
        (Edit("xla_cost/present/figures.py", "LINE_STYLES[index // colors % len(LINE_STYLES)]",
              "LINE_STYLES[0]"),),
        tests=("tests/present/test_figures.py",),
    ),
    Mutation(
        "muon_without_its_momentum_orthogonalized",
        "the optimizer called muon is optax's Adam: an update of 13 FLOP per parameter instead of Muon's "
        "matrix products",
        (Edit("xla_cost/step/optimizers.py", '"muon": lambda: optax.contrib.muon(1e-3),',
              '"muon": lambda: optax.adam(1e-3),'),),
        tests=("tests/step/test_optimizers.py",),
    ),
    Mutation(
        "matrix_products_read_as_reductions",
        "the optimizers page says Muon's figure depends on the model through per-tensor reductions, as "
        "Adafactor's, where its update multiplies matrices",
        (Edit("xla_cost/study/pages/optimizers.py", "breakdown[n].flops.get(PRODUCT, 0)]",
              "breakdown[n].flops.get('dot', 0)]"),),
        tests=("tests/study/test_pages.py::test_the_optimizers_page_says_why_a_figure_depends_on_the_model",),
    ),
    Mutation(
        "update_collectives_hidden",
        "the update program's collectives (Muon's gathers under fsdp) priced but left out of the step, as "
        "before: a Muon FSDP step 9.8 ms too short on 8 H100s",
        (Edit("xla_cost/runs/scaling.py", "    busy = pipelined + exposed + updating + update_s\n",
              "    busy = pipelined + exposed + updating\n"),),
        tests=("tests/runs/test_update_collectives.py",),
    ),
    Mutation(
        "remat_verdict_on_raw_loop_figure",
        "the remat note weighs XLA's raw figure (each loop body once) against the jaxpr's multiplied-out "
        "count: a scanned stack's kept recomputation is said to be removed",
        (Edit("xla_cost/analysis/costs.py",
              "        gone = min(max(counted.total_once.flops - costs.flops, 0.0), once) / once if once else 0.0\n",
              "        gone = min(max(total.flops - costs.flops, 0.0), recomputed) / recomputed\n"),),
        tests=("tests/analysis/test_jaxpr_vs_xla.py::test_the_remat_note_says_what_xlas_figure_shows",),
    ),
    Mutation(
        "step_residuals_kept_in_forward",
        "analyze_step's forward keeps the work autodiff adds for the backward pass alone (a GeLU's x**2, a "
        "scanned layer's residuals), where analyze's forward program never computes it",
        (Edit("xla_cost/count/step_parts.py", "node.part, moved = BACKWARD, True", "moved = True"),),
        tests=("tests/step/test_step_parts.py",),
    ),
    Mutation(
        "step_dead_loss_ignored",
        "analyze_step splits a jax.grad step (its loss dead code) by the jaxpr without that loss: a GeLU's "
        "x**2 for its derivative stays forward and the softmax's abs the dead log read is backward",
        (Edit("xla_cost/count/step_parts.py", "classifier.residuals(level) | classifier.dead_loss(level, whole)",
              "classifier.residuals(level)"),),
        tests=("tests/step/test_step_parts.py::test_a_steps_forward_is_what_analyze_counts_as_the_forward",),
    ),
    Mutation(
        "step_second_gradient_forward_as_backward",
        "a gradient taken inside the optimizer's update beside the step's returned loss (SAM's opaque grad_fn, "
        "jax.grad: its loss dead) has its forward classed backward: optax's SAM example said forward 44,392, "
        "backward 154,364 for 2 x 44,392 and 2 x 54,998",
        (Edit("xla_cost/count/step_parts.py", "        if whole is None or not self.differentiates:\n"
              "            return False\n        returned = any(losses(top))",
              "        if whole is None or not self.differentiates or any(losses(top)):\n"
              "            return False\n        returned = any(_losses(top))"),),
        tests=("tests/step/test_step_parts.py::test_a_gradient_taken_inside_the_update_has_its_forward_and_backward",),
    ),
    Mutation(
        "loop_constants_not_folded",
        "a constant a scan reads unchanged (a hoisted zeros) is not folded in its body: x - 0 counted there",
        (Edit("xla_cost/count/interpret.py", 'constants=[*(constants or ())][:int(params["num_consts"])])',
              "constants=[])"),),
        tests=("tests/count/test_interpret_loops.py",),
    ),
    Mutation(
        "device_name_substring",
        "a device name that only contains a registry key is that device: 'RTX A1000' an A100",
        (Edit("xla_cost/timemodel/devices.py", 'return re.compile(rf"(?<![a-z0-9]){re.escape(text)}(?![a-z0-9])", '
              're.IGNORECASE)', 'return re.compile(re.escape(text), re.IGNORECASE)'),),
        tests=("tests/timemodel/test_devices.py",),
    ),
    Mutation(
        "root_products_unsaid",
        "a layer's matrix products computed in the root's own code (a tied head as a matmul) sit in the "
        "remainder row with no note",
        (Edit("xla_cost/count/attribution.py", "if not whole or left <= ROOT_PRODUCTS_SHARE * whole:",
              "if True:"),),
        tests=("tests/analysis/test_root_products.py",),
    ),
    Mutation(
        "depthwise_expansion_kept",
        "XLA's CPU figure stands for a depthwise convolution's gradient it made dense: backward/forward 90",
        (Edit("xla_cost/analysis/costs.py", "value - true <= expansion / 2:", "True:"),),
        tests=("tests/analysis/test_depthwise.py",),
    ),
    Mutation(
        "ragged_dot_expansion_kept",
        "a ragged_dot MoE at XLA's CPU figure: every row times every expert's matrix, 3.9x its forward FLOP",
        (Edit("xla_cost/count/interpret.py", 'else rules.ragged_groups(ins) if name == "ragged_dot_general" else 1)',
              "else 1)"),),
        tests=("tests/analysis/test_ragged_dot.py",),
    ),
    Mutation(
        "optimizer_state_taken_for_parameters",
        "the step checker names an optimizer's state that mirrors a parameter's module among the parameters "
        "(a TrainState's Adam moments beside its params): 'parameters that receive no gradient'",
        (Edit("xla_cost/analysis/step_checks.py",
              '            if module is not None and module in prepared.param_paths and role != "optimizer_state"\n'
              "            and index not in mirrors}\n",
              "            if module is not None and module in prepared.param_paths}\n"),),
        tests=("tests/step/test_frozen.py::test_two_train_states_of_one_network_class_are_two_sets_of_parameters",
               "tests/step/test_frozen.py::test_an_actor_step_names_no_critic_as_receiving_zero_gradients",
               "tests/analysis/test_step_checks.py"),
    ),
    Mutation(
        "optimizer_refusal_escapes",
        "optax.reduce_on_plateau's TypeError (value=) escapes analyze() instead of a one-line refusal",
        (Edit("xla_cost/step/workload.py", "            raise mesh_error(exc, \"the optimizer's update\") or "
              "_optimizer_refused(exc) from exc\n        return optax", "            raise\n        return optax"),),
        tests=("tests/step/test_optimizers.py",),
    ),
    Mutation(
        "cond_branches_not_followed",
        "optax.MultiSteps' update rows: every layer's work under its lax.cond charged to one layer (fc2 0)",
        (Edit("xla_cost/count/interpret.py", "costs = [t.walk(b, stack, times, owner, owners=owners, out_owners=r "
              "if owners is not None else None)", "costs = [t.walk(b, stack, times, owner) if r is not None else None"),),
        tests=("tests/step/test_optimizers.py",),
    ),
    Mutation(
        "scanned_block_inputs_in_the_remainder",
        "nn.scan(nn.remat(Block)): the stacked block inputs the loop body passes out charged to (remainder)",
        (Edit("xla_cost/analysis/memory.py", "        if not readers:\n            return outer",
              "        if readers or not readers:\n            return outer"),),
        tests=("tests/analysis/test_memory.py",),
    ),
    Mutation(
        "viewed_parameter_saved_by_the_step",
        "analyze_step: a tied head's transposed embedding (a view of a parameter) counted as V x D saved bytes",
        (Edit("xla_cost/count/level_values.py", "if node.eqn.primitive.name in VIEWS and node.ins and node.ins[0] in arguments:",
              "if False:"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "own_type_error_blamed_on_call_kwargs",
        "jnp.sum(..., axes=1) inside the model: 'Drop that argument from call_kwargs' though none were given",
        (Edit("xla_cost/step/checks.py", "called.group(2) in (call_kwargs or {}):", "True:"),),
        tests=("tests/step/test_research_code.py",),
    ),
    Mutation(
        "step_routing_not_asked",
        "analyze_step of a mixture of experts that declares its routing: active parameters None, no capacity note",
        (Edit("xla_cost/step/step_routing.py", "    if not calls:\n        return None, ()",
              "    if calls or not calls:\n        return None, ()"),),
        tests=("tests/step/test_step_routing.py", "tests/zoo/test_mixtral.py"),
    ),
    Mutation(
        "cached_partial_not_unwrapped",
        "analyze_step(nnx.cached_partial(train_step, model, optimizer), x, y): refused as a step that does not trace",
        (Edit("xla_cost/step/user_step.py", "        found = nnx_cached_partial(step)\n", "        found = None\n"),),
        tests=("tests/step/test_nnx_cached_partial.py",),
    ),
    Mutation(
        "partial_holding_objects_traced_as_is",
        "a functools.partial(nnx.jit(f), model, optimizer) step traced as it is: refused, the user's model emptied",
        (Edit("xla_cost/step/user_step.py",
              "        elif isinstance(step, functools.partial) and any(_is_graph(a) for a in step.args):\n",
              "        elif False:\n"),),
        tests=("tests/step/test_nnx_cached_partial.py",),
    ),
    Mutation(
        "static_arguments_traced",
        "a jax.jit's static arguments and a config or schedule argument traced as inputs: the step refused",
        (Edit("xla_cost/step/user_step.py", "    if held:  # a jit's static arguments", "    if False:  # "),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "dropped_loss_softmax_is_backward",
        "a step that drops its loss has the loss's softmax counted as backward (any float scalar result is the loss)",
        (Edit("xla_cost/count/level_values.py",
              "float_scalar(var) and made.get(var) == FORWARD for var in top.outvars]",
              "float_scalar(var) for var in top.outvars]"),),
        tests=("tests/step/test_returned_state.py",),
    ),
    Mutation(
        "pure_jax_update_to_remainder",
        "a pure-JAX model's optimizer arithmetic on its gradients lands in the remainder row, not the layer's",
        (Edit("xla_cost/count/step_parts.py", "        owners_from_readers(level)\n", ""),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "update_per_parameter_over_all",
        "the update's FLOP per parameter over every parameter where only some are trained (a LoRA reads 1)",
        (Edit("xla_cost/analysis/report_tables.py", '    if phase == "update" and getattr(report, "trained_parameters", None):\n',
              "    if False:\n"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "sharded_step_memory_whole",
        "a sharded step's memory parts count each argument whole, not one device's shard",
        (Edit("xla_cost/analysis/step_arguments.py",
              "        totals[part] += round(nbytes(leaf) / (shards[index] if index < len(shards) else 1))\n",
              "        totals[part] += nbytes(leaf)\n"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "replicated_update_split",
        "a sharded step's update divided by its largest parameter shards, a replicated parameter's too",
        (Edit("xla_cost/analysis/user_step.py",
              '        return sum(getattr(e.cost, key) * self.share.get(e.owner or "", 1.0) for e in part.equations)\n',
              "        return sum(getattr(e.cost, key) / self.tensor for e in part.equations)\n"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "combined_gradients_ready_at_the_end",
        "a data-parallel all-reduce XLA combined from every gradient (the CPU's one) priced as one piece ready when "
        "the backward pass ends: none of it hidden under the header's buckets",
        (Edit("xla_cost/runs/step_communication.py",
              "    counts = [int(p.nbytes // bucket_bytes) if bucket_bytes > 0 else 1 for p in pieces]\n",
              "    counts = [1 for p in pieces]\n"),),
        tests=("tests/runs/test_predict.py",),
    ),
    Mutation(
        "mesh_step_whole_beside_parts",
        "analyze_step's train_step on a mesh left on the whole step's basis (counter=jaxpr: every device's FLOP; "
        "counter=xla: the matmul, attention and conversion figures) beside its per-device parts",
        (Edit("xla_cost/analysis/user_step.py",
              "_step_per_device(step, out, compiled is not None) if split.devices > 1 else step",
              "step"),),
        tests=("tests/parallel/test_sharding.py",),
    ),
    Mutation(
        "own_scopes_as_model_roots",
        "a pure-JAX model's named scopes taken for model classes: their products said to be the root's own code",
        (Edit("xla_cost/count/attribution.py",
              "        if entries[0] and entries[0] not in top and (not top or (len(entries) > 1 and entries[1] in top)):\n",
              "        if entries[0] and entries[0] not in top:\n"),),
        tests=("tests/step/test_step_forms.py", "tests/analysis/test_root_products.py"),
    ),
    Mutation(
        "unrolled_scan_gap_unsaid",
        "a scan XLA unrolled whole is taken for a kept loop: its fusions' duplication far above the jaxpr unexplained",
        (Edit("xla_cost/analysis/costs.py", "            or counted.unsupported or (counted.loops and compiled.has_loops is not False)\n",
              "            or counted.unsupported or counted.loops\n"),),
        tests=("tests/analysis/test_root_products.py",),
    ),
    Mutation(
        "abstract_keywords_bound_as_constants",
        "a step's array keyword arguments (an abstract dropout key given as dropout_rng=) bound as constants: refused",
        (Edit("xla_cost/step/user_step.py",
              "    keywords = {k: v for k, v in kwargs.items() if _holds_arrays(v)}  # traced as inputs, not constants\n",
              "    keywords = {}\n"),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "pmap_device_axis_as_batch",
        "a pmapped step's batch read as its arrays' leading axis, the devices",
        (Edit("xla_cost/analysis/step_arguments.py", "    if chosen[0][0] in device_axis and len(first.shape) > 1:\n",
              "    if False:\n"),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "root_parameters_as_batch",
        "a root module's parameters (owner \"\") taken for an argument with no parameter: the batch read from a kernel",
        (Edit("xla_cost/analysis/step_arguments.py", "        if shaped and all(o is None for o in mine) and not (",
              "        if shaped and not any(mine) and not ("),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "parameters_by_name_only",
        "a step's parameters found by their argument's name alone: `lambda p, o, b: step(p, o, b)` has none (its "
        "weights model state, no gradients), though its loss is differentiated with respect to them",
        (Edit("xla_cost/analysis/differentiated.py",
              "    return prepared.with_differentiated(found) if found else prepared\n",
              "    return prepared\n"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "passed_through_batch_written_back",
        "a batch the step returns as it came in taken as written back (a KV cache): batch size 0, its bytes model state",
        (Edit("xla_cost/analysis/step_arguments.py",
              "        flags.append(bool(flat) and all(o is None for o in owners) and anew\n",
              "        flags.append(bool(flat) and all(o is None for o in owners)\n"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "ema_train_state_counted_twice",
        "an EMA kept as a second TrainState's params counted as parameters: half said frozen",
        (Edit("xla_cost/step/user_step.py", "            continue  # a second array of one parameter", "            pass  # "),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "bfloat16_gap_blamed_on_fusion",
        "a bfloat16 step's CPU emulation converts are said to be fusion duplicates",
        (Edit("xla_cost/analysis/costs.py", "    if value > true and emulated:\n        return _EMULATION",
              "    if False:\n        return _EMULATION"),),
        tests=("tests/analysis/test_root_products.py",),
    ),
    Mutation(
        "capacity_padding_in_model_flops",
        "mixtral's einsum dispatch: the experts' products on empty capacity slots counted as model FLOP (MFU rose "
        "as capacity_factor slowed the run)",
        (Edit("xla_cost/analysis/costs.py", "    padding = padding_flops(counted, modules, root, padded)\n",
              "    padding = 0\n"),),
        tests=("tests/zoo/test_mixtral.py",),
    ),
    Mutation(
        "root_experts_padding_as_remainder",
        "routed experts whose weights sit on the root module: their products on capacity padding read as the "
        "remainder's, kept in model_flops",
        (Edit("xla_cost/analysis/model_flops.py", "    at_root = any(\"\" in found for found, _ in padded)\n",
              "    at_root = False\n"),),
        tests=("tests/step/test_step_routing.py",),
    ),
    Mutation(
        "step_memory_without_dense_ragged_note",
        "analyze_step's memory: the buffers at XLA's peak that are a ragged_dot's lhs or result G times over, unsaid",
        (Edit("xla_cost/analysis/user_step.py", "shards=split.leaves, written=written, jaxpr=traced)",
              "shards=split.leaves, written=written, jaxpr=None)"),),
        tests=("tests/analysis/test_ragged_dot.py",),
    ),
    Mutation(
        "nnx_integer_params_all_counted",
        "an NNX model's integer nnx.Param: every one counted as a parameter (an index table too), none noted quantized",
        (Edit("xla_cost/analysis/quantized.py", "        prepared = _without(prepared, [i for i in integers if i not in found], leaves)\n",
              "        prepared = _without(prepared, [], leaves)\n"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "train_states_merged_by_module_path",
        "analyze_step: two arguments' parameters of one module path, name and shape (TD3's two critics of one "
        "class) counted once, as an EMA's copy within one state is",
        (Edit("xla_cost/step/user_step.py", "        if (argument, module, name, shape) in counted:",
              "        if (argument := (), module, name, shape) in counted:"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "update_per_micro_batch",
        "estimate: the optimizer's update spread over one micro-batch's samples (counted M times a step) and "
        "run whole on every FSDP shard",
        (Edit("xla_cost/runs/estimates.py", "update / (micro * shards)", "update"),),
        tests=("tests/runs/test_estimate.py",),
    ),
    Mutation(
        "unpublished_peak_falls_back_to_float32",
        "a TPU's float16 priced at, and named as, its float32 peak",
        (Edit("xla_cost/timemodel/devices.py", "        peak = self.flops_per_s.get(dtype, 0.0)\n        if peak > 0:",
              "        peak = self.for_dtype(dtype)\n        if peak > 0:"),),
        tests=("tests/timemodel/test_devices.py",),
    ),
    Mutation(
        "count_suffix_refused",
        "estimate --samples 1.5k: a count written with a suffix not read (or read as the number without it)",
        (Edit("xla_cost/cli/commands.py", "    scale = _SUFFIXES.get(plain[-1:], 1.0)", "    scale = 1.0"),),
        tests=("tests/cli/test_cli_estimate.py",),
    ),
    Mutation(
        "accumulation_loop_keeps_nothing",
        "analyze_step of a step that accumulates gradients in a lax.scan: saved activations 0",
        (Edit("xla_cost/count/step_parts.py", "labels.saved_bytes = held + classifier.inner_saved",
              "labels.saved_bytes = held"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "remat_backward_mixes_counters",
        "with remat, backward = the jaxpr's grad less XLA's forward: hardware_flops below flops",
        (Edit("xla_cost/analysis/costs.py", "                                         jaxpr_model=recomputing)",
              "                                         jaxpr_model=False)"),),
        tests=("tests/analysis/test_memory.py",),
    ),
    Mutation(
        "made_targets_unsaid",
        "a user's loss refusing the float targets made for it: 'check the targets' shape', no word that none were given",
        (Edit("xla_cost/step/workload.py", "check_loss(loss_fn, outputs, targets, made=user_targets is None)",
              "check_loss(loss_fn, outputs, targets)"),),
        tests=("tests/step/test_research_code.py",),
    ),
    Mutation(
        "estimate_json_without_notes",
        "an estimate's JSON and CSV without the notes its terminal output prints (no range, memory unknown)",
        (Edit("xla_cost/runs/estimates.py", '            "notes": self.notes(),\n', '            "notes": [],\n'),),
        tests=("tests/cli/test_cli_estimate.py",),
    ),
    Mutation(
        "mask_fill_saved",
        "analyze_step: a mask's finfo.min fill, a broadcast scalar, counted as a saved activation (B x heads x T x T "
        "for an attention mask)",
        (Edit("xla_cost/count/level_values.py", "if node.part != FORWARD or broadcast_scalar(node.eqn):",
              "if node.part != FORWARD:"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "fusion_gap_unsaid",
        "a CPU program's FLOP 7% over the jaxpr count (a narrow LayerNorm/GeLU stack) with no note",
        (Edit("xla_cost/analysis/costs.py", "or abs(value - true) <= FUSION_NOTE_GAP * true):",
              "or True):"),),
        tests=("tests/analysis/test_root_products.py",),
    ),
    Mutation(
        "unsplit_products_priced_split",
        "a mesh axis that splits nothing prices each device's products at 1 / devices of the step's: "
        "faster than one device",
        (Edit("xla_cost/runs/scaling.py", "    if abs(share * devices - 1) <= SPLIT_TOLERANCE:\n",
              "    if True:\n"),),
        tests=("tests/runs/test_estimate.py",),
    ),
    Mutation(
        "frozen_gradients_computed",
        "an optimizer that freezes parameters (set_to_zero) still has grad compute their gradients: the frozen "
        "weights' gradients and the input gradients only they need counted (1.8x the fused step)",
        (Edit("xla_cost/step/workload.py", "    if len(used) < len(leaves) or all(read):\n",
              "    if True:\n"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "fused_loop_read_as_unrolled",
        "a program XLA kept a while loop in taken for unrolled where its fusions put the count near the "
        "unrolled total: no iteration added",
        (Edit("xla_cost/analysis/costs.py",
              "    if kept_loops is False or (kept_loops is None and abs(xla_value - true) < abs(xla_value - once)):\n",
              "    if abs(xla_value - true) < abs(xla_value - once):\n"),),
        tests=("tests/count/test_interpret_loops.py",),
    ),
    Mutation(
        "unrolled_scan_bodies_once",
        "a scan unrolled k times counted as if its loop held one body: k - 1 bodies a trip added again",
        (Edit("xla_cost/count/interpret.py", "            n = length if self.trip_counts else min(length, k + length % k)\n",
              "            n = length if self.trip_counts else 1\n"),),
        tests=("tests/count/test_interpret_loops.py",),
    ),
    Mutation(
        "batch_from_a_frozen_tree",
        "analyze_step takes the batch size from the first argument without parameters, a frozen tree or an EMA "
        "state passed apart",
        (Edit("xla_cost/analysis/step_arguments.py",
              "    chosen = alike[0] if alike else candidates[0][1] if candidates else None\n",
              "    chosen = candidates[0][1] if candidates else None\n"),),
        tests=("tests/step/test_frozen.py::test_a_step_given_its_frozen_weights_apart_reads_the_batch_from_its_inputs",),
    ),
    Mutation(
        "pages_link_data_beside_reports",
        "a page written outside reports/ links data/NAME, which exists only beside the committed pages",
        (Edit("xla_cost/study/data.py", "        if self.out is None:\n            return f\"data/{path.name}\"\n",
              "        if True:\n            return f\"data/{path.name}\"\n"),),
        tests=("tests/study/test_pages.py",),
    ),
    Mutation(
        "backward_of_two_counters",
        "backward = grad (the jaxpr's, XLA's CPU figure set aside) - forward (XLA's, its fusions' duplicates in it)",
        (Edit("xla_cost/analysis/costs.py",
              "    if len(set(kinds.values())) == 1 or any(costs[name].flops is None for name in kinds):\n",
              "    if True:\n"),),
        tests=("tests/analysis/test_depthwise.py",),
    ),
    Mutation(
        "every_parameter_gets_a_gradient",
        "analyze_step's memory holds a gradient for every parameter: a LoRA's frozen base, an EMA copy",
        (Edit("xla_cost/analysis/step_checks.py",
              "        if graded:\n            split = ",
              "        if True:\n            split = "),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "ema_state_is_a_metric",
        "an NNX step's EMA returned updated is read as a metric: its work in other, a note to log it (its path "
        "matched to no argument's, and the data flow's new values, which find it too, not read)",
        (Edit("xla_cost/analysis/step_arguments.py",
              "or _leaf_key(path[1:], leaf) in given or _leaf_key(path[2:], leaf) in given)", ")"),
         Edit("xla_cost/analysis/step_arguments.py",
              "    updated = new_values(jaxpr) if jaxpr is not None and not all(found) else set()\n",
              "    updated = set()\n")),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "frozen_rule_is_other",
        "the optimizer's rule on a stop_gradient layer's zero gradients left in other",
        (Edit("xla_cost/count/step_parts.py",
              "                                             or (seen == {_OUTSIDE} and node.owner is not None\n",
              "                                             or (False\n"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "hoisted_to_no_scope_ignored",
        "a module's own scan whose invariant reads a parameter alone, hoisted to no scope, is not added back: "
        "backward transcendentals below zero",
        (Edit("xla_cost/count/hoisted.py", "        return matched[0] if len(matched) == 1 else 1\n",
              "        return 1\n"),),
        tests=("tests/analysis/test_hoisted.py",),
    ),
    Mutation(
        "rule_less_primitive_reads_exact",
        "a phase whose jaxpr holds a primitive without a rule shows XLA's figure as exact (a library call counts "
        "nothing)",
        (Edit("xla_cost/analysis/costs.py",
              '    if counted.unsupported and sources.get("flops") in ("xla", "xla+loops") and compiled is not None:\n',
              "    if False:\n"),),
        tests=("tests/count/test_rules.py",),
    ),
    Mutation(
        "rule_less_bound_keeps_the_dense_excess",
        "a phase with a rule-less primitive is 'at least' XLA's whole CPU figure, beside the note that it holds up "
        "to a dense ragged_dot's excess more than the model's",
        (Edit("xla_cost/analysis/costs.py",
              '        excess = cpu_dense_excess(values["flops"], sources["flops"], counted) if cpu else 0\n',
              "        excess = 0\n"),),
        tests=("tests/analysis/test_ragged_dot.py",),
    ),
    Mutation(
        "returned_parameters_said_applied",
        "the step checker says an NNX optimizer applies zero gradients to parameters its wrt= filter leaves alone",
        (Edit("xla_cost/analysis/step_checks.py",
              "        updated = not aligned or (id(invars[index]) not in returned\n",
              "        updated = not aligned or (True\n"),),
        tests=("tests/analysis/test_step_checks.py",),
    ),
    Mutation(
        "micro_batched_batch_is_its_count",
        "a batch handed to the step as (micro_batches, b, ...) arrays it scans over reads as micro_batches samples",
        (Edit("xla_cost/analysis/step_arguments.py", "        return int(first.shape[0]) * int(first.shape[1])\n",
              "        return int(first.shape[0])\n"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "ema_copy_counted_as_parameters",
        "analyze_step's memory counts a second array of a parameter (an EMA beside the parameters) as parameters",
        (Edit("xla_cost/analysis/step_arguments.py",
              '            role = "model_state" if any(_same_module(here, other) for other in seen) else "parameters"\n',
              '            role = "parameters"\n'),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "returned_nnx_state_read_as_metrics",
        "a jax.jit NNX step's returned nnx.state((model, optimizer)) is read as metrics: its update is other (its "
        "paths matched to no argument's, and the data flow's new values, which find the parameters too, not read)",
        (Edit("xla_cost/analysis/step_arguments.py",
              "                given.update((_leaf_key(path[1:], leaf), _leaf_key(path[2:], leaf)))\n",
              "                pass\n"),
         Edit("xla_cost/analysis/step_arguments.py",
              "    updated = new_values(jaxpr) if jaxpr is not None and not all(found) else set()\n",
              "    updated = set()\n")),
        tests=("tests/step/test_returned_state.py",),
    ),
    Mutation(
        "metric_objects_state_is_new_state",
        "an nnx.MultiMetric's state is taken for the model's new state: its argmax is the update's",
        (Edit("xla_cost/analysis/step_arguments.py",
              "        flags += [isinstance(node, nnx.metrics.MetricState)] * len(jax.tree.leaves(node))\n",
              "        flags += [False] * len(jax.tree.leaves(node))\n"),),
        tests=("tests/step/test_returned_state.py::"
               "test_a_gradient_norm_an_nnx_metric_keeps_is_other_though_it_reads_the_gradients",),
    ),
    Mutation(
        "dead_gradient_said_not_taken",
        "a step that takes a gradient and returns nothing reading it is said to take no gradient",
        (Edit("xla_cost/analysis/step_checks.py", "    if takes_a_gradient(traced.jaxpr):\n", "    if False:\n"),),
        tests=("tests/step/test_returned_state.py",),
    ),
    Mutation(
        "optimizer_moments_in_parameter_dtype",
        "the parameters' dtype reads the optimizer state's copies too (Adam's bfloat16 mu)",
        (Edit("xla_cost/analysis/step_arguments.py",
              'zip(jax.tree.leaves(prepared.args), parts) if part == "parameters"}',
              'zip(jax.tree.leaves(prepared.args), parts) if part in ("parameters", "optimizer_state")}'),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "op_name_escapes_kept",
        "an op_name's escaped single quotes are kept (args[0][\\'layers\\'])",
        (Edit("xla_cost/compiled/hlo.py", '        return _ESCAPED.sub(r"\\1", match.group(1)) if match else ""\n',
              "        return match.group(1).replace('\\\\\"', '\"') if match else \"\"\n"),),
        tests=("tests/compiled/test_hlo.py",),
    ),
    Mutation(
        "aux_metric_is_forward",
        "an accuracy returned through has_aux beside the loss is counted as forward",
        (Edit("xla_cost/count/step_parts.py",
              "        if not self.differentiates or self.results is None or not any(o is not None for o in owners):\n",
              "        if True:\n"),),
        tests=("tests/step/test_returned_state.py",),
    ),
    Mutation(
        "aux_metric_in_a_loop_is_forward",
        "a loop is taken as a whole when looking for forward work only metrics read: the accuracy a "
        "micro-batch's loss returns through has_aux in a scan of gradient accumulation is forward",
        (Edit("xla_cost/count/aux_metrics.py",
              "            operands = _loop_walk(node, inner[node.path], outs, quiet, moved)\n",
              "            operands = [{_CONTROL}] * len(node.ins)\n"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "nnx_memory_from_the_traced_program",
        "an NNX step's XLA memory figures are the traced function's (no donation, the state returned twice)",
        (Edit("xla_cost/analysis/user_step.py",
              "        if compiled is not None and target is None and prepared.own_program is not None:\n",
              "        if False:\n"),),
        tests=("tests/step/test_returned_state.py",),
    ),
    Mutation(
        "looped_steps_gap_unsaid",
        "a recomputed or looped step whose XLA count is over 2% off the parts gets no note",
        (Edit("xla_cost/analysis/step_checks.py",
              "    if step.loop_corrected or counted.recomputed.flops:\n",
              "    if step.loop_corrected or counted.recomputed.flops:\n        return []\n"),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "explicit_axes_hint_missing",
        "the default loss refused on outputs sharded over Explicit axes asks for targets= instead",
        (Edit("xla_cost/step/checks.py", '        if type(exc).__name__ == "ShardingTypeError":', "        if False:"),),
        tests=("tests/step/test_research_code.py",),
    ),
    Mutation(
        "pallas_refusal_raw",
        "a Pallas kernel the CPU cannot lower reaches the user as jax's ValueError",
        (Edit("xla_cost/compiled/lowering.py", "        if not any(text in message for text in PALLAS_REFUSALS):",
              "        if True:"),),
        tests=("tests/analysis/test_unknown.py",),
    ),
    Mutation(
        "narrow_float_literals_unknown",
        "a bfloat16 or float8 literal 0 or 1 is not read, so p + 0 of a frozen bf16 parameter counts 1 FLOP",
        (Edit("xla_cost/count/folding.py", "            if array.size != 1 or not _is_number(array.dtype):",
              '            if array.size != 1 or array.dtype.kind not in "biuf":'),),
        tests=("tests/count/test_rules.py", "tests/step/test_frozen.py"),
    ),
    Mutation(
        "dataclass_output_field_unnamed",
        "output= cannot name a dataclass's or NamedTuple's field (gemma's Output.logits refused)",
        (Edit("xla_cost/step/checks.py",
              "        fields = None if isinstance(outputs, Mapping) else field_names(outputs)",
              "        fields = None"),),
        tests=("tests/step/test_research_code.py", "tests/cli/test_cli_first_hour.py", "tests/step/test_losses.py"),
    ),
    Mutation(
        "concrete_python_int_traced",
        "a positional Python int the trace needs concrete is traced and the step refused (Flax VAE's latents)",
        (Edit("xla_cost/step/user_step.py", "            needed = concrete_arguments(exc)", "            raise"),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "stacked_axis_one_ungraded",
        "a parameter stacked on axis 1 (MaxText's param_scan_axis=1) is reported as getting no gradient",
        (Edit("xla_cost/analysis/step_checks.py",
              "    return {shape} | {shape[:axis] + shape[axis + 1:] for axis in range(len(shape))}",
              "    return {shape, shape[1:]}"),),
        tests=("tests/step/test_frozen.py", "tests/step/test_lm_rows.py"),
    ),
    Mutation(
        "pmap_memory_parts_summed",
        "a pmapped step's memory parts are every device's summed under a per-device title",
        (Edit("xla_cost/analysis/user_step.py",
              "    split = _split(call, prepared, plan) if body is None else _Split(leaves=_body_shards(body, plan))",
              "    split = _split(call, prepared, plan) if body is None else _Split()"),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "batch_statistics_pmean_is_update",
        "a pmean of BatchNorm's batch statistics is counted as the BatchNorm's update",
        (Edit("xla_cost/count/step_parts.py", "                                                 and not any(v in model_state for v in node.ins)\n",
              "\n"),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "attention_by_parameterless_module",
        "the matrix products of every module without parameters of its own counted as attention: a mixture "
        "of experts' dispatch and combine (the zoo's Mixtral mlp) among them",
        (Edit("xla_cost/analysis/model_flops.py",
              "            total += eqn.cost.attention - (0 if recompute else eqn.recomputed.attention)",
              "            total += (eqn.cost.attention or (eqn.cost.flops if 'mlp' in eqn.name_stack else 0)) - (\n"
              "                0 if recompute else eqn.recomputed.attention)"),),
        tests=("tests/zoo/test_mixtral.py",),
    ),
    Mutation(
        "attention_softmax_of_any_pass",
        "a softmax read by products between activations in another pass only (a loss's softmax of an MoE "
        "layer's combine, read by its backward) is taken for attention's",
        (Edit("xla_cost/count/attention_flow.py", "for seed in fits if self.exps.get(seed) == pass_}",
              "for seed in fits}"),),
        tests=("tests/analysis/test_costs.py",),
    ),
    Mutation(
        "attention_normaliser_through_reduction",
        "a square, max or logistic of a product between activations passes a reduction: an RMSNorm's mean(x**2) of "
        "the residual stream an MoE combine wrote, read by the next layer's dispatch, is taken for attention's scores",
        (Edit("xla_cost/count/attention_flow.py",
              '    if dropped and _elements(getattr(var.aval, "shape", ())) > size:',
              "    if False:"),),
        tests=("tests/analysis/test_costs.py",),
    ),
    Mutation(
        "fused_gradient_update_in_remainder",
        "update work on a gradient a module around the layer split off (nn.OptimizedLSTMCell) goes to the remainder",
        (Edit("xla_cost/count/update_work.py",
              '            if reader is not None and (node.owner is None or reader.startswith(f"{node.owner}/")):',
              "            if reader is not None and node.owner is None:"),),
        tests=("tests/step/test_step_parts.py",),
    ),
    Mutation(
        "eval_step_root_unmatched",
        "an eval step's model root is taken for a scope of the user's own that matches no module",
        (Edit("xla_cost/analysis/user_step.py", "    return found or every", "    return found"),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "intercepted_call_stays_on_wrapper",
        "a call an interceptor wraps (gemma's LoRA) stays on the wrapper's 0-parameter row",
        (Edit("xla_cost/count/module_paths.py",
              '            if where[0] != current and (not where[0] or current.startswith(where[0] + "/")):',
              "            if False:"),),
        tests=("tests/count/test_name_resolution.py",),
    ),
    Mutation(
        "unmatched_stack_no_fallback",
        "a stack that names no module stays in the remainder (hoisted scan work, an NNX container's update)",
        (Edit("xla_cost/count/attribution.py", "                path = _below(path, tree) or eqn.owner or path",
              "                path = path"),),
        tests=("tests/count/test_name_resolution.py", "tests/step/test_lm_rows.py"),
    ),
    Mutation(
        "to_linen_unscoped",
        "NNX modules under nnx.bridge.ToLinen open no scopes: their work lands on the Linen wrapper's row",
        (Edit("xla_cost/step/nnx_scopes.py", "        if depth == 0 and isinstance(made, module_class) and _tag_of(made) is None:",
              "        if False:"),),
        tests=("tests/step/test_lm_rows.py", "tests/count/test_name_resolution.py"),
    ),
    Mutation(
        "mapped_body_divided_again",
        "a pmapped step's one-device jaxpr count divided by the devices again (its random-number note halved)",
        (Edit("xla_cost/analysis/user_step.py",
              '    step, found = phase_costs("train_step", Program(counted, compiled, split.devices), plan, modules, roots,',
              '    step, found = phase_costs("train_step", Program(counted, compiled, None), plan, modules, roots,'),),
        tests=("tests/step/test_step_forms.py",),
    ),
    Mutation(
        "outputs_not_in_parts",
        "the memory table's parts leave out what a step returns outside its donated buffers (its new state)",
        (Edit("xla_cost/analysis/memory.py", "        return sum(self.parts.values()) + (self.outputs or 0)",
              "        return sum(self.parts.values())"),),
        tests=("tests/step/test_returned_state.py",),
    ),
    Mutation(
        "closed_cache_mutated_across_traces",
        "memory's saved-activations pass closes over the call's arguments: a model writing its NNX cache fails",
        (Edit("xla_cost/analysis/memory.py",
              "            return forward(jax.tree_util.tree_unflatten(p_tree, whole), *jax.tree_util.tree_unflatten(tree, leaves))",
              "            return forward(jax.tree_util.tree_unflatten(p_tree, whole), *r)"),),
        tests=("tests/analysis/test_memory.py",),
    ),
    Mutation(
        "foreign_message_unquoted",
        "a model's own error message is embedded unquoted in a refusal ('... a multiple of 128 instead.')",
        (Edit("xla_cost/step/checks.py", '    received = f"inputs {shapes}, on which {what} failed with {quoted(exc, first)}"',
              '    received = f"inputs {shapes}, on which {what} failed with {type(exc).__name__}: {first}"'),),
        tests=("tests/step/test_research_code.py",),
    ),
    Mutation(
        "explicit_mesh_blames_inputs",
        "a model mixing Explicit-mesh arrays with unsharded ones is refused as if its inputs were wrong",
        (Edit("xla_cost/step/checks.py",
              '    if type(exc).__name__ == "ShardingTypeError" or (_MESHES.search(first) and "Explicit" in first):',
              "    if False:"),),
        tests=("tests/step/test_research_code.py",),
    ),
    Mutation(
        "unread_parameters_graded",
        "a parameter no pass reads (an unused module, a table read outside the loss) is taken to get a gradient",
        (Edit("xla_cost/analysis/step_checks.py", "        elif aligned and not read_by_a_pass(inner, {invars[index]})[0]:",
              "        elif False:"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "integer_arrays_are_parameters",
        "an integer array passed among the params (a schedule's timesteps) is counted as a parameter",
        (Edit("xla_cost/step/user_step.py", "    return dtype is None or bool(jax.numpy.issubdtype(dtype, jax.numpy.inexact))",
              "    return True"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "nested_apply_at_the_root",
        "a module applied inside another's call on variables it makes (HF GPT-2's tied lm_head) has no row",
        (Edit("xla_cost/step/adapters.py", '            roots[id(root)] = (root, where if calling and not module.path else "")',
              '            roots[id(root)] = (root, "")'),),
        tests=("tests/count/test_name_resolution.py",),
    ),
    Mutation(
        "model_dtype_from_outputs",
        "a model computing in bfloat16 by its own layers' dtype is labelled by its float32 outputs",
        (Edit("xla_cost/analysis/pipeline.py",
              "    return fallback if traced is None else program_compute_dtype(traced.jaxpr, fallback)",
              "    return fallback"),),
        tests=("tests/analysis/test_root_products.py",),
    ),
    Mutation(
        "closed_over_tables_counted",
        "work on arrays the program closes over (a noise schedule's table) is counted, though XLA folds it",
        (Edit("xla_cost/count/folding.py", "            self.constant.add(var)\n            try:",
              "            try:"),),
        tests=("tests/count/test_rules.py",),
    ),
    Mutation(
        "frozen_parameters_differentiated_for_saved",
        "analyze's saved activations a vjp over every parameter: a frozen tower's own residuals counted "
        "(its backward never computed)",
        (Edit("xla_cost/analysis/memory.py",
              "                             workload.read_gradients)",
              "                             None)"),),
        tests=("tests/analysis/test_memory.py",),
    ),
    Mutation(
        "jaxpr_model_flops_whole_step_on_a_mesh",
        "under remat on a mesh, model_flops the jaxpr's whole-step count beside XLA's one-device flops",
        (Edit("xla_cost/analysis/costs.py",
              "round((total.flops - recomputed) / share), round(total.flops / share)",
              "total.flops - recomputed, total.flops"),),
        tests=("tests/parallel/test_sharding.py",),
    ),
    Mutation(
        "explicit_arguments_untyped",
        "a phase on a mesh of Explicit axes traced on its arguments as given: the batch comes in replicated "
        "and is gathered (each device computes the whole batch)",
        (Edit("xla_cost/analysis/programs.py",
              "    return tuple(args) if plan is None else plan.typed(phase.arguments, args)",
              "    return tuple(args)"),),
        tests=("tests/parallel/test_sharding.py",),
    ),
    Mutation(
        "remat_recompute_makes_gradients",
        "a checkpoint's forward recomputed in the backward read as gradient work: a frozen norm scale's "
        "1 + scale there has the scale's shape and makes it trained",
        (Edit("xla_cost/analysis/step_checks.py",
              "            if found == BACKWARD and REMAT_SCOPE in split_name_stack(stack):  # forward work, done again",
              "            if False:  # forward work, done again"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "parameter_copies_kept",
        "an EMA kept beside the parameters in the same train state counted as (frozen) parameters",
        (Edit("xla_cost/analysis/user_step.py",
              "    prepared = without_parameter_copies(traced, _aligned(without_parameter_copies(traced, prepared), stacks))",
              "    prepared = _aligned(prepared, stacks)"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "nnx_tag_in_side_table",
        "NNX modules' paths kept beside them, not in Flax's own node mapping: the copies nnx.jit, grad and "
        "remat merge carry none (their work goes to the caller's row)",
        (Edit("xla_cost/step/nnx_scopes.py", '_NODES = "_pytree__nodes"', '_NODES = "_pytree__nodes_absent"'),),
        tests=("tests/count/test_name_resolution.py",),
    ),
    Mutation(
        "step_capacity_padding_kept",
        "analyze_step keeps routed experts' capacity padding in model_flops (analyze takes it out)",
        (Edit("xla_cost/analysis/user_step.py",
              "        costs, found = phase_costs(name, Program(parts[name], None, shown_over=shown_over), None, modules, roots,\n"
              "                                   padded=padded)",
              "        costs, found = phase_costs(name, Program(parts[name], None, shown_over=shown_over), None, modules, roots)"),),
        tests=("tests/step/test_step_routing.py",),
    ),
    Mutation(
        "target_dense_ragged_model_flops",
        "a target's program that computes ragged_dot densely: its G x figure taken as model_flops (MFU)",
        (Edit("xla_cost/analysis/costs.py",
              "        expanded = expanded_model_flops(name, flops, sources[\"flops\"], counted, devices)",
              "        expanded = None"),),
        tests=("tests/analysis/test_ragged_dot.py",),
    ),
    Mutation(
        "constant_group_sizes_ignored",
        "ragged_dot with constant group_sizes counted as every lhs row (rows past their sum are no group's)",
        (Edit("xla_cost/count/rules.py",
              "        flops = round(flops * float(np.mean(covered)) / rows)",
              "        flops = round(flops)"),),
        tests=("tests/analysis/test_ragged_dot.py",),
    ),
    Mutation(
        "gradient_failure_raw",
        "a model jax cannot differentiate raises jax's own exception from inside the analysis",
        (Edit("xla_cost/step/workload.py",
              "            raise _gradient_refused(exc) from exc",
              "            raise"),),
        tests=("tests/analysis/test_ragged_dot.py",),
    ),
    Mutation(
        "apply_function_scopes_as_roots",
        "analyze of an apply function takes every first name-stack entry that is no parameter key for a model "
        "class: a pure-JAX model's jax.named_scope products said to be the root's own code (analyze_step not)",
        (Edit("xla_cost/analysis/pipeline.py",
              "    return (workload.root_name, *model_roots(stacks, workload.param_paths))",
              "    return (workload.root_name, *model_roots(stacks, ()))"),),
        tests=("tests/analysis/test_root_products.py",),
    ),
    Mutation(
        "user_loss_targets_only_like_outputs",
        "a loss of the user's own without targets= gets outputs-shaped targets only: the one-hot cross-entropy of "
        "integer t a refusal suggests is refused again",
        (Edit("xla_cost/step/checks.py",
              "    if out.ndim and not _takes(loss, outputs, like) and _takes(loss, outputs, labels):",
              "    if False:"),),
        tests=("tests/step/test_research_code.py",),
    ),
    Mutation(
        "foreign_mesh_refusal_without_analyze_step",
        "analyze inside jax.set_mesh of the user's own axes refused with mesh= or one device only: pure-JAX code "
        "whose PartitionSpecs name those axes is not sent to analyze_step",
        (Edit("xla_cost/analysis/pipeline.py",
              "analyse your train step under your mesh with xla_cost.analyze_step ",
              "pass mesh= with xla_cost's axes "),),
        tests=("tests/parallel/test_sharding.py",),
    ),
    Mutation(
        "causal_with_no_attention_unsaid",
        "attention_flops causal where no attention product is found: the note says 0 FLOP fewer than computed, "
        "not that none was found",
        (Edit("xla_cost/analysis/model_flops.py",
              "    if not causal + unseen + whole:",
              "    if split is None:"),),
        tests=("tests/analysis/test_costs.py",),
    ),
    Mutation(
        "causal_halves_every_attention",
        "attention_flops causal halves every attention found, an encoder's self-attention and a "
        "cross-attention (not causally masked) too (t5x's T5: 196,608 FLOP removed a forward pass, 65,536 the "
        "decoder's)",
        (Edit("xla_cost/count/attention_flow.py",
              "    return CAUSAL if flags & _CAUSAL else UNSEEN if flags & _UNSEEN else FULL",
              "    return CAUSAL"),),
        tests=("tests/analysis/test_costs.py",),
    ),
    Mutation(
        "causal_ignores_the_window",
        "attention_flops causal halves a sliding-window layer as a global one, whatever its window (EasyDeL's "
        "Gemma 3, B=2 T=16 H=4 dh=16: 65,536 of 131,072 forward FLOP kept for a window of 16, 8 or 2 keys; "
        "47,104 for 8, 11,776 for 2 with the evaluated mask)",
        (Edit("xla_cost/count/interpret.py",
              "        if share is not None:  # causal (1/2 - share), floored",
              "        if False:"),),
        tests=("tests/analysis/test_costs.py",),
    ),
    Mutation(
        "fused_window_halved",
        "attention_flops causal halves a fused kernel's local window as a global causal mask (a splash "
        "LocalMask, cuDNN's sliding_window_length): cuDNN B=2 T=16 N=4 h=32 W=8 keeps 393,216 of 786,432 "
        "attention FLOP, not 282,624 = 786,432 x (T W - W(W-1)/2 - T/2)/T²",
        (Edit("xla_cost/count/attention_flow.py",
              "    if window is not None and window != (None, 0):",
              "    if False:"),),
        tests=("tests/analysis/test_fused_attention.py", "tests/compiled/test_splash_attention.py"),
    ),
    Mutation(
        "step_gap_emulation_as_rewriting",
        "analyze_step's train_step note calls what a bfloat16 step's compile without fusion counts above the "
        "parts XLA's own rewriting, where analyze's note (the same rule) says the CPU's emulation of bfloat16",
        (Edit("xla_cost/analysis/costs.py",
              "        if emulated and rest > 0:",
              "        if False:"),),
        tests=("tests/analysis/test_root_products.py",),
    ),
    Mutation(
        "inference_work_as_update",
        "a pure-JAX step without a gradient (prefill, decode over a params pytree): the work computing its "
        "results from the parameters is the update, as if it made new parameters",
        (Edit("xla_cost/count/step_parts.py",
              "    if classifier.undifferentiated(level, given, result_owners):",
              "    if False:"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "written_cache_is_the_batch",
        "an argument the step returns written back (a decode step's KV cache) is taken for the batch: its "
        "leading axis the batch size, its bytes the inputs",
        (Edit("xla_cost/analysis/step_arguments.py",
              "        holds = holds or (position < len(written) and written[position])\n",
              ""),
         Edit("xla_cost/analysis/step_arguments.py",
              "all(o is None for o in mine) and not (index < len(written) and written[index]):",
              "all(o is None for o in mine):")),
        tests=("tests/analysis/test_step_memory_and_time.py",),
    ),
    Mutation(
        "int8_weight_scale_ignored",
        "an int8 weight that is only multiplied by its float scale (a quantized embedding's rows) is no "
        "parameter: the weight's values left out of the count",
        (Edit("xla_cost/analysis/quantized.py",
              "            if (of(a) and scaled(b)) or (of(b) and scaled(a)):",
              "            if False:"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "int8_weight_trained",
        "an int8 (quantized) weight, which takes no gradient, is judged by the backward's shapes like a float "
        "parameter: counted among the trained parameters and its bytes among the gradients",
        (Edit("xla_cost/analysis/step_checks.py",
              "        if not differentiable(leaf):  # an int8 (quantized) weight",
              "        if False:  # an int8 (quantized) weight"),),
        tests=("tests/step/test_frozen.py",),
    ),
    Mutation(
        "python_batch_not_from_input_shape",
        "xla_cost.estimate and xla_cost.scaling without batch_size= run batch 1 where the command line takes "
        "--input-shape's first axis: the same run, other steps and figures",
        (Edit("xla_cost/runs/configs.py",
              "    return batch_size if batch_size is not None else (input_shape[0] if input_shape else None)",
              "    return batch_size"),),
        tests=("tests/runs/test_estimate.py", "tests/cli/test_cli_estimate.py"),
    ),
    Mutation(
        "cli_run_options_drop_input_dtype",
        "estimate and scaling on the command line drop --input-dtype: a custom token model's int32 ids become "
        "--dtype's floats and its embedding refuses them",
        (Edit("xla_cost/cli/commands.py",
              "input_shape=shape, input_dtype=args.input_dtype, target=args.target)",
              "input_shape=shape, target=args.target)"),),
        tests=("tests/cli/test_cli_estimate.py::test_estimate_scaling_and_fit_take_a_custom_token_model_as_analyze_does",),
    ),
    Mutation(
        "cli_custom_model_records_float32",
        "a custom model built without --dtype is recorded as --dtype's float32: a module computing in bfloat16 "
        "is labelled float32 on the command line (and gets float32's notes) where analyze says bfloat16",
        (Edit("xla_cost/runs/configs.py",
              "            if not cast:  # built without --dtype",
              "            if False:  # built without --dtype"),),
        tests=("tests/cli/test_cli_first_hour.py::test_a_module_computing_in_bfloat16_is_reported_so_as_analyze_does",),
    ),
    Mutation(
        "model_annotation_under_mesh_blamed_on_explicit_axes",
        "a model whose own nn.with_partitioning spec does not fit the array Flax constrains with it under the "
        "mesh (nanodo's 3-axis spec on DenseGeneral's rank-2 kernel) is refused as mixing Explicit-mesh arrays "
        "with unsharded ones, on a mesh of Auto axes",
        (Edit("xla_cost/step/checks.py",
              "    if _ANNOTATION.search(first):  # the model's own sharding annotation",
              "    if False:  # the model's own sharding annotation"),
         Edit("xla_cost/step/checks.py", '(_MESHES.search(first) and "Explicit" in first)', "_MESHES.search(first)")),
        tests=("tests/parallel/test_sharding.py::test_a_models_own_sharding_annotation_failing_under_the_mesh_is_named",),
    ),
    Mutation(
        "step_traced_before_reuses_jax_trace",
        "a step merging its NNX model, traced before analyze_step (a jax.eval_shape, the training loop's call of "
        "its jax.jit): jax's kept trace, without the modules' name scopes, is counted (every row 0)",
        (Edit("xla_cost/step/user_step.py",
              "            jitted = jax.jit(_fresh(bind_axes(function, names) if names else function))",
              "            jitted = jax.jit(bind_axes(function, names) if names else function)"),
         Edit("xla_cost/step/user_step.py", "        _forget_traces(step)\n", "        pass\n")),
        tests=("tests/step/test_nnx_merge_imported.py",),
    ),
    Mutation(
        "model_constraint_traced_on_no_mesh",
        "a model constraining its activations to the mesh's axes (with_sharding_constraint(x, P('data'))) on "
        "mesh={'data': 2} is traced under no mesh and refused, the inputs blamed",
        (Edit("xla_cost/analysis/pipeline.py", "        if ours or mesh is None or not needs_mesh(exc):",
              "        if True:"),),
        tests=("tests/parallel/test_sharding.py",),
    ),
    Mutation(
        "random_note_drawn_whole_step",
        "a sharded step's random-number note gives the whole step's threefry FLOP beside one device's uncounted "
        "ones (24,148 against 22,381 where each device draws 12,074)",
        (Edit("xla_cost/analysis/costs.py",
              '    drawn = f"{round(random / devices):,} FLOP" + (" per device" if devices > 1 else "")',
              '    drawn = f"{random:,} FLOP" + (" per device" if devices > 1 else "")'),),
        tests=("tests/analysis/test_costs.py",),
    ),
    Mutation(
        "outputs_part_counts_tuple_table",
        "the memory breakdown's outputs part is XLA's outputs - aliased, its output tuple's index table "
        "(8 bytes an array) counted: 68 bytes for Adam on 2 parameter arrays where the loss is 4",
        (Edit("xla_cost/analysis/memory.py",
              "        returned = self.output_array_bytes if self.output_array_bytes is not None else self.output_bytes",
              "        returned = self.output_bytes"),),
        tests=("tests/analysis/test_memory.py",),
    ),
    Mutation(
        "step_without_update_says_own_optimizer",
        "analyze_step's header says 'its own optimizer' for a step that takes no gradient and updates nothing "
        "(a decode)",
        (Edit("xla_cost/analysis/user_step.py",
              "        optimizer=_OPTIMIZER if costs[UPDATE].flops or costs[BACKWARD].flops or takes_a_gradient(traced.jaxpr)\n"
              "        else _NO_OPTIMIZER,",
              "        optimizer=_OPTIMIZER,"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "step_without_precision_note",
        "analyze_step gives no mixed-precision note for a step computing in bfloat16 on float32 parameters "
        "(analyze does)",
        (Edit("xla_cost/analysis/user_step.py",
              "    precision = precision_note(dtype, param_dtype, costs, xla.backend_name())  # as analyze's",
              "    precision = None"),),
        tests=("tests/step/test_analyze_step.py",),
    ),
    Mutation(
        "step_ignores_nested_jits_shardings",
        "analyze_step of an NNX step the user jitted with in_shardings (nested in xla_cost's own jit) reads no "
        "sharding: its parts are the whole step's beside train_step's one device's",
        (Edit("xla_cost/analysis/user_step.py",
              '    nested = _nested(call.params["jaxpr"]) if call is not None else {}',
              "    nested = {}"),),
        tests=("tests/step/test_analyze_step.py::test_an_nnx_step_the_user_jitted_with_a_split_batch_has_per_device_parts",),
    ),
    Mutation(
        "sweep_drops_input_dtype",
        "sweep on the command line drops --input-dtype: a custom token model's int32 ids become --dtypes' "
        "floats and its embedding refuses them",
        (Edit("xla_cost/cli/commands.py",
              "        input_dtype=args.input_dtype, store=args.store, jobs=args.jobs,",
              "        store=args.store, jobs=args.jobs,"),),
        tests=("tests/cli/test_cli_estimate.py::test_estimate_scaling_and_fit_take_a_custom_token_model_as_analyze_does",),
    ),
    Mutation(
        "default_loss_gathers_explicit_sharded_classes_as_optax",
        "the default loss takes each label's logit by optax's gather whatever the logits' type: logits whose "
        "vocabulary is sharded over Explicit axes (Flax's Gemma under jax.make_mesh) are refused with jax's "
        "ShardingTypeError",
        (Edit("xla_cost/step/optimizers.py", "    if not _classes_sharded(logits):\n", "    if True:\n"),),
        tests=("tests/step/test_research_code.py::"
               "test_the_default_loss_takes_logits_sharded_over_explicit_axes_on_their_classes",),
    ),
    Mutation(
        "explicit_fsdp_splits_parameters_as_on_auto_axes",
        "on a mesh whose fsdp axis is Explicit, every parameter its annotations leave whole over fsdp is split "
        "over it as on Auto axes: Flax's Gemma (a norm's scale on fsdp times activations whose batch is) is "
        "refused by jax in its forward",
        (Edit("xla_cost/parallel/sharding.py",
              '    fsdp = mesh.get("fsdp", 1) if "fsdp" not in explicit else 1  # Explicit: the model\'s own layout\n',
              '    fsdp = mesh.get("fsdp", 1)\n'),),
        tests=("tests/parallel/test_sharding.py::"
               "test_a_model_annotated_with_the_explicit_meshs_axes_is_laid_out_as_its_annotations_say",),
    ),
    Mutation(
        "one_hot_loss_types_targets_cotangent_as_logits",
        "the one-hot loss's backward rule returns the targets' cotangent typed as the logits: logits whose "
        "vocabulary is sharded over Explicit axes are refused by jax (the bwd rule's output type differs)",
        (Edit("xla_cost/step/optimizers.py",
              "            _typed_as(jnp.asarray(-g[..., None] * log_softmax, targets.dtype), targets))\n",
              "            jnp.asarray(-g[..., None] * log_softmax, targets.dtype))\n"),),
        tests=("tests/step/test_research_code.py::"
               "test_the_one_hot_loss_takes_logits_sharded_over_explicit_axes_on_their_classes",),
    ),
    Mutation(
        "tag_lookup_hashes_the_module",
        "the NNX tag lookup hashes each module it merges (as a WeakKeyDictionary does): a module whose "
        "__hash__ reads its traced state (EasyDeL's) makes a step jax.jit traces refused",
        (Edit("xla_cost/step/nnx_scopes.py",
              "    return tag if tag is not None else _SIDE_TABLE.get(module)",
              "    return tag if tag is not None else (hash(module), _SIDE_TABLE.get(module))[1]"),),
        tests=("tests/step/test_nnx_merge_imported.py::test_a_module_whose_hash_fails_on_traced_state_is_analysed",),
    ),
    Mutation(
        "own_failure_blamed_on_the_step",
        "a failure of xla_cost's own tagging inside the step's trace refused as the step's (InputError: fix the step)",
        (Edit("xla_cost/step/user_step.py", "            own = own_failure(exc, name)", "            own = None"),),
        tests=("tests/step/test_nnx_merge_imported.py::"
               "test_a_failure_of_xla_costs_own_tagging_names_xla_cost_not_the_step",),
    ),
    Mutation(
        "borrowed_parameters_below_the_row_unsaid",
        "a module's products on a child's parameters count as the child's own reads: a mixture of experts's block "
        "computing with experts.w1's kernel gets no note, the experts' rows parameters and update with no work",
        (Edit("xla_cost/count/attribution.py",
              '        if REMAINDER not in (held, computed) and held != computed and not computed.startswith(f"{held}/"):',
              '        if REMAINDER not in (held, computed) and not held.startswith(computed) '
              'and not computed.startswith(f"{held}/"):'),),
        tests=("tests/analysis/test_root_products.py::"
               "test_rows_whose_parameters_another_modules_method_computes_with_are_named",),
    ),
    Mutation(
        "embedding_lookup_as_borrowed_parameter",
        "rows picked from a parameter (an embedding lookup's gather) count as a view of it: a Dense after nn.Embed "
        "gets the note 'the products of embed's parameters are counted in mix'",
        (Edit("xla_cost/count/param_reads.py",
              "            elif name in VIEWS_OF_FIRST and not picks_rows(eqn):",
              "            elif name in VIEWS_OF_FIRST:"),),
        tests=("tests/analysis/test_root_products.py::"
               "test_an_embedding_lookup_read_by_another_modules_products_is_no_borrowed_parameter",),
    ),
    Mutation(
        "borrowed_module_named_once_per_row",
        "a module whose parameters products read on two rows is named once per row ('the products of proj's "
        "parameters are counted in layers/0; the products of layers/0/proj's parameters are counted in layers/0/sub')",
        (Edit("xla_cost/count/attribution.py",
              "        borrowed.setdefault(tuple(sorted(rows)), set()).add(held)",
              "        for row in rows:\n            borrowed.setdefault((row,), set()).add(held)"),),
        tests=("tests/analysis/test_root_products.py::"
               "test_a_modules_parameters_read_on_several_rows_are_named_once_with_the_rows",),
    ),
    Mutation(
        "target_network_forward_as_metrics_pass",
        "the model's work outside the gradient is never tagged as feeding the loss: a DQN's target network, "
        "whose TD target the loss reads, is called a second forward pass for metrics to return with has_aux",
        (Edit("xla_cost/count/step_parts.py", "        classifier.feeding(level)\n",
              "        pass\n"),),
        tests=("tests/step/test_step_forms.py::test_a_target_networks_forward_that_the_loss_reads_is_no_second_forward_pass",),
    ),
    Mutation(
        "unknown_parameter_dtype_as_mixed_precision",
        "a step whose arguments hold no parameter (it makes its own) gets a mixed-precision note of "
        "'parameters None, computation float32'",
        (Edit("xla_cost/analysis/costs.py", "    if params is None or compute == params:\n",
              "    if compute == params:\n"),),
        tests=("tests/step/test_analyze_step.py::"
               "test_a_step_that_makes_its_parameters_inside_itself_has_no_mixed_precision_note",),
    ),
    Mutation(
        "pmapped_closed_over_array_unmapped",
        "a pmapped step that closes over a concrete array (scenic's constant learning rate) is not read as a mapped "
        "body: its replicated parameters counted once per device, no note of the devices",
        (Edit("xla_cost/analysis/user_step.py",
              "        elif not (id(var) in closed or isinstance(var, jex_core.Literal)):",
              "        elif True:"),),
        tests=("tests/step/test_step_forms.py::"
               "test_a_pmapped_step_that_closes_over_an_array_counts_one_devices_parameters",),
    ),
    Mutation(
        "learned_queries_as_weights",
        "a projection of parameters alone is no activation: learned queries (DETR's object queries, Perceiver's "
        "latents) attending to the data read attention_flops 0",
        (Edit("xla_cost/count/attention_flow.py", "    return value.data or value.derived\n",
              "    return value.data\n"),),
        tests=("tests/analysis/test_costs.py::test_attention_whose_queries_come_from_parameters_alone_is_attention",),
    ),
    Mutation(
        "step_rows_without_parameters_unnamed",
        "a step that makes its parameters inside itself (purejaxrl's train) has no rows from its name stacks: "
        "every module's work is in the (remainder)",
        (Edit("xla_cost/analysis/user_step.py", "        if not paths and stack_modules(stacks, prepared.roots):\n",
              "        if False:\n"),),
        tests=("tests/step/test_step_parts.py::"
               "test_a_step_that_makes_its_parameters_inside_itself_has_a_row_per_module_of_its_name_stacks",),
    ),
    Mutation(
        "loop_body_update_unconfirmed",
        "a frozen reference's log-sum-exp summed in a fori_loop over checkpointed chunks (EasyDeL's DPO) is "
        "counted as the update: its body's work, made from no gradient, is taken for new state",
        (Edit("xla_cost/count/step_parts.py", "                revert_unconfirmed(node, outer, self.provisional, {UPDATE, _OUTSIDE})",
              "                0 and revert_unconfirmed(node, outer, self.provisional, {UPDATE, _OUTSIDE})"),),
        tests=("tests/step/test_step_parts.py::"
               "test_a_frozen_references_chunked_log_sum_exp_is_other_and_the_policys_forward",),
    ),
    Mutation(
        "fed_scan_counter_untagged",
        "a reference model's scan counter (the loss reads what the scan computes) is left out of the work that "
        "feeds the loss: a second 'the model also runs outside the gradient' note of its few FLOP",
        (Edit("xla_cost/count/interpret.py", "            if tag is not None:\n                self.tagged[tag] = self.tagged[tag] + counter * (times * n)\n",
              ""),),
        tests=("tests/analysis/test_step_checks.py::"
               "test_a_reference_models_scan_is_all_work_the_loss_reads_not_a_second_forward_pass",),
    ),
    Mutation(
        "analyze_trains_unread_parameters",
        "analyze counts a parameter the loss never reads (a tied model's unused lm_head) as trained, silently",
        (Edit("xla_cost/step/workload.py", "        loss_reads=loss_reads(traced_forward, params),\n", ""),),
        tests=("tests/step/test_frozen.py::"
               "test_analyze_trains_only_what_the_loss_reads_and_names_the_unread_parameters_as_analyze_step_does",),
    ),
    Mutation(
        "parameters_made_inside_the_step_updated_as_metrics",
        "a step that initialises its parameters inside itself returns them updated, matching no argument: "
        "its update is taken for work only the returned metrics read (other), update 0 FLOP",
        (Edit("xla_cost/analysis/step_arguments.py",
              "    updated = new_values(jaxpr) if jaxpr is not None and not all(found) else set()\n",
              "    updated = set()\n"),),
        tests=("tests/step/test_analyze_step.py::"
               "test_the_update_of_parameters_a_step_makes_inside_itself_is_the_update",),
    ),
    Mutation(
        "weight_gradient_not_tied_to_its_forward_product",
        "a weight's gradient (x^T g) takes the trees of its operands, not of the forward product that read x "
        "with the weight: the actor's last layer's dW, which reads qf1's cotangent, leaves the actor's row",
        (Edit("xla_cost/count/tree_split.py",
              "                    tree = _mirrored(frozenset().union(*held), tree)\n",
              "                    tree = tree\n"),),
        tests=("tests/step/test_frozen.py::test_an_actors_rows_and_each_critics_are_their_own_in_its_step",),
    ),
    Mutation(
        "block_scaled_product_as_attention",
        "attention_flops counts every non-dot_general primitive's matrix products as attention's: a block-scaled "
        "FP8 product (jax.nn.scaled_matmul) is counted as attention and the causal convention may halve it",
        (Edit("xla_cost/analysis/model_flops.py",
              '        if eqn.primitive in FUSED_ATTENTION or eqn.primitive == "pallas_call":',
              '        if eqn.primitive != "dot_general":'),),
        tests=("tests/compiled/test_fp8.py::test_a_block_scaled_product_is_its_multiply_adds",),
    ),
    Mutation(
        "unknown_parameter_count_shown_as_zero",
        "a step whose arguments hold no parameter (it makes its own inside itself) heads its report '0 (0) "
        "parameters', an unknown count shown as zero",
        (Edit("xla_cost/analysis/report_tables.py",
              '    counted = (f"{report.parameters:,} ({short_count(report.parameters)}) parameters" if report.parameters\n',
              '    counted = (f"{report.parameters:,} ({short_count(report.parameters)}) parameters" if True\n'),),
        tests=("tests/step/test_analyze_step.py::"
               "test_a_step_that_makes_its_parameters_inside_itself_has_no_mixed_precision_note",),
    ),
    Mutation(
        "undeclared_router_unsaid",
        "a mixture of experts that declares no routing (V-MoE as its repository writes it) is analysed as a dense "
        "model in silence: active None, its capacity padding and dispatch products in model_flops, no note",
        (Edit("xla_cost/count/routers.py", "    if declared or program is None or owners is None:\n",
              "    if True:\n"),),
        tests=("tests/step/test_routing.py::test_an_undeclared_mixture_of_experts_is_said_and_a_declared_one_is_not",),
    ),
    Mutation(
        "wrapper_keys_as_module_levels",
        "a parameter held in a wrapper node (simply's AnnotatedArray: its array under no key, [<flat index 0>]) "
        "is a module of its own: rows fc1/w, fc1/b with the parameters and no forward, fc1 with no parameters",
        (Edit("xla_cost/step/trees.py",
              '    return unnamed or (hasattr(node, "shape") and hasattr(node, "dtype"))\n',
              "    return False\n"),),
        tests=("tests/step/test_apply_collections.py::test_parameters_in_a_wrapper_node_are_their_layers_rows",),
    ),
    Mutation(
        "optimizer_state_only_by_name",
        "an optimizer's state is recognised only by its container's type or name (an optax state, an opt_state "
        "key), not by the data flow: a hand-written Adam's m and v in a plain dict are model state",
        (Edit("xla_cost/analysis/step_arguments.py",
              "        if index in states:\n            role = \"optimizer_state\"\n",
              "        if False:\n            role = \"optimizer_state\"\n"),),
        tests=("tests/analysis/test_step_memory_and_time.py::"
               "test_a_hand_written_adams_moments_in_a_plain_dict_are_optimizer_state",
               "tests/analysis/test_step_memory_and_time.py::"
               "test_a_bfloat16_lion_moment_is_optimizer_state_not_the_parameters_dtype"),
    ),
    Mutation(
        "pmap_parameters_by_the_outer_shape",
        "the data flow knows an argument by its own shape only, not by the shape a pmap's body sees it with: a "
        "pmapped step over 2 devices whose parameters no name marks (AlgoPerf's current_param_container) has none",
        (Edit("xla_cost/analysis/differentiated.py",
              "        return {_key(var.aval)} | self.views.get(var, set())\n",
              "        return {_key(var.aval)}\n"),),
        tests=("tests/step/test_step_forms.py::"
               "test_a_pmapped_steps_parameters_are_found_whatever_their_argument_is_named",),
    ),
    Mutation(
        "written_state_by_its_exact_shape",
        "an argument the step writes back is matched to its results by exact shapes: a BatchNorm's running "
        "statistics kept (C,) and written back (1, 1, C) are taken for the batch (batch C)",
        (Edit("xla_cost/analysis/step_arguments.py",
              "    return (tuple(path), *elements_key(leaf))\n",
              '    return tuple(path), tuple(getattr(leaf, "shape", ())), str(getattr(leaf, "dtype", ""))\n'),),
        tests=("tests/analysis/test_step_memory_and_time.py::"
               "test_running_statistics_written_back_with_unit_axes_are_state_not_the_batch",),
    ),
    Mutation(
        "parameter_copies_matched_by_path_suffix",
        "step_memory takes a parameter for a copy of another whose module path ends its own: the root's "
        "LayerNorm_0 beside Block_0/LayerNorm_0 is model state",
        (Edit("xla_cost/analysis/step_arguments.py",
              "        return one[0] == other[0]\n",
              '        return one[0] == other[0] or one[0].endswith("/" + other[0]) or other[0].endswith("/" + one[0])\n'),),
        tests=("tests/analysis/test_step_memory_and_time.py::"
               "test_a_root_module_named_as_a_nested_one_is_parameters_not_a_copy_of_it",),
    ),
    Mutation(
        "dense_form_blamed_for_the_whole_gap",
        "the note of a program whose grouped products the CPU made dense puts all of XLA's difference from the "
        "jaxpr count on them, where that form adds a part of it only",
        (Edit("xla_cost/analysis/costs.py",
              "    if expansion >= gap / 2:  # the dense form is the difference, or most of it: the CPU made it\n",
              "    if True:  # the dense form is the difference, or most of it: the CPU made it\n"),),
        tests=("tests/analysis/test_depthwise.py::test_a_difference_larger_than_the_dense_form_is_not_all_put_on_it",),
    ),
    Mutation(
        "dead_update_as_zero_gradients",
        "zeros of a parameter's shape outside the passes (optax.MultiSteps resetting its accumulator) are taken "
        "for zero gradients before the dead backward pass is seen: a jax.jit NNX step that drops its in-place "
        "update is said to differentiate nothing",
        (Edit("xla_cost/analysis/step_checks.py", "    if takes_a_gradient(traced.jaxpr):\n",
              "    if takes_a_gradient(traced.jaxpr) and not zero_gradients(traced.jaxpr, prepared):\n"),),
        tests=("tests/step/test_returned_state.py::test_a_dead_multisteps_update_is_said_dead_code_not_zero_gradients",),
    ),
    Mutation(
        "fused_update_per_parameter_unsaid",
        "analyze's update FLOP / parameter is XLA's count with its fusions' copies (optax.MultiSteps(adam): 35 "
        "a parameter) and says nothing of the optimizer's own 20, the jaxpr's, which analyze_step reports",
        (Edit("xla_cost/analysis/report_tables.py",
              "            or abs(c.flops - c.jaxpr_flops) <= FUSION_NOTE_GAP * c.jaxpr_flops):\n",
              "            or True):\n"),),
        tests=("tests/present/test_numbers_that_read.py::"
               "test_an_update_xla_counts_above_its_jaxpr_gives_the_optimizers_arithmetic_beside_it",),
    ),
    Mutation(
        "unknown_while_loops_said_once",
        "the notes of while loops of unknown trip count at one place are said once, however many loops "
        "(three at the top of a step: one note)",
        (Edit("xla_cost/count/interpret.py", "        notes=said_once(counter.notes, counter.unknown),\n",
              "        notes=tuple(dict.fromkeys(counter.notes)),\n"),),
        tests=("tests/count/test_interpret_loops.py::"
               "test_every_while_loop_of_unknown_trip_count_is_said_with_those_it_runs_inside",),
    ),
    Mutation(
        "per_example_gradient_not_a_gradient",
        "an array a vmapped backward pass hands back, (B, *p.shape), is no gradient of p: DP-SGD's step "
        "(jax.vmap(jax.grad(loss))) with its argument named model_params finds no parameters",
        (Edit("xla_cost/analysis/differentiated.py", "    for var in _per_example(flow, handed):\n",
              "    for var in ():\n"),),
        tests=("tests/step/test_step_forms.py::test_a_per_example_gradient_steps_parameters_and_update_rows_are_"
               "found_whatever_the_argument_is_named",),
    ),
    Mutation(
        "per_example_batch_axis_taken_as_leading",
        "a per-example gradient is recognised only with the examples on its leading axis inside the vmap: a "
        "convolution's kernel gradient, (3, 3, C, B, F), is missed and the kernel not found among the parameters",
        (Edit("xla_cost/analysis/differentiated.py", "    if not batched or not flow.fronted:\n        return batched",
              "    if True:\n        return batched"),),
        tests=("tests/step/test_step_forms.py::"
               "test_a_per_example_convolutions_kernel_gradient_batched_beside_its_features_is_its_gradient",),
    ),
    Mutation(
        "mapped_backward_shapes_kept_whole",
        "the step checker reads a vmapped backward pass's (B, *p.shape) arrays as they are: every parameter of a "
        "DP-SGD step is said to 'receive no gradient'",
        (Edit("xla_cost/analysis/step_checks.py", "            if found == BACKWARD and mapped_backward(stack):",
              "            if False:"),),
        tests=("tests/analysis/test_step_checks.py::"
               "test_per_example_gradients_are_gradients_and_a_frozen_layer_among_them_is_still_named",),
    ),
    Mutation(
        "select_predicate_as_owner_data",
        "a select_n's predicate counts as data for its owner: DP-SGD's where(finite(norm), g, 0) on a mask of every "
        "layer's norms makes each layer's clipped gradient and the optimizer's work on it the remainder's",
        (Edit("xla_cost/count/interpret.py", 'eqn.invars[eqn.primitive.name == "select_n":]', "eqn.invars"),),
        tests=("tests/step/test_step_forms.py::test_a_per_example_gradient_steps_parameters_and_update_rows_are_"
               "found_whatever_the_argument_is_named",),
    ),
    Mutation(
        "per_example_bytes_unsaid",
        "the bytes of the gradients a vmapped backward pass makes one per example are not said in the memory's notes",
        (Edit("xla_cost/analysis/step_arguments.py",
              "    examples = per_example_gradients(jaxpr) if jaxpr is not None else {}\n",
              "    examples: dict = {}\n"),),
        tests=("tests/analysis/test_step_memory_and_time.py::"
               "test_per_example_gradients_are_the_parameters_gradients_and_their_bytes_are_said",),
    ),
    Mutation(
        "differentiated_leaf_in_an_optax_type_is_state",
        "a leaf the loss is differentiated by is not sought inside an optax type: optax.lookahead's "
        "LookaheadParams.fast is optimizer state, the parameters 0 and their gradients 0 B",
        (Edit("xla_cost/analysis/differentiated.py",
              "    candidates = [i for i, (leaf, owner) in enumerate(zip(leaves, prepared.owners))\n"
              "                  if owner is None and getattr(leaf, \"ndim\", 0) > 0\n",
              "    candidates = [i for i, (leaf, owner, role) in enumerate(zip(leaves, prepared.owners, prepared.roles()))\n"
              "                  if owner is None and role != \"optimizer_state\" and getattr(leaf, \"ndim\", 0) > 0\n"),),
        tests=("tests/analysis/test_step_memory_and_time.py::"
               "test_lookaheads_fast_weights_are_the_parameters_and_its_slow_weights_optimizer_state",
               "tests/analysis/test_step_memory_and_time.py::"
               "test_an_nnx_lookahead_step_differentiates_the_fast_weights_not_the_models_overwritten_params"),
    ),
    Mutation(
        "step_checker_state_by_type_not_parts",
        "the step checker counts an optimizer's state by its optax type, not as the memory's parts read it: "
        "LookaheadParams.fast, the parameters, is state too (4.0x, not 3.0x)",
        (Edit("xla_cost/analysis/step_checks.py",
              '        elif part == "optimizer_state" and getattr(leaf, "ndim", 0) > 0 \\\n',
              '        if kind != "optimizer state" and getattr(leaf, "ndim", 0) > 0 \\\n'),),
        tests=("tests/analysis/test_step_memory_and_time.py::"
               "test_lookaheads_fast_weights_are_the_parameters_and_its_slow_weights_optimizer_state",),
    ),
    Mutation(
        "frozen_leaves_beside_the_trained_not_differentiated",
        "a leaf whose update an optimizer zeroes (optax.chain(adam, freeze(mask)): its new value p + 0) is not "
        "differentiated beside the trained leaves of its argument: the parameters depend on the argument's name",
        (Edit("xla_cost/analysis/differentiated.py",
              "    return found | _beside(inner, flow, _arguments(prepared.args), found, candidates)\n",
              "    return found\n"),),
        tests=("tests/step/test_frozen.py::"
               "test_freezing_after_adam_trains_every_parameter_whatever_the_arguments_are_named",),
    ),
    Mutation(
        "counter_beside_moments_is_model_state",
        "a count an optimizer's own NamedTuple keeps beside its moments (AlgoPerf's NAdamW) is model state, "
        "where analyze counts optax's as optimizer state",
        (Edit("xla_cost/analysis/step_arguments.py",
              "    if states:  # (a counter kept beside an optimizer's moments: NAdamW's own NamedTuple's count)\n",
              "    if False:  # (a counter kept beside an optimizer's moments: NAdamW's own NamedTuple's count)\n"),),
        tests=("tests/analysis/test_step_memory_and_time.py::"
               "test_a_counter_in_an_optimizers_own_state_beside_its_moments_is_optimizer_state",),
    ),
    Mutation(
        "ancestors_parameter_handed_down_is_borrowed",
        "a parameter an ancestor hands its child as an input (a Perceiver's learned latents, its cross-attention's "
        "queries) is said to be a weight the child's method borrows",
        (Edit("xla_cost/count/attribution.py",
              '        if REMAINDER not in (held, computed) and held != computed and not computed.startswith(f"{held}/"):\n',
              "        if REMAINDER not in (held, computed) and held != computed:\n"),),
        tests=("tests/analysis/test_root_products.py::"
               "test_a_learned_query_table_handed_to_a_child_is_its_input_not_a_borrowed_weight",),
    ),
    Mutation(
        "listed_experts_not_a_routing",
        "experts written as E modules of their own (a list of expert MLPs masked by a top-k, Flax Mixtral ports) "
        "are no routing: the model counted dense in silence",
        (Edit("xla_cost/count/routers.py",
              "    groups = _expert_modules(owners)\n",
              "    groups: dict[int, list[tuple[str, str]]] = {}\n"),),
        tests=("tests/step/test_routing.py::test_experts_written_as_modules_of_their_own_are_a_routing_too",),
    ),
    Mutation(
        "undeclared_routing_not_in_estimate",
        "an estimate of a model whose routing is undeclared does not say so beside its MFU, which counts all "
        "the experts' work",
        (Edit("xla_cost/runs/estimates.py",
              "        routing_notes=tuple(note for note in single.notes if note.startswith((ROUTING_NOTE, UNDECLARED_ROUTING_NOTE))),\n",
              "        routing_notes=tuple(note for note in single.notes if note.startswith(ROUTING_NOTE)),\n"),),
        tests=("tests/step/test_routing.py::test_an_estimate_of_an_undeclared_mixture_of_experts_says_so_beside_its_mfu",),
    ),
    Mutation(
        "ragged_all_to_all_without_a_rule",
        "lax.ragged_all_to_all (an expert-parallel dispatch) has no rule: the forward is unknown",
        (Edit("xla_cost/count/registry.py",
              '        "ragged_all_to_all", "all_gather_invariant", "pbroadcast", "psend", "precv",\n    }',
              '        "all_gather_invariant", "pbroadcast", "psend", "precv",\n    }'),),
        tests=("tests/step/test_step_parts.py::test_a_ragged_all_to_all_moves_rows_and_its_step_is_counted_and_listed",),
    ),
    Mutation(
        "moving_collectives_unlisted",
        "a collective that moves data without arithmetic (all_gather, all_to_all, ragged_all_to_all) is left out "
        "of the step's collectives",
        (Edit("xla_cost/count/interpret.py",
              "            if name in MOVING_COLLECTIVES:  # no arithmetic, but the step's collectives list how often it runs\n",
              "            if False:  # no arithmetic, but the step's collectives list how often it runs\n"),),
        tests=("tests/step/test_step_parts.py::test_a_ragged_all_to_all_moves_rows_and_its_step_is_counted_and_listed",),
    ),
    Mutation(
        "remat_in_a_scanned_body_unmatched",
        "a remat inside a scanned block's body (maxdiffusion's Flux) is not matched to its forward: the backward "
        "scan's body repeats the scan's scope, the recomputation stays in model FLOP, unnoted",
        (Edit("xla_cost/count/interpret.py",
              "        return (tuple(s for i, s in enumerate(scopes) if i == 0 or s != scopes[i - 1]), eqn.primitive.name,\n",
              "        return (scopes, eqn.primitive.name,\n"),),
        tests=("tests/analysis/test_remat_forms.py::test_a_remat_inside_a_scanned_body_is_recomputation",),
    ),
    Mutation(
        "forward_in_a_checkpoint_call_not_primal",
        "the forward a scanned body runs inside a checkpoint's call (a remat in a remat'd scanned block, "
        "maxdiffusion's Flux) is not taken for the forward that ran: its recomputation is unmatched",
        (Edit("xla_cost/count/interpret.py",
              '                                 if classify_pass(stack) == "forward" and REMAT_SCOPE not in stack)\n',
              '                                 if depth == 0 and classify_pass(stack) == "forward" and REMAT_SCOPE not in stack)\n'),),
        tests=("tests/analysis/test_remat_forms.py::test_a_remat_inside_a_remat_scanned_is_recomputation",),
    ),
    Mutation(
        "grandchild_call_is_its_callers_work",
        "a block's method calling its child's children directly (self.attn.proj(x), maxdiffusion's Flux blocks) "
        "puts their work on the block's row below the root, their rows 0",
        (Edit("xla_cost/count/module_paths.py",
              "        if found is None and name and not rest:  # (right after the module found: a grandchild it calls)\n",
              "        if False:  # (right after the module found: a grandchild it calls)\n"),),
        tests=("tests/count/test_name_resolution.py::test_a_grandchild_a_blocks_method_calls_directly_keeps_its_row",),
    ),
    Mutation(
        "metric_only_gradients_trained",
        "gradients only a returned metric reads (a gradient norm over a frozen body's, octo's head_only "
        "finetune) count as trained: the frozen note gone, the metric priced at its norm alone",
        (Edit("xla_cost/analysis/user_step.py",
              "    if unmetered is not None and parts[BACKWARD].total.flops:\n",
              "    if False:\n"),),
        tests=("tests/step/test_frozen.py::"
               "test_a_gradient_norm_over_a_frozen_bodys_gradients_is_said_to_cost_their_backward_pass",),
    ),
    Mutation(
        "metric_only_cond_is_update",
        "an optimizer's update run again for a metric inside a cond (optax.MultiSteps, octo's update_norm) stays "
        "the update's: update x1.9",
        (Edit("xla_cost/count/step_parts.py",
              "                metric = metrics_only_loop(node, outer, {OTHER, _METRIC})\n",
              "                metric: set[Any] = set()\n"),),
        tests=("tests/step/test_step_parts.py::"
               "test_an_update_run_again_for_its_norm_is_other_even_inside_multisteps_cond",),
    ),
    Mutation(
        "perturbed_input_is_update",
        "work made from a gradient and no parameter that a gradient's passes read (FGSM's x + eps * sign(grad_x)) "
        "stays the update's: SGD's update 3 B IN FLOP too large, the second gradient said to follow an update",
        (Edit("xla_cost/count/step_parts.py",
              "                elif node.part == UPDATE and not node.reads_state and seen & {FORWARD, BACKWARD, _PERTURBED} \\\n",
              "                elif False and node.part == UPDATE and not node.reads_state and seen & {FORWARD, BACKWARD, _PERTURBED} \\\n"),),
        tests=("tests/step/test_step_parts.py::test_an_input_perturbed_along_its_gradient_is_other_not_the_update_nor_a_parameter",),
    ),
    Mutation(
        "perturbed_input_in_a_loop_is_update",
        "PGD's steps in a fori_loop (the carried adversarial batch moved along its gradient's sign and clipped) "
        "stay the update's",
        (Edit("xla_cost/count/update_work.py",
              "    kept = {id(inner): inner for inner in body.nodes\n",
              "    kept = {id(inner): inner for inner in body.nodes[:0]\n"),),
        tests=("tests/step/test_step_parts.py::test_an_input_perturbed_along_its_gradient_is_other_not_the_update_nor_a_parameter",),
    ),
    Mutation(
        "returned_perturbed_batch_is_a_parameter",
        "a batch returned moved along its gradient (FGSM's adversarial batch, logged) is taken for a parameter "
        "the step trains: B IN more parameters",
        (Edit("xla_cost/analysis/differentiated.py",
              "            if any(v in both and v is not var and v not in fed and _key(v.aval) == key for v in flow.outs):\n",
              "            if any(v in both and v is not var and _key(v.aval) == key for v in flow.outs):\n"),),
        tests=("tests/step/test_step_parts.py::test_an_input_perturbed_along_its_gradient_is_other_not_the_update_nor_a_parameter",),
    ),
)


# --------------------------------------------------------------------------- the copy


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True).stdout


def make_copy(dest: Path, source: str) -> None:
    """The repository's files in ``dest``: the working tree (tracked files and
    untracked ones git does not ignore) or a git revision."""
    if source == "worktree":
        names = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split(b"\0")
        for raw in names:
            if not raw:
                continue
            name = raw.decode()
            src = ROOT / name
            if not src.is_file():  # deleted in the working tree
                continue
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    else:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", source], cwd=ROOT, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    # No stale bytecode: the runs below write none (PYTHONDONTWRITEBYTECODE) and
    # a restored file may have the same size and mtime second as its mutation.
    for cache in list(dest.rglob("__pycache__")):
        shutil.rmtree(cache)
    # The zoo installs as xla_cost.zoo (package-dir mapping of models/). An
    # editable install of the original repository maps that name to ITS
    # models/; a link inside the copy's package makes the copy's own models/
    # win on PYTHONPATH.
    link = dest / "xla_cost" / "zoo"
    if not link.exists():
        link.symlink_to(Path("..") / "models")


def _environment(copy: Path, no_cache: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["XLA_COST_MUTATION_COPY"] = "1"  # tests/test_mutations_apply.py: a copy holds its planted bug by design
    if no_cache:
        env["XLA_COST_NO_CACHE"] = "1"
    return env


def check_imports(copy: Path, env: dict[str, str]) -> None:
    """Fails unless ``xla_cost`` and ``xla_cost.zoo`` import from the copy."""
    out = subprocess.run(
        [sys.executable, "-c", "import xla_cost, xla_cost.zoo; print(xla_cost.__file__); print(xla_cost.zoo.__file__)"],
        cwd=copy, env=env, check=True, capture_output=True, text=True,
    ).stdout.split()
    for path in out:
        if not Path(path).resolve().is_relative_to(copy.resolve()):
            raise SystemExit(f"the copy imports {path}, not its own files under {copy}: fix PYTHONPATH")


def apply(copy: Path, mutation: Mutation) -> dict[Path, str]:
    """Applies every edit of ``mutation``; returns the original texts to restore."""
    originals: dict[Path, str] = {}
    try:
        for edit in mutation.edits:
            path = copy / edit.file
            if not path.is_file():
                raise SystemExit(f"mutation {mutation.name}: {edit.file} does not exist")
            originals.setdefault(path, path.read_text())
            current = path.read_text()
            found = current.count(edit.old)
            if found != 1:
                raise SystemExit(
                    f"mutation {mutation.name}: the old text occurs {found} times in {edit.file} "
                    f"(must be exactly once); update it in benchmarks/mutations.py:\n{edit.old}"
                )
            path.write_text(current.replace(edit.old, edit.new))
    except SystemExit:
        restore(originals)  # the edits already made undone: the copy stays pristine
        raise
    return originals


def restore(originals: dict[Path, str]) -> None:
    for path, text in originals.items():
        path.write_text(text)


# --------------------------------------------------------------------------- the runs

_SUMMARY = re.compile(r"^(FAILED|ERROR) (\S+)")


@dataclasses.dataclass
class Run:
    failed: list[str]
    seconds: float
    returncode: int
    tail: str


def run_tests(copy: Path, env: dict[str, str], tests: list[str], timeout: float, exitfirst: bool,
              deselect: list[str] = ()) -> Run:
    """One pytest run in ``copy``: ``tests`` in their order (pytest drops repeats,
    keeping the first), without the ``deselect`` node ids."""
    command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *tests]
    command += [f"--deselect={node}" for node in deselect]
    if exitfirst:
        command.insert(3, "-x")
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        output += f"\n(timed out after {timeout:.0f} s)"
        code = -1
    failed = []
    for line in output.splitlines():
        match = _SUMMARY.match(line)
        if match and match.group(2) not in failed:
            failed.append(match.group(2))
    return Run(failed, time.perf_counter() - start, code, "\n".join(output.splitlines()[-5:]))


def _short(test_id: str) -> str:
    return test_id.removeprefix("tests/")


class Baselines:
    """The unmodified copy's failures: of the mutations' own tests (run first, all
    together) and, only once some mutation gets past its own tests, of the whole scope."""

    def __init__(self, copy: Path, env: dict[str, str], own: list[str], scope: list[str], timeout: float) -> None:
        self._copy, self._env, self._scope, self._timeout = copy, env, scope, timeout
        self.own = run_tests(copy, env, own, timeout, exitfirst=False) if own else None
        self._whole: Run | None = None
        self._lock = threading.Lock()

    def whole(self) -> Run:
        with self._lock:
            if self._whole is None:
                self._whole = run_tests(self._copy, self._env, self._scope, self._timeout, exitfirst=False)
                print(f"baseline of {' '.join(self._scope) or 'the whole suite'}: "
                      f"{len(self._whole.failed)} failing, {self._whole.seconds:.0f} s", file=sys.stderr, flush=True)
                if self._whole.returncode not in (0, 1) and not self._whole.failed:
                    raise SystemExit(f"the unmodified copy's test run did not complete:\n{self._whole.tail}")
            return self._whole

    def failed(self) -> list[str]:
        return [*(self.own.failed if self.own else []), *(self._whole.failed if self._whole else [])]


def _run_all(selected: list[Mutation], copies: list[Path], env_of: dict[Path, dict[str, str]],
             scope: list[str], baselines: Baselines, args: argparse.Namespace,
             ) -> list[tuple[Mutation, list[str], float]]:
    """Each mutation in a copy of its own worker's (``--jobs`` copies side by side): its own
    tests first, the whole scope only when they catch nothing."""
    free: queue.Queue[Path] = queue.Queue()
    for copy in copies:
        free.put(copy)

    def caught_by(result: Run, failing: list[str]) -> list[str]:
        caught = [t for t in result.failed if t not in failing]
        if result.returncode not in (0, 1) and not result.failed:
            caught = [f"(run did not complete: exit {result.returncode})"]
        return caught

    def one(mutation: Mutation) -> tuple[Mutation, list[str], float]:
        copy = free.get()
        seconds = 0.0
        try:
            originals = apply(copy, mutation)
            try:
                caught: list[str] = []
                own = [] if scope else list(mutation.tests)
                if own:
                    failing = baselines.own.failed if baselines.own else []
                    result = run_tests(copy, env_of[copy], own, args.timeout,
                                       exitfirst=not args.every_failure, deselect=failing)
                    caught, seconds = caught_by(result, failing), result.seconds
                if not caught or args.every_failure:
                    failing = baselines.whole().failed
                    result = run_tests(copy, env_of[copy], scope, args.timeout,
                                       exitfirst=not args.every_failure, deselect=[*failing, *own])
                    caught += caught_by(result, failing)
                    seconds += result.seconds
            finally:
                restore(originals)
        finally:
            free.put(copy)
        print(f"{mutation.name}: {len(caught)} caught, {seconds:.0f} s", file=sys.stderr, flush=True)
        return mutation, caught, seconds

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(copies)) as pool:
        return list(pool.map(one, selected))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutations only")
    parser.add_argument("--tests", nargs="+", metavar="PATH", default=[],
                        help="test files or node ids, the only ones run (default: the suite, each "
                             "mutation's own tests first)")
    parser.add_argument("--source", default="worktree", help="'worktree' (default) or a git revision")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--check", action="store_true", help="check that every edit applies, run nothing")
    parser.add_argument("--every-failure", action="store_true",
                        help="run every test for each mutation and count all that fail (slow: a whole "
                             "suite per mutation); by default a run stops at its first failure")
    parser.add_argument("--jobs", type=int, default=1, help="mutations run side by side, each in its own copy")
    parser.add_argument("--no-cache", action="store_true", help="turn JAX's persistent compilation cache off")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per test run (default 1800)")
    parser.add_argument("--show", type=int, default=4, help="failing tests named per mutation (default 4)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be a positive integer, got {args.jobs}")

    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:36s} {m.description}")
        return 0
    selected = list(MUTATIONS)
    names = [m.name for m in MUTATIONS]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SystemExit(f"mutation names must be unique; repeated: {repeated}")
    if args.only:
        known = {m.name: m for m in MUTATIONS}
        missing = [n for n in args.only if n not in known]
        if missing:
            raise SystemExit(f"unknown mutation(s) {missing}; --list shows them")
        selected = [known[n] for n in args.only]

    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="xla_cost_mutations_"))
    copies = [workdir / f"repo{i}" for i in range(args.jobs)]
    # the baselines run in a copy no mutation touches: the whole scope's baseline runs lazily, while
    # the mutations' copies hold a mutation (run there, it counted the first mutation's catches as
    # failing without it, and that mutation as not caught)
    pristine = workdir / "baseline"
    try:
        for copy in (copies[:1] if args.check else (*copies, pristine)):  # --check applies to one copy only
            copy.mkdir()
            make_copy(copy, args.source)
        # every edit must apply to the pristine copy, and every named test exist, before anything runs
        # (every problem reported at once)
        problems: list[str] = []
        for mutation in selected:
            try:
                restore(apply(copies[0], mutation))
            except SystemExit as exc:
                problems.append(str(exc))
            absent = [t for t in mutation.tests if not (copies[0] / t.split("::")[0]).exists()]
            if absent:
                problems.append(f"mutation {mutation.name}: its tests {absent} do not exist")
        if problems:
            raise SystemExit(f"{len(problems)} of {len(selected)} mutations do not apply to {args.source}:\n"
                             + "\n".join(problems))
        if args.check:
            print(f"all {len(selected)} mutations apply to {args.source}")
            return 0
        env_of = {copy: _environment(copy, args.no_cache) for copy in (*copies, pristine)}
        for copy in (*copies, pristine):
            check_imports(copy, env_of[copy])
        scope = " ".join(args.tests) or "the whole suite"
        print(f"copies of {args.source} in {workdir}; tests: {scope}", file=sys.stderr)

        own = [] if args.tests else list(dict.fromkeys(t for m in selected for t in m.tests))
        baselines = Baselines(pristine, env_of[pristine], own, args.tests, args.timeout)
        if baselines.own is not None:
            print(f"baseline of the mutations' own tests: {len(baselines.own.failed)} failing, "
                  f"{baselines.own.seconds:.0f} s", file=sys.stderr, flush=True)
        rows = _run_all(selected, copies, env_of, args.tests, baselines, args)
    finally:
        if args.keep:
            print(f"kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    how = "every failing test" if args.every_failure else "each run stops at its first failure"
    print(f"Mutations of {args.source}, tests: {scope} ({how}; {args.jobs} at a time)\n")
    if baselines.failed():
        print(f"Failing without any mutation (not counted): {', '.join(map(_short, baselines.failed()))}\n")
    print("| mutation | planted bug | failing tests | first of them | seconds |")
    print("|---|---|---:|---|---:|")
    for mutation, caught, seconds in rows:
        count = str(len(caught)) if caught else "**0: NOT CAUGHT**"
        names = ", ".join(f"`{_short(t)}`" for t in caught[: args.show])
        if len(caught) > args.show:
            names += f", ... ({len(caught) - args.show} more)"
        print(f"| `{mutation.name}` | {mutation.description} | {count} | {names} | {seconds:.0f} |")
    missed = [m.name for m, caught, _ in rows if not caught]
    print(f"\n{len(rows) - len(missed)} of {len(rows)} mutations caught"
          + (f"; not caught: {', '.join(missed)}" if missed else "")
          + f"; {time.perf_counter() - started:.0f} s in all")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
