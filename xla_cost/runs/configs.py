"""`RunConfig`: one analysis described by names and numbers alone.

A zoo name (``resnet50``) or an importable ``package.module:attribute``, the
model's keyword arguments, the batch size, optimizer, dtype and counter: plain
values that pickle to a worker process or a Dask worker, print in a progress
bar, and key a stored result (`xla_cost.compiled.store`). `RunConfig.run` builds the
model and calls `xla_cost.analyze`; the ``analyze`` command of the CLI and
every configuration of `xla_cost.sweep` go through it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
from collections.abc import Mapping
from typing import Any

from xla_cost.errors import InputError

__all__ = ["RunConfig", "load_custom", "parse_shape"]


def parse_shape(text: str, flag: str = "--input-shape") -> tuple[int, ...]:
    """``"8,224,224,3"`` (or ``8x224x224x3``) to a shape; `InputError` otherwise."""
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise InputError(
            f"{flag} as positive integers B,D1,... (batch first)", repr(text),
            f"Write e.g. {flag} 8,224,224,3.",
        )
    return shape


def _accepts_dtype(target: Any) -> bool:
    """Whether a Module class or factory takes a ``dtype`` argument."""
    if inspect.isclass(target) and dataclasses.is_dataclass(target):  # a Linen module class
        return any(f.name == "dtype" for f in dataclasses.fields(target))
    try:
        init = target.__init__ if inspect.isclass(target) else target
        return "dtype" in inspect.signature(init).parameters
    except (TypeError, ValueError):
        return False


def _input_dtype(name: str) -> Any:
    import jax.numpy as jnp

    try:
        return jnp.dtype(name)
    except TypeError as exc:
        raise InputError(
            "--input-dtype as a dtype name (float32, bfloat16, int32, ...)", repr(name),
            "Use e.g. --input-dtype int32 for token ids.",
        ) from exc


def load_custom(spec: str, config: Mapping[str, Any], dtype: str = "float32") -> tuple[Any, str, bool]:
    """``package.module:attribute`` to a module instance.

    The attribute may be a Linen or NNX module instance (then ``config`` must be
    empty), a module class or a factory function called with ``config``. NNX
    classes are built abstractly (`flax.nnx.eval_shape`). Where the class or
    factory takes ``dtype`` and ``dtype`` is not float32, it is passed.

    Returns:
      (module, its name, whether it was built to compute in ``dtype``).
    """
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
        target = getattr(module, attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InputError(
            "MODEL as a zoo name or an importable package.module:attribute",
            f"{spec!r} ({exc})", "Check the module path and that it is on PYTHONPATH.",
        ) from exc
    import flax.linen as nn
    from flax import nnx

    if isinstance(target, (nn.Module, nnx.Module)):
        if config:
            raise InputError(
                "--set only with a Module class or a factory function",
                f"an instance of {type(target).__name__}", "Drop --set or point at the class.",
            )
        return target, attribute, False
    if not callable(target):
        raise InputError(
            "a Module class, instance or zero-argument factory",
            f"{type(target).__name__} {spec!r}", "Point MODEL at one of those.",
        )
    kwargs = dict(config)
    cast = dtype != "float32" and "dtype" not in kwargs and _accepts_dtype(target)
    if cast:
        import jax.numpy as jnp

        kwargs["dtype"] = jnp.dtype(dtype)
    try:
        if inspect.isclass(target) and issubclass(target, nnx.Module):
            # Build NNX modules abstractly: nothing the size of the model is allocated.
            needs_rngs = "rngs" in inspect.signature(target.__init__).parameters and "rngs" not in kwargs
            cls = target
            target = nnx.eval_shape(
                lambda: cls(**kwargs, rngs=nnx.Rngs(0)) if needs_rngs else cls(**kwargs)
            )
        else:
            target = target(**kwargs)
    except TypeError as exc:
        raise InputError(
            f"arguments that {attribute} accepts", repr(dict(config)), f"Check --set ({exc})."
        ) from exc
    return target, attribute, cast


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One analysis, by name: what `xla_cost.sweep` runs and `xla_cost.compiled.store` keys.

    Attributes:
      model: a zoo name (any spelling `xla_cost.zoo.get_spec` accepts; stored
        under its canonical name) or ``package.module:attribute``.
      batch_size: the leading axis of the inputs.
      config: the model's keyword arguments (``{"depth": 10}``).
      optimizer: a name in `xla_cost.OPTIMIZERS`.
      dtype: the computation dtype (parameters stay float32).
      counter: ``xla`` or ``jaxpr`` (`xla_cost.COUNTERS`).
      per_layer: also attribute costs to layers.
      depth: merge layer rows to this module depth (implies ``per_layer``).
      input_shape: the input shape, batch first (required for a custom model;
        for a zoo model it replaces the per-example shape).
      input_dtype: a custom model's input dtype (default: ``dtype``).
      exact_train_step: compile the train step as one program.
      mesh: devices per mesh axis for a sharded step (``{"fsdp": 8,
        "model": 8}``, `xla_cost.parallel.sharding`); empty: one device.
    """

    model: str
    batch_size: int = 1
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    optimizer: str = "sgd"
    dtype: str = "float32"
    counter: str = "xla"
    per_layer: bool = False
    depth: int | None = None
    input_shape: tuple[int, ...] | None = None
    input_dtype: str | None = None
    exact_train_step: bool = False
    mesh: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def custom(self) -> bool:
        """Whether the model is ``package.module:attribute`` rather than a zoo name."""
        return ":" in self.model

    def canonical(self) -> RunConfig:
        """The same configuration with the zoo's canonical model name (errors on a typo)."""
        if self.custom:
            return self
        from xla_cost import zoo  # the zoo (jax, flax) loads only when a model is built

        return dataclasses.replace(self, model=zoo.get_spec(self.model).name)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, keys in a fixed order (the store hashes them)."""
        data = dataclasses.asdict(self)
        data["config"] = {k: self.config[k] for k in sorted(self.config)}
        data["input_shape"] = list(self.input_shape) if self.input_shape else None
        if self.mesh:
            data["mesh"] = dict(self.mesh)
        else:  # one device: the keys of results stored before meshes existed
            data.pop("mesh")
        return data

    def label(self) -> str:
        """A short line for a progress bar: ``resnet50 b32 adam float32 depth=3``."""
        parts = [self.model, f"b{self.batch_size}", self.optimizer, self.dtype]
        parts += [f"{k}={v}" for k, v in sorted(self.config.items())]
        if self.counter != "xla":
            parts.append(f"counter={self.counter}")
        if self.mesh:
            parts.append("mesh=" + ",".join(f"{k}={v}" for k, v in self.mesh.items()))
        return " ".join(parts)

    def build(self) -> tuple[Any, Any, str, str | None, list[str]]:
        """The model, its abstract inputs, its name, the dtype to record (None:
        read it from the model) and notes about how it was built."""
        import jax

        config = dict(self.config)
        notes: list[str] = []
        dtype: str | None = self.dtype
        shape = tuple(self.input_shape) if self.input_shape else None
        if self.custom:
            model, name, cast = load_custom(self.model, config, self.dtype)
            if shape is None:
                raise InputError(
                    "--input-shape for a custom model", "none", "Add e.g. --input-shape 8,224,224,3."
                )
            shape = (self.batch_size, *shape[1:])
            inputs = jax.ShapeDtypeStruct(shape, _input_dtype(self.input_dtype or self.dtype))
            if self.dtype != "float32" and not cast:
                dtype = None  # the report reads the dtype the model computes in
                notes.append(
                    f"--dtype {self.dtype}: only the inputs were cast; {name} is not a class or "
                    "factory with a dtype argument, so its layers compute in their own dtype "
                    "(see dtype); pass the model's own dtype option with --set to change that"
                )
            return model, inputs, name, dtype, notes
        from xla_cost import zoo  # the zoo (jax, flax) loads only when a model is built

        name = zoo.get_spec(self.model).name
        model = zoo.build_model(name, dtype=self.dtype, **config)
        inputs = zoo.example_inputs(name, self.batch_size, dtype=self.dtype, **config)
        if shape is not None:
            inputs = jax.ShapeDtypeStruct((self.batch_size, *shape[1:]), inputs.dtype)
        return model, inputs, name, dtype, notes

    def run(self, **options: Any) -> Any:
        """Builds the model and analyses it: a `xla_cost.Report`.

        Args:
          **options: further `xla_cost.analyze` keywords (``timed``,
            ``call_kwargs``, ``compilation_cache``, ...).
        """
        from xla_cost.analysis.pipeline import analyze  # jax loads only when a run runs

        model, inputs, name, dtype, notes = self.build()
        report = analyze(
            model, inputs, optimizer=self.optimizer, per_layer=self.per_layer or self.depth is not None,
            depth=self.depth, counter=self.counter, name=name, config=dict(self.config),
            dtype=dtype, exact_train_step=self.exact_train_step,
            **({"mesh": dict(self.mesh)} if self.mesh else {}), **options,
        )
        if notes:
            report = dataclasses.replace(report, notes=(*notes, *report.notes))
        return report

    def __str__(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def remat_placement(
    model: str, policy: str | None, config: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Where a remat policy goes for ``model``: ``(config, analyze options)``.

    A zoo model that remats per block (its module has a ``remat`` field, the
    GPTs) takes the policy in its configuration; any other model is wrapped
    whole (`xla_cost.analyze`'s ``remat=``). No policy (None, empty): both as given.
    """
    config = dict(config)
    if not policy:
        return config, {}
    if _remats_per_block(model):
        config["remat"] = policy
        return config, {}
    return config, {"remat": policy}


def _remats_per_block(model: str) -> bool:
    from xla_cost import zoo  # loads jax and flax: only when asked

    try:
        spec = zoo.get_spec(model)
    except Exception:  # noqa: BLE001 - not a zoo name (a custom model)
        return False
    return "remat" in {f.name for f in dataclasses.fields(spec.module)}
