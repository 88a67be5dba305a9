"""The model zoo: a registry from names to Flax modules and their inputs.

Each family file (``seed_nets``, ``gpt``, ``resnet``, ``bert``, ``vit``) declares
its own ``SPECS``. Names match in any case and with or without ``-``, ``_`` or
spaces (``ResNet-50`` is ``resnet50``), and a spec's ``aliases`` name the same
architecture elsewhere (``gpt2``, ``microsoft/resnet-50``).

Example::

    from xla_cost.zoo import build_model, example_inputs
    model = build_model("deeper_conv_net", depth=10)
    inputs = example_inputs("deeper_conv_net", batch_size=8, depth=10)
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import importlib
import types
from ._spec import FLOAT_RANGES, FP8_FIELD as _FP8_FIELD, ModelSpec, Published, describe_range, float_range, lookup_key
from xla_cost import choices as _choices
from xla_cost.errors import InputError
from xla_cost.parallel.sharding import model_rules
from xla_cost.present.formats import render_as
from xla_cost.present.text import TextTable, render, resolve_width
from xla_cost.step.routing import active_parameters, declared_routing

if TYPE_CHECKING:  # pandas (0.3 s to import) loads where a table is made, not with the analysis
    import pandas as pd

__all__ = [
    "DTYPES",
    "FAMILIES",
    "FLOAT_RANGES",
    "REGISTRY",
    "ModelSpec",
    "Published",
    "ZooListing",
    "build_model",
    "count_parameters",
    "example_inputs",
    "fp8_families",
    "get_spec",
    "partition_rules",
    "render_zoo",
    "zoo_frame",
    "zoo_table",
]

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16,
           _choices.FLOAT8: jnp.dtype(_choices.FLOAT8_ACTIVATIONS)}
"""Each dtype name's computation dtype; ``float8`` computes in bfloat16 with its
matrix products in FP8 (`FP8_FIELD`)."""

DTYPES: tuple[str, ...] = _choices.DTYPES
"""The computation dtypes a zoo model can be built in (parameters stay float32)."""
if tuple(_DTYPES) != DTYPES:  # pragma: no cover - a dtype added in one place only
    raise ImportError("xla_cost.zoo's dtypes and xla_cost.choices.DTYPES differ")


def _registry(specs: list[ModelSpec]) -> dict[str, ModelSpec]:
    """Name -> spec; fails loudly when two names or aliases look up the same."""
    registry: dict[str, ModelSpec] = {}
    owners: dict[str, str] = {}
    for spec in specs:
        if spec.name in registry:
            raise ValueError(f"zoo model {spec.name!r} declared twice; drop one of the specs")
        for name in (spec.name, *spec.aliases):
            owner = owners.setdefault(lookup_key(name), spec.name)
            if owner != spec.name:
                raise ValueError(
                    f"zoo name {name!r} of {spec.name!r} looks up the same as one of {owner!r}; "
                    "rename or drop one of them"
                )
        registry[spec.name] = spec
    return registry


FAMILIES: tuple[str, ...] = ("seed_nets", "gpt", "resnet", "bert", "vit", "llama", "gemma", "mixtral")
"""The family modules, in the zoo's listing order; each declares its own `SPECS`.

