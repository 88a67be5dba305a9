"""The ``xla-cost`` argument parser; its choices come from the library's light modules."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from xla_cost.choices import COUNTERS, DEFAULT_OPTIMIZER, DTYPES
from xla_cost.choices import OPTIMIZER_NAMES as OPTIMIZERS
from xla_cost.timemodel import devices
from xla_cost.timemodel.comm import ALGORITHMS, INTERCONNECTS
from xla_cost.present.formats import FORMATS
from xla_cost.present.units import join_words
from xla_cost.study.pages import PAGES
from xla_cost.version import __version__

__all__ = ["build_parser"]


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"xla-cost: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``xla-cost`` argument parser; its choices come from the library."""
    parser = Parser(
        prog="xla-cost",
        description="Static FLOP, bytes and memory of a JAX/Flax training step, from compiled XLA.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"xla-cost {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    analyze = sub.add_parser(
        "analyze", help="forward, backward and update cost of one training step"
    )
    analyze.add_argument("model", help="a zoo name (see `xla-cost models`), FILE.py:ATTR or package.module:ATTR")
    analyze.add_argument("--batch-size", type=int, default=None, help="batch size (default 1, or --input-shape's first axis; on a --mesh, one example per device of its batch axes)")
    analyze.add_argument("--optimizer", default=DEFAULT_OPTIMIZER, metavar="NAME", help=f"{', '.join(OPTIMIZERS)} (default {DEFAULT_OPTIMIZER})")
    analyze.add_argument("--dtype", default="float32", choices=DTYPES, help="computation dtype (parameters stay float32); float8: bfloat16 with the projections' and MLPs' products in FP8, current scaling (gpt, llama, gemma, mixtral)")
    analyze.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help="a model argument, e.g. depth=10 (repeatable)")
    _input_options(analyze)
    analyze.add_argument("--per-layer", action="store_true", help="attribute forward, backward and update FLOP to each module")
    analyze.add_argument("--depth", type=int, default=None, metavar="N", help="merge per-layer rows to the first N components of the module path (implies --per-layer; default: one row per module that holds parameters)")
    analyze.add_argument("--counter", default=COUNTERS[0], choices=COUNTERS, help="xla: compile and correct XLA's figures for loops (default); jaxpr: count the jaxpr alone, no compilation (fast; no XLA bytes or memory)")
    analyze.add_argument("--remat", default=None, choices=("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable"), help="rematerialise with this jax.checkpoint policy: per block for zoo models that have blocks (GPT), around the whole model otherwise; recomputation shows in hardware_flops, not model_flops")
    analyze.add_argument("--attention-flops", default="full", choices=("full", "causal"), help="how model_flops counts attention's score and value products: full (every T x T pair, as computed; PaLM's 6N + 12LHQT) or causal (half of those of causally masked attention, MaxText's convention, a sliding window's evaluated mask its allowed pairs less half its diagonal; an encoder's and a cross-attention whole)")
    analyze.add_argument("--memory", action="store_true", help="break the step's memory down per device: parameters, gradients, optimizer state, batch, activations saved for the backward pass (per layer with --per-layer), beside XLA's peak of the donated train step (one more compile)")
    analyze.add_argument("--exact-train-step", action="store_true", help="compile the train step as one program (exact train-step memory; about twice the compile time) instead of adding grad and update")
    analyze.add_argument("--no-cache", action="store_true", help="do not use JAX's persistent compilation cache (also: XLA_COST_NO_CACHE=1; location: XLA_COST_CACHE_DIR, default ~/.cache/xla_cost/jax)")
    analyze.add_argument("--cache", action="store_true", help="look the analysis up in the results store and store it there (the store of `xla-cost sweep`; a second identical analysis returns at once)")
    analyze.add_argument("--store", default=None, metavar="PATH", help="the results store for --cache (default: $XLA_COST_STORE or ~/.cache/xla_cost/results.sqlite)")
    analyze.add_argument("--time", action="store_true", help="also run each phase on real random arrays on the default device and time it (seconds, FLOP/s, MFU, roofline, forward/backward/update split)")
    analyze.add_argument("--peak-tflops", type=float, default=None, metavar="T", help="the device's peak TFLOP/s for MFU and the roofline (default: a table of accelerators; measured on a CPU)")
    analyze.add_argument("--peak-bandwidth", type=float, default=None, metavar="B", help="the device's memory bandwidth in bytes/s, e.g. 3.35e12")
    analyze.add_argument("--call-kwarg", dest="call_kwargs", action="append", default=[], metavar="KEY=VALUE", help="a keyword argument of the model's call, e.g. train=True (repeatable; random keys and training flags are supplied already)")
    analyze.add_argument("--method", default=None, metavar="NAME", help="call this method of the module instead of __call__")
    analyze.add_argument("--axis-name", dest="axis_names", action="append", default=[], metavar="NAME", help="bind a collective axis name the model uses (BatchNorm(axis_name=...)); names are also detected (repeatable)")
    analyze.add_argument("--output-index", default=None, metavar="I|KEY", help="for a model returning (logits, loss), a dict or a dataclass: the output the default loss takes, an index, a key or a field name")
    analyze.add_argument("--mesh", default=None, metavar="AXIS=N,...", help="analyse the step sharded over a device mesh: data (DDP), fsdp (ZeRO-3), expert (a mixture of experts' experts, tokens split too), context (each sequence's positions split, attention's keys and values gathered), model (tensor parallel), e.g. data=8, fsdp=8,model=8 or expert=8; figures per device, with the collectives XLA inserts (devices simulated on the CPU when missing)")
    analyze.add_argument("--param-sharding", dest="param_sharding", action="append", default=[], metavar="REGEX=SPEC", help="a partition rule for parameters whose path matches REGEX, e.g. 'mlp/fc1/kernel=None,model' (repeatable; first match wins; before the model's own metadata and the zoo's rules)")
    analyze.add_argument("--quiet", action="store_true", help="no progress line (none either when stderr is not a terminal)")
    _target_option(analyze)
    analyze.add_argument("--compare-cpu", dest="compare_cpu", action="store_true", help="with --target: also compile the step for the CPU (the proxy) and show the two side by side after the phase table (FLOP, bytes, kernels, library calls, temporaries, peak with --memory) with the reasons they differ")
    _output_options(analyze)

    sweep = sub.add_parser(
        "sweep", help="analyse every combination of models, batch sizes, settings, optimizers and dtypes",
        description="Results go into an SQLite store; a rerun skips what is stored.",
    )
    sweep.add_argument("models", nargs="+", metavar="MODEL", help="zoo names, FILE.py:ATTR or package.module:ATTR (with --input-shape)")
    sweep.add_argument("--batch-sizes", default="1", metavar="B,B,...", help="batch sizes, e.g. 1,2,4,8 (default 1)")
    sweep.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=V,V,...", help="a model argument and its values, e.g. depth=0,1,3 (repeatable; every combination runs)")
    sweep.add_argument("--optimizers", default=DEFAULT_OPTIMIZER, metavar="NAME,...", help=f"of {', '.join(OPTIMIZERS)} (default {DEFAULT_OPTIMIZER})")
    sweep.add_argument("--dtypes", default="float32", metavar="DTYPE,...", help=f"of {', '.join(DTYPES)} (default float32)")
    sweep.add_argument("--counter", default=COUNTERS[0], choices=COUNTERS, help="xla (default) or jaxpr, as for analyze")
    sweep.add_argument("--per-layer", action="store_true", help="also the per-layer rows (--layers FILE writes them; it implies this)")
    sweep.add_argument("--depth", type=int, default=None, metavar="N", help="merge per-layer rows to depth N (implies --per-layer)")
    sweep.add_argument("--store", default=None, metavar="PATH", help="the SQLite results store (default: $XLA_COST_STORE or ~/.cache/xla_cost/results.sqlite)")
    sweep.add_argument("--jobs", type=int, default=None, metavar="N", help="worker processes (default: one per core, as memory allows; 0: in this process)")
    sweep.add_argument("--scheduler", default=None, metavar="ADDRESS", help="run on a Dask distributed scheduler, e.g. tcp://HOST:8786 (pip install 'xla-cost[dask]')")
    sweep.add_argument("--retry-failed", action="store_true", help="analyse again the configurations stored as failed")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.add_argument("--layers", default=None, metavar="FILE", help="write the per-layer rows to FILE as CSV (implies --per-layer)")
    _input_options(sweep, "; the batch axis is replaced by each batch size")
    _target_option(sweep)
    _output_options(sweep)

    scaling = sub.add_parser(
        "scaling", help="predicted speed-up and efficiency of a sharded train step over device counts",
        description="Each device count is a sharded analysis (XLA's SPMD partitioner; devices simulated "
        "on the CPU) priced by xla_cost.predict: a prediction (every kernel priced with the time model's global constants), or "
        "a bound with --bound or --mfu; results go through the store.",
    )
    scaling.add_argument("model", help="a zoo name, FILE.py:ATTR or package.module:ATTR")
    scaling.add_argument("--devices", default="1,2,4,8", metavar="K,K,...", help="device counts grown on --mesh-axis, increasing (default 1,2,4,8)")
    scaling.add_argument("--mesh-axis", default="data", choices=("data", "fsdp"), help="the axis grown: data (DDP) or fsdp (ZeRO-3); the per-device batch stays (weak scaling)")
    scaling.add_argument("--global-batch", type=int, default=None, metavar="B", help="keep B samples per step over all devices instead (strong scaling: B/K per device; every K must divide B)")
    _layout_options(scaling, "the rest of the layout around each point (without the grown axis): ")
    _settings_option(scaling)
    _input_options(scaling, "; the batch axis is --batch-size's, or each point's with --global-batch")
    _hardware_options(scaling, OPTIMIZERS, DTYPES)
    scaling.add_argument("--plot", default=None, metavar="PNG", help="also write the speed-up and efficiency curve to this PNG")
    scaling.add_argument("--quiet", action="store_true", help="no progress line (none either when stderr is not a terminal)")
    _target_option(scaling)
    _output_options(scaling)

    estimate = sub.add_parser(
        "estimate", help="total training FLOP and time of a run on K devices, its tokens (samples) per second, "
        "MFU and HFU, and with --target whether each device's program fits",
    )
    estimate.add_argument("model", help="a zoo name, FILE.py:ATTR or package.module:ATTR")
    estimate.add_argument("--samples", default=None, metavar="N",
                          help="samples per epoch (e.g. 1281167 for ImageNet, or 1.28M)")
    estimate.add_argument("--epochs", type=float, default=1, metavar="E", help="epochs (default 1)")
    estimate.add_argument("--tokens", default=None, metavar="T",
                          help="tokens in all (language models; instead of --samples): 3e11, 300B or 15T")
    estimate.add_argument("--devices", type=int, default=1, metavar="K", help="devices (default 1)")
    estimate.add_argument("--mesh-axis", default="data", choices=("data", "fsdp"), help="how the K devices split the step (default data)")
    _layout_options(estimate, "instead of --devices: ")
    _settings_option(estimate)
    _input_options(estimate)
    _hardware_options(estimate, OPTIMIZERS, DTYPES)
    estimate.add_argument("--quiet", action="store_true", help="no progress line (none either when stderr is not a terminal, nor with --format json)")
    _target_option(estimate)
    _output_options(estimate)

    fit = sub.add_parser(
        "fit", help="the largest batch whose compiled train step fits in a device's memory",
    )
    fit.add_argument("model", help="a zoo name, FILE.py:ATTR or package.module:ATTR")
    fit.add_argument("--device", default=None, metavar="NAME", help=f"{join_words(devices.names('memory'))}: its memory (default h100, or the --target's)")
    fit.add_argument("--device-memory", type=float, default=None, metavar="BYTES", help="the device's memory in bytes instead, e.g. 8e9")
    fit.add_argument("--memory-fraction", type=float, default=None, metavar="F", help="the usable share of it (default 0.75 on a GPU, JAX's allocator default; 1 on a TPU, whose runtime takes it all)")
    fit.add_argument("--mesh", default=None, metavar="AXIS=N,...", help="shard the step (the batch is then global, the memory per device)")
    fit.add_argument("--optimizer", default=DEFAULT_OPTIMIZER, metavar="NAME", help=f"{', '.join(OPTIMIZERS)} (default {DEFAULT_OPTIMIZER})")
    fit.add_argument("--dtype", default="float32", choices=DTYPES, help="computation dtype")
    _settings_option(fit)
    _input_options(fit, "; its batch axis is searched")
    fit.add_argument("--max-batch", dest="max_batch", type=int, default=65_536, metavar="N", help="the largest batch searched (default 65,536, the largest batches published for training); where it fits the answer says so and nothing larger is compiled")
    fit.add_argument("--quiet", action="store_true", help="no line on stderr per batch compiled (shown even when piped), no progress line")
    _target_option(fit)
    _output_options(fit)

    report = sub.add_parser(
        "report", help="write the markdown reports and their figures (reports/), or one model's page",
        description="Pages are built from sweeps run through the results store: the same store gives "
        "byte-identical markdown, and a rerun reads the analyses back.",
    )
    report.add_argument("pages", nargs="*", metavar="NAME", help=f"pages to write: {', '.join(PAGES)}, or all (every page: minutes; a name, all or --model is required)")
    report.add_argument("--out", default="reports", metavar="DIR", help="the directory to write to (default reports/; figures in DIR/figures/)")
    report.add_argument("--store", default=None, metavar="PATH", help="the SQLite results store (default: $XLA_COST_STORE or ~/.cache/xla_cost/results.sqlite)")
    report.add_argument("--jobs", type=int, default=None, metavar="N", help="worker processes for the sweeps (default: one per core, as memory allows; 0: in this process)")
    report.add_argument("--quiet", action="store_true", help="no progress bar")
    report.add_argument("--model", default=None, metavar="FILE.py:ATTR", help="write one page for this model instead (phases, layers, a figure of FLOP per layer): FILE.py:ATTR, package.module:ATTR or a zoo name")
    report.add_argument("--input-shape", default=None, metavar="B,D1,...", help="with --model: the input shape, batch first (required for a custom model)")
    report.add_argument("--input-dtype", default=None, metavar="DTYPE", help="with --model: the input dtype, e.g. int32 for token ids")
    report.add_argument("--optimizer", default=None, metavar="NAME", help=f"with --model: {', '.join(OPTIMIZERS)} (default {DEFAULT_OPTIMIZER})")
    report.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help="with --model: a model argument (repeatable)")
    _target_option(report)
    _debug_option(report)

    step = sub.add_parser(
        "step", help="forward, backward, update and other of your own training step, as you wrote it",
        description="Traces FUNCTION on the arguments MAKE_ARGS() returns (abstract ones are fine) and splits "
                    "the step into forward, backward, update and other (xla_cost.analyze_step).",
    )
    step.add_argument("function", metavar="FILE.py:FUNCTION", help="the train step (or package.module:FUNCTION)")
    step.add_argument("--args", dest="make_args", required=True, metavar="FILE.py:MAKE_ARGS", help="a function of no arguments returning the step's positional arguments as a tuple or list, e.g. return state, batch (jax.eval_shape'd states and ShapeDtypeStruct batches are fine)")
    step.add_argument("--per-layer", action="store_true", help="split each part's FLOP by module")
    step.add_argument("--depth", type=int, default=None, metavar="N", help="merge per-layer rows to the first N components of the module path (implies --per-layer)")
    step.add_argument("--counter", default=COUNTERS[0], choices=COUNTERS, help="xla: also compile the step once and check the parts' sum against XLA's count (default); jaxpr: count only")
    step.add_argument("--axis-name", dest="axis_names", action="append", default=[], metavar="NAME", help="bind a collective axis name the step uses unbound (lax.pmean(grads, 'batch')); names are also detected (repeatable)")
    step.add_argument("--memory", action="store_true", help="the step's memory by part beside XLA's figures for the step as its jit donates")
    step.add_argument("--time", action="store_true", help="also run the compiled step on the default device and time it, split into forward/backward/update/other (and layers with --per-layer) from a profiler trace: seconds, FLOP/s, GB/s, MFU, roofline")
    step.add_argument("--quiet", action="store_true", help="no progress line (none either when stderr is not a terminal)")
    _target_option(step)
    step.add_argument("--compare-cpu", dest="compare_cpu", action="store_true", help="with --target: also compile the step for the CPU (the proxy) and show the two side by side (xla_cost.analyze_step(..., compare_cpu=True))")
    _output_options(step)

    store = sub.add_parser(
        "store", help="what the results store holds: list, show, delete, vacuum",
        description="The SQLite store that sweep, analyze --cache and report write (xla_cost.store_contents).",
    )
    store.add_argument("action", choices=("list", "show", "delete", "vacuum"), help="list rows; show one (by KEY); delete rows (--failed, --model, --key or --all); vacuum: give deleted rows' space back")
    store.add_argument("key", nargs="?", default=None, metavar="KEY", help="with show: the row's key, or the start of it (as list shows it)")
    store.add_argument("--failed", action="store_true", help="only the rows that failed")
    store.add_argument("--model", default=None, metavar="NAME", help="only this model's rows")
    store.add_argument("--key", dest="key_prefix", default=None, metavar="PREFIX", help="only rows whose key starts with PREFIX")
    store.add_argument("--all", dest="everything", action="store_true", help="with delete: every row")
    store.add_argument("--store", default=None, metavar="PATH", help="the results store (default: $XLA_COST_STORE or ~/.cache/xla_cost/results.sqlite)")
    _output_options(store)

    diff = sub.add_parser(
        "diff", help="two saved analyses side by side, per phase and per layer, the changes ranked",
        description="Compares two reports written by `xla-cost analyze ... --format json --output FILE` "
                    "(or `step`, `store show`): per phase A, B, B - A and B / A; layers ranked by the "
                    "absolute change of their FLOP (xla_cost.diff).",
    )
    diff.add_argument("a", metavar="A.json", help="the first report's JSON")
    diff.add_argument("b", metavar="B.json", help="the second report's JSON")
    diff.add_argument("--top", type=int, default=None, metavar="N", help="only the N layers whose FLOP changed most (default: every layer)")
    _output_options(diff)

    models = sub.add_parser("models", help="list the model zoo")
    _output_options(models)
    return parser