A family's module loads when a model of it is asked for (`get_spec` tries first
the families whose name is in the name asked, then the others in this order),
or when `REGISTRY` is first read: Flax makes each module class a dataclass as
its file loads, and the eight families together took 0.15 s of every analysis's
imports for the one model it analyses (0.08 s with five)."""


def _family(name: str) -> types.ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def __getattr__(name: str) -> Any:
    """`REGISTRY` (every family loaded, names checked for clashes) built on first
    use; a family module (``zoo.llama``) loaded on first use."""
    if name == "REGISTRY":
        return _every()
    if name in FAMILIES:
        return _family(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _every() -> dict[str, ModelSpec]:
    """`REGISTRY`, built (every family loaded, names checked for clashes) on first use."""
    if "REGISTRY" not in globals():
        globals()["REGISTRY"] = _registry([spec for family in FAMILIES for spec in _family(family).SPECS])
    return globals()["REGISTRY"]


if TYPE_CHECKING:
    REGISTRY: dict[str, ModelSpec]
    """Every zoo model by canonical name (each family file declares its own `SPECS`)."""


def _lookup(name: str) -> ModelSpec | None:
    """``name``'s spec from the families loaded one by one (the likeliest first),
    before the whole `REGISTRY` is built; None where none declares it."""
    key = lookup_key(name)
    order = sorted(FAMILIES, key=lambda family: lookup_key(family) not in key)  # resnet in microsoft/resnet-50
    for family in order:
        for spec in _family(family).SPECS:
            if name == spec.name or key in {lookup_key(n) for n in (spec.name, *spec.aliases)}:
                return spec
    return None


def _names() -> dict[str, tuple[str, str]]:
    """Lookup key -> (the name as declared, its canonical name), aliases included."""
    return {
        lookup_key(name): (name, spec.name)
        for spec in _every().values()
        for name in (spec.name, *spec.aliases)
    }


def _did_you_mean(key: str, names: Mapping[str, tuple[str, str]]) -> str:
    """``Did you mean `resnet50`? `` for the closest names to ``key`` (difflib), or ``""``."""
    # The closest name, and any nearly as close: resnet10 -> resnet101, resnet18, resnet50.
    scores = {k: difflib.SequenceMatcher(None, key, k).ratio() for k in names}
    least = max(0.6, max(scores.values(), default=0.0) - 0.1)
    shown: dict[str, str] = {}  # canonical name -> as shown: one suggestion per model
    for match in sorted((k for k in scores if scores[k] >= least), key=lambda k: -scores[k]):
        declared, canonical = names[match]
        shown.setdefault(canonical, f"`{declared}`" + ("" if declared == canonical else f" (= {canonical})"))
    options = list(shown.values())[:3]
    if not options:
        return ""
    listed = options[0] if len(options) == 1 else f"{', '.join(options[:-1])} or {options[-1]}"
    return f"Did you mean {listed}? "


def get_spec(name: str) -> ModelSpec:
    """The `ModelSpec` of ``name``, a zoo name or alias in any case and with any separators.

    ``resnet50``, ``ResNet-50``, ``RESNET_50`` and ``microsoft/resnet-50`` all give
    ResNet-50's spec, whose ``name`` is the canonical one reports use.

    Raises:
      InputError: ``name`` is not in the zoo; the message lists the zoo and
        suggests the closest names.
    """
    if "REGISTRY" not in globals() and isinstance(name, str) and (spec := _lookup(name)) is not None:
        return spec  # the whole registry (its clash checks: tests/cli/test_cli.py lists it) not needed
    registry = _every()
    if name in registry:
        return registry[name]
    names = _names()
    key = lookup_key(name) if isinstance(name, str) else ""
    if key in names:
        return registry[names[key][1]]
    raise InputError(
        f"a zoo model name ({', '.join(registry)}), FILE.py:attribute or package.module:attribute",
        repr(name),
        f"{_did_you_mean(key, names)}Run `xla-cost models` to list the zoo and its aliases.",
    )


def partition_rules(model: Any) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """The partition rules a zoo family declares on its classes
    (`xla_cost.parallel.sharding.RULES_ATTRIBUTE`), for ``model``'s class or
    its nearest base; empty for a model that declares none."""
    return model_rules(model)


def _check_config(spec: ModelSpec, config: Mapping[str, Any]) -> None:
    allowed = spec.defaults
    for key, value in config.items():
        if key not in allowed:
            raise InputError(
                f"a {spec.name} argument ({', '.join(allowed) or 'none'})",
                repr(key),
                "Use --set KEY=VALUE with one of those keys.",
            )
        default = allowed[key]
        is_int = isinstance(default, int) and not isinstance(default, bool)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif is_int:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= spec.minimum(key)
        elif isinstance(default, float):
            low, open_low, high = float_range(key)
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                  and (value > low if open_low else value >= low) and value <= high)
        else:
            ok = True
        if not ok:
            kind = type(default).__name__
            raise InputError(
                f"{key} to be {'an' if kind[0] in 'aeiou' else 'a'} {kind}"
                + (f" >= {spec.minimum(key)}" if is_int else "")
                + (f" {describe_range(key)}" if isinstance(default, float) else ""),
                repr(value),
                f"Use e.g. --set {key}={default!r}.",
            )


def build_model(name: str, *, dtype: str = "float32", **config: Any) -> nn.Module:
    """Instantiates zoo model ``name`` with ``config`` overriding its defaults.

    Args:
      name: a `REGISTRY` name.
      dtype: the computation dtype (`DTYPES`: ``float32``, ``bfloat16``,
        ``float16``; ``float8``: bfloat16 with the projections' and MLPs'
        products in FP8, for the families that declare it, `fp8_families`);
        parameters stay float32.
      **config: the model's fields, e.g. ``depth=10`` for ``deeper_conv_net``.
    """
    spec = get_spec(name)
    _check_config(spec, config)
    if dtype not in _DTYPES:
        raise InputError(
            f"a dtype in {', '.join(_DTYPES)}", repr(dtype), f"Use --dtype {' or '.join(_DTYPES)}."
        )
    kwargs = dict(config)
    names = {f.name for f in dataclasses.fields(spec.module)}
    if dtype == _choices.FLOAT8:
        if _FP8_FIELD not in names:
            families = fp8_families()
            raise InputError(
                f"float8 (FP8 matrix products) with a model of the {', '.join(families)} families",
                f"{spec.name} with float8", "Use bfloat16 (or float32, float16) for it, or a "
                f"model of those families (xla-cost models).",
            )
        kwargs[_FP8_FIELD] = True
    if "dtype" in names:
        kwargs["dtype"] = _DTYPES[dtype]
    return spec.module(**kwargs)


def fp8_families() -> tuple[str, ...]:
    """The families whose models take ``--dtype float8`` (`build_model`), in `FAMILIES`' order."""
    return tuple(family for family in FAMILIES if any(
        _FP8_FIELD in {f.name for f in dataclasses.fields(spec.module)} for spec in _family(family).SPECS))


def example_inputs(
    name: str, batch_size: int, *, dtype: str = "float32", **config: Any
) -> jax.ShapeDtypeStruct:
    """Abstract inputs ``(batch_size, *input_shape)`` for zoo model ``name``."""
    spec = get_spec(name)
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise InputError("a batch size of at least 1", repr(batch_size), "Use --batch-size N, N >= 1.")
    shape = (int(batch_size), *spec.input_shape({**spec.defaults, **config}))
    input_dtype = _DTYPES.get(dtype, jnp.float32) if spec.input_dtype == "float" else spec.input_dtype
    return jax.ShapeDtypeStruct(shape, input_dtype)


def count_parameters(name: str, **config: Any) -> int:
    """Trainable parameters of a zoo model, counted abstractly (nothing allocated)."""
    model = build_model(name, **config)
    inputs = example_inputs(name, 1, **config)
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs)
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(variables.get("params", {}))))


def _fast_count(spec: ModelSpec) -> dict[str, Any]:
    # A scanned stack traces one layer instead of all of them and has the same
    # parameters (tests/zoo/test_gpt.py checks it), so the zoo table counts that way.
    return {"scan_layers": True} if "scan_layers" in spec.defaults else {}


@functools.lru_cache(maxsize=None)
def _default_parameters(name: str) -> tuple[int, int | None]:
    """A zoo model's parameters at its defaults, and its active parameters where it
    declares its routing (`xla_cost.step.routing.active_parameters`; None: it
    declares none): traced once per process (the table lists every model, GPT-3
    175B's included)."""
    config = _fast_count(_every()[name])
    model, inputs = build_model(name, **config), example_inputs(name, 1, **config)
    params = jax.eval_shape(lambda x: model.init(jax.random.key(0), x), inputs).get("params", {})
    total = int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))
    return total, active_parameters(params, declared_routing(model, inputs))