def _output_options(parser: argparse.ArgumentParser) -> None:
    """``--format``, ``--output`` and the hidden ``--debug`` every command that prints takes."""
    parser.add_argument("--format", default="table", choices=FORMATS)
    parser.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    _debug_option(parser)


def _debug_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def _settings_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a model argument (repeatable)")


def _input_options(parser: argparse.ArgumentParser, batch: str = "") -> None:
    """``--input-shape`` and ``--input-dtype``, declared once for every command that takes a custom model
    (`xla_cost.RunConfig`'s ``input_shape`` and ``input_dtype``); ``batch``: what becomes of the batch axis."""
    parser.add_argument("--input-shape", default=None, metavar="B,D1,...",
                        help=f"input shape including the batch axis (required for custom models{batch})")
    parser.add_argument("--input-dtype", default=None, metavar="DTYPE",
                        help="a custom model's input dtype, e.g. int32 for token ids (default: --dtype)")


def _layout_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--mesh", default=None, metavar="AXIS=N,...", help=f"{what}devices per axis: data (replicas), fsdp, expert, context (each sequence's positions) and model (shards of the analysed program), pipeline (stages, each with its share of n_layer), e.g. data=16,model=8,pipeline=8")
    parser.add_argument("--micro-batches", type=int, default=1, metavar="M", help="micro-batches per step per replica: the pipeline's (its bubble is (pipeline - 1) / M of the work), gradient accumulation without one (default 1)")
    parser.add_argument("--chunks", type=int, default=1, metavar="V", help="model chunks per pipeline stage, the interleaved schedule: the bubble shrinks to (pipeline - 1) / (V M), the stage transfers grow V-fold; V must divide each stage's layers (default 1; needs pipeline= in --mesh)")


def _hardware_options(
    parser: argparse.ArgumentParser, optimizers: Sequence[str], dtypes: Sequence[str],
    optimizer: str = DEFAULT_OPTIMIZER,
) -> None:
    parser.add_argument("--batch-size", type=int, default=None, metavar="B", help="samples per device, or per micro-batch and data-parallel rank (default 1)")
    parser.add_argument("--optimizer", default=optimizer, metavar="NAME", help=f"{', '.join(optimizers)} (default {optimizer})")
    parser.add_argument("--dtype", default="float32", choices=dtypes, help="computation dtype")
    parser.add_argument("--device", default=None, metavar="NAME", help=f"{join_words(devices.names('peak'))}: its peak FLOP/s, memory bandwidth and cluster preset (default h100, or --target's device)")
    parser.add_argument("--interconnect", default=None, metavar="NAME", help=f"one interconnect for every link instead of the device's cluster: {', '.join(INTERCONNECTS)}")
    parser.add_argument("--node", default=None, metavar="NAME", help=f"the node the cluster is built of instead of the device's: {join_words(devices.NODES)} (xla_cost.timemodel.devices.NODES)")
    parser.add_argument("--node-size", type=int, default=None, metavar="N", help="devices per node (a TPU slice's chips; default the node's, or the --target's slice)")
    parser.add_argument("--nics", type=int, default=None, metavar="N", help="network adapters per host, shared by its devices between nodes (default the node's, e.g. 8 on a DGX H100)")
    parser.add_argument("--bandwidth", type=float, default=None, metavar="B", help="one network adapter's line rate in bytes/s per direction, e.g. 50e9 for 400 Gb/s (default the node's): what crosses nodes is priced at NICs x B / devices per host")
    parser.add_argument("--bound", action="store_true", help="price bounds instead of predictions: compute at peak (or at --mfu), nothing hidden, every collective on a flat ring")
    parser.add_argument("--mfu", type=float, default=None, metavar="X", help="a bound with compute at this fraction of peak FLOP/s (default: none, compute predicted kernel by kernel)")
    parser.add_argument("--overlap", type=float, default=None, metavar="F", help="fraction of communication hidden behind compute (default: none given, the gradient buckets are scheduled against the backward pass; 0 with --bound)")
    parser.add_argument("--algorithm", default="ring", choices=tuple(ALGORITHMS), help="how collectives are scheduled: ring (n-1 hops, default) or halving-doubling (log2 n hops, as tree and hierarchical algorithms at scale); xla_cost.timemodel.comm.ALGORITHMS")
    parser.add_argument("--store", default=None, metavar="PATH", help="the results store (default: $XLA_COST_STORE or ~/.cache/xla_cost/results.sqlite)")


def _target_option(parser: argparse.ArgumentParser) -> None:
    """``--target``, declared once for every command that compiles."""
    parser.add_argument(
        "--target", default=None, metavar="DEVICE",
        help=f"compile for this device with its own compiler, without one here: {join_words(devices.target_names())}"
             " (a TPU with its slice, e.g. tpu-v5e:2x2); needs pip install 'xla-cost[gpu]' or '[tpu]'",
    )