def zoo_frame() -> pd.DataFrame:
    """The zoo as a table of raw data, one row per canonical name.

    Columns: ``description``; ``parameters`` (an int); ``active_parameters``,
    those a token's computation reads, for a model that declares its routing (a
    mixture of experts: `xla_cost.step.routing`), else missing; ``input_shape`` per batch
    ``B``; ``input_dtype`` (``float``: follows the computation dtype, ``--dtype``;
    else the dtype of token ids); ``config``, the ``--set`` keys and their
    defaults; ``aliases``, other names `get_spec` accepts (comma-separated).
    """
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    rows = []
    for spec in _every().values():
        shape = ", ".join(["B", *map(str, spec.input_shape(spec.defaults))])
        parameters, active = _default_parameters(spec.name)
        rows.append(
            {
                "name": spec.name,
                "description": spec.description,
                "parameters": parameters,
                "active_parameters": active,
                "input_shape": f"({shape})",
                "input_dtype": spec.input_dtype,
                "config": ", ".join(f"{k}={v}" for k, v in spec.defaults.items()),
                "aliases": ", ".join(spec.aliases),
            }
        )
    frame = pd.DataFrame(rows).set_index("name")
    frame["active_parameters"] = frame["active_parameters"].astype("Int64")
    return frame


def zoo_table(frame: pd.DataFrame | None = None, width: int | None = None) -> str:
    """The zoo as plain-text tables for terminals, wrapped to ``width``.

    Args:
      frame: `zoo_frame()` (computed when None).
      width: the widest a line may be; None: the terminal's width when stdout is
        a terminal, else unlimited (see `xla_cost.analysis.report.Report.to_table`).
    """
    import pandas as pd  # noqa: PLC0415 - see TYPE_CHECKING above
    frame = zoo_frame() if frame is None else frame
    models = pd.DataFrame(
        {
            "parameters": [f"{n:,}" if pd.isna(active) else f"{n:,}\n{active:,} active"
                           for n, active in zip(frame["parameters"], frame["active_parameters"])],
            "input shape": frame["input_shape"],
            "input dtype": frame["input_dtype"],
            "description": [
                f"{row.description}\n--set {row.config}" if row.config else row.description
                for row in frame.itertuples()
            ],
        },
        index=frame.index,
    )
    aliases = pd.DataFrame(
        [
            {"alias": alias, "model": name}
            for name, listed in frame["aliases"].items()
            for alias in (listed.split(", ") if listed else [])
        ],
        columns=["alias", "model"],
    ).set_index("alias")
    return render(
        [
            TextTable(
                models, f"{len(frame)} zoo models",
                left=("input shape", "input dtype", "description"), prose=("description",),
            ),
            "input dtype float: the computation dtype (--dtype, float32 by default); int32: token ids.",
            "active: the parameters a token's computation reads (the routed experts counted top_k / "
            "n_experts), for the mixtures of experts, which declare their routing.",
            TextTable(aliases, "aliases", left=("model",)),
            "Names and aliases match in any case, with or without - and _ (ResNet-50 = resnet50).",
        ],
        resolve_width(width),
    )


@dataclasses.dataclass(frozen=True)
class ZooListing:
    """The zoo as every command writes it (`xla_cost.present.text.render_as`).

    Attributes:
      frame: `zoo_frame()`.
    """

    frame: pd.DataFrame

    def to_table(self, width: int | None = None) -> str:
        return zoo_table(self.frame, width)

    def to_json(self) -> str:
        return self.frame.reset_index().to_json(orient="records", indent=2)

    def to_csv(self) -> str:
        return self.frame.to_csv()

    def to_markdown(self) -> str:
        # a dense model's active parameters are missing: an empty cell, as CSV writes it (not pandas' "<NA>")
        return self.frame.astype(object).where(self.frame.notna(), "").to_markdown() + "\n"


def render_zoo(format: str = "table", width: int | None = None) -> str:  # noqa: A002 - the CLI's --format
    """The zoo in one of the CLI's formats, as ``xla-cost models --format FORMAT`` prints it.

    Args:
      format: ``table`` (for terminals, see `zoo_table`), or ``json``, ``csv``,
        ``markdown``: `zoo_frame`'s raw data.
      width: the table's width (see `zoo_table`); the other formats ignore it.
    """
    return render_as(ZooListing(zoo_frame()), format, width)
