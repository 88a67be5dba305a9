"""`RunConfig`: one analysis described by names and numbers alone.

A zoo name (``resnet50``), ``FILE.py:attribute`` or an importable ``package.module:attribute``, the
model's keyword arguments, the batch size, optimizer, dtype and counter: plain
values that pickle to a worker process or a Dask worker, print in a progress
bar, and key a stored result (`xla_cost.compiled.store`). `RunConfig.run` builds the
model and calls `xla_cost.analyze`; the ``analyze`` command of the CLI and
every configuration of `xla_cost.sweep` go through it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from xla_cost.choices import DEFAULT_OPTIMIZER, FLOAT8, FLOAT8_ACTIVATIONS
from xla_cost.errors import InputError

__all__ = ["RunConfig", "load_custom", "parse_shape", "input_batch"]


def parse_shape(text: str, flag: str = "--input-shape") -> tuple[int, ...]:
    """``"8,224,224,3"`` (or ``8x224x224x3``) to a shape; `InputError` otherwise
    (an empty dimension, ``8,,784``, included)."""
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise InputError(
            f"{flag} as positive integers B,D1,... (batch first)", repr(text),
            f"Write e.g. {flag} 8,224,224,3.",
        )
    return shape


def input_batch(batch_size: int | None, input_shape: tuple[int, ...] | None) -> int | None:
    """A run's batch: ``batch_size`` where given, else ``input_shape``'s first axis (the batch, as
    ``--input-shape``'s on the command line), else None (the run's default, 1). The one rule of
    `xla_cost.estimate`, `xla_cost.scaling` and their commands (which also refuse ``--batch-size``
    beside an ``--input-shape`` of another batch)."""
    return batch_size if batch_size is not None else (input_shape[0] if input_shape else None)


def _accepts_dtype(target: Any) -> bool:
    """Whether a Module class or factory takes a ``dtype`` argument by name."""
    return "dtype" in (_arguments(target) or ())


def _input_dtype(name: str) -> Any:
    import jax.numpy as jnp

    try:
        return jnp.dtype(name)
    except TypeError as exc:
        raise InputError(
            "--input-dtype as a dtype name (float32, bfloat16, int32, ...)", repr(name),
            "Use e.g. --input-dtype int32 for token ids.",
        ) from exc


def _custom_target(spec: str) -> tuple[Any, str]:
    """``FILE.py:attribute`` or ``package.module:attribute`` to the attribute (not
    called) and its name, loaded as ``xla-cost step`` loads a step (`load_attribute`)."""
    from xla_cost.step.loading import load_attribute

    attribute = spec.rpartition(":")[2]
    target = load_attribute(spec, "MODEL", "MODEL as a zoo name, FILE.py:attribute or an importable "
                            "package.module:attribute", example="mypkg.nets:MLP (or nets.py:MLP)")
    return target, attribute


def _arguments(target: Any) -> tuple[str, ...] | None:
    """The keyword arguments a Module class or factory takes (None: any, ``**kwargs``)."""
    if inspect.isclass(target) and dataclasses.is_dataclass(target):  # a Linen module class
        return tuple(f.name for f in dataclasses.fields(target) if f.init and f.name not in ("parent", "name"))
    try:
        signature = inspect.signature(target.__init__ if inspect.isclass(target) else target)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    return tuple(n for n, p in signature.parameters.items()
                 if n not in ("self", "rngs") and p.kind is not inspect.Parameter.VAR_POSITIONAL)


def load_custom(spec: str, config: Mapping[str, Any], dtype: str = "float32") -> tuple[Any, str, bool]:
    """``package.module:attribute`` (or ``FILE.py:attribute``) to a module instance.

    The attribute may be a Linen or NNX module instance (then ``config`` must be
    empty), a module class or a factory function called with ``config``. NNX
    classes are built abstractly (`flax.nnx.eval_shape`). Where the class or
    factory takes ``dtype`` and ``dtype`` is not float32, it is passed.

    Returns:
      (module, its name, whether it was built to compute in ``dtype``).
    """
    target, attribute = _custom_target(spec)
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


_KINDS: dict[str, tuple[tuple[type, ...], str, Callable[[str], Any]]] = {
    "bool": ((bool,), r"(?i)true|false", lambda t: t.lower() == "true"),
    "int": ((int,), r"[+-]?\d+", int),
    "float": ((int, float), r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", float),
}
"""Per field type of a zoo setting: the values it takes, and text that reads as one (and how)."""


def _no_input_shape() -> InputError:
    return InputError("--input-shape for a custom model (input_shape= in Python), and --input-dtype for inputs "
                      "that are not --dtype's floats (input_dtype=)", "no --input-shape",
                      "Add e.g. --input-shape 8,224,224,3 (input_shape=(8, 224, 224, 3)), or for token ids "
                      "--input-shape 8,512 --input-dtype int32 (input_dtype='int32').")


def _module_object(model: Any, config: Mapping[str, Any]) -> tuple[Any, str, bool]:
    """A module object given as the model: ``(model, its class name, False)``."""
    import flax.linen as nn
    from flax import nnx

    name = type(model).__name__
    if not isinstance(model, (nn.Module, nnx.Module)):
        raise InputError("a model as a zoo name, FILE.py:attribute, package.module:attribute or a Linen or NNX "
                         "module", f"an instance of {name}", "Pass e.g. MLP(), 'nets.py:MLP' or 'mypkg.nets:MLP'.")
    if config:
        raise InputError("config only with a zoo name or a Module class", f"config with an instance of {name}",
                         "Build the module with those arguments yourself.")
    return model, name, False


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One analysis, by name: what `xla_cost.sweep` runs and `xla_cost.compiled.store` keys.

    Attributes:
      model: a zoo name (any spelling `xla_cost.zoo.get_spec` accepts; stored
        under its canonical name), ``package.module:attribute`` or
        ``FILE.py:attribute``, or a Linen
        or NNX module object (with ``input_shape``; such a run has no name
        to store it under, `xla_cost.analyze` caches it by its description).
      batch_size: the leading axis of the inputs.
      config: the model's keyword arguments (``{"depth": 10}``).
      optimizer: a name in `xla_cost.OPTIMIZERS` (default
        `xla_cost.choices.DEFAULT_OPTIMIZER`: adam).
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
      target: the device every program is compiled for, by its own compiler
        (`xla_cost.timemodel.devices.target`: ``h100``, ``tpu-v5e:2x2``; the
        mesh is laid over its devices); part of the stored result's key, so a
        target's results are kept apart from the default backend's. None: the
        default backend.
      unfused: the phases compiled with XLA's fusion passes off, each
        operation a kernel of its own, as an eager framework launches them
        (`xla_cost.analyze`'s ``unfused``; only with a target). Empty: none.
      loss: a loss known by name (`xla_cost.LOSSES`: ``one-hot``, MaxText's);
        None: the default (`xla_cost.softmax_cross_entropy`).
    """

    model: Any
    batch_size: int = 1
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    optimizer: str = DEFAULT_OPTIMIZER
    dtype: str = "float32"
    counter: str = "xla"
    per_layer: bool = False
    depth: int | None = None
    input_shape: tuple[int, ...] | None = None
    input_dtype: str | None = None
    exact_train_step: bool = False
    mesh: Mapping[str, int] = dataclasses.field(default_factory=dict)
    target: str | None = None
    unfused: tuple[str, ...] = ()
    loss: str | None = None

    @property
    def custom(self) -> bool:
        """Whether the model is ``FILE.py:attribute``, ``package.module:attribute`` or an
        object rather than a zoo name."""
        return not isinstance(self.model, str) or ":" in self.model

    @property
    def name(self) -> str:
        """The model as results name it: the zoo name, ``FILE.py:attribute`` or ``package.module:attribute``
        as given, or a module object's class name."""
        return self.model if isinstance(self.model, str) else type(self.model).__name__

    def check_arguments(self) -> None:
        """Refuses a model argument (a ``--set`` key) the model does not take, before anything runs.

        Raises:
          InputError: an unknown zoo name or argument; a custom model that does not import.
        """
        if not self.config:
            return
        if not self.custom:
            from xla_cost import zoo  # the zoo (jax, flax) loads only when a model is checked

            spec = zoo.get_spec(self.model)
            accepted: tuple[str, ...] | None = tuple(spec.defaults)
            name = spec.name
        elif isinstance(self.model, str):
            target, name = _custom_target(self.model)
            accepted = _arguments(target) if inspect.isclass(target) or inspect.isroutine(target) else ()
        else:
            accepted, name = (), self.name
        unknown = [key for key in self.config if accepted is not None and key not in accepted]
        if unknown:
            raise InputError(f"a {name} argument ({', '.join(accepted or ()) or 'none'})", repr(unknown[0]),
                             "Use --set KEY=VALUE with one of those keys.")

    def checked_settings(self) -> RunConfig:
        """This configuration with each zoo setting read by its field's type
        (text ``"1"``, as ``--set depth=1,x`` gives it, is 1 for an int field) and
        checked against its range (``depth=-1``, where DeeperConvNet's depth is
        at least 0), before anything runs: the module is built as the run builds
        it (its fields checked, no parameters made). A custom model's settings
        are its own to check; it is returned as it is.

        Raises:
          InputError: a setting not of its field's type or out of its range.
        """
        if self.custom or (not self.config and self.dtype != FLOAT8):  # float8: the family must take it
            return self
        from xla_cost import zoo  # the zoo (jax, flax) loads only when a model is checked

        spec, typed = zoo.get_spec(self.model), {}
        for key, value in self.config.items():
            default = spec.defaults[key]
            kind = type(default).__name__
            if kind in _KINDS:
                types, pattern, read = _KINDS[kind]
                if isinstance(value, str) and re.fullmatch(pattern, value.strip()):
                    value = read(value.strip())
                elif isinstance(value, bool) != (kind == "bool") or not isinstance(value, types):
                    raise InputError(f"{key} (a {spec.name} setting) as {'an' if kind == 'int' else 'a'} {kind}",
                                     repr(value), f"Use e.g. --set {key}={default!r}, the field's default.")
            typed[key] = value
        zoo.build_model(spec.name, dtype=self.dtype, **typed)  # its range: depth=-1 refused here, not a failed row
        return dataclasses.replace(self, config=typed)

    def canonical(self) -> RunConfig:
        """The same configuration with the zoo's canonical model name and the
        compile target's canonical name (errors on a typo)."""
        run = self
        if self.target is not None:
            from xla_cost.timemodel import devices  # the registry: light, no jax

            run = dataclasses.replace(run, target=devices.target(self.target).name)
        if run.custom:
            return run
        from xla_cost import zoo  # the zoo (jax, flax) loads only when a model is built

        return dataclasses.replace(run, model=zoo.get_spec(run.model).name)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, keys in a fixed order (the store hashes them)."""
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        data["model"] = self.model if isinstance(self.model, str) else f"<{self.name} object at {id(self.model):#x}>"
        data["config"] = {k: self.config[k] for k in sorted(self.config)}
        data["input_shape"] = list(self.input_shape) if self.input_shape else None
        if self.mesh:
            data["mesh"] = dict(self.mesh)
        else:  # one device: the keys of results stored before meshes existed
            data.pop("mesh")
        if self.target is None:  # the default backend: the keys of results stored before targets existed
            data.pop("target")
        if self.unfused:
            data["unfused"] = list(self.unfused)
        else:  # XLA's fused programs: the keys of results stored before unfused programs existed
            data.pop("unfused")
        if self.loss is None:  # the default loss: the keys of results stored before named losses existed
            data.pop("loss")
        return data

    def label(self) -> str:
        """A short line for a progress bar: ``resnet50 b32 adam float32 depth=3``."""
        parts = [self.name, f"b{self.batch_size}", self.optimizer, self.dtype]
        parts += [f"{k}={v}" for k, v in sorted(self.config.items())]
        if self.counter != "xla":
            parts.append(f"counter={self.counter}")
        if self.mesh:
            parts.append("mesh=" + ",".join(f"{k}={v}" for k, v in self.mesh.items()))
        if self.target is not None:
            parts.append(f"target={self.target}")
        if self.unfused:
            parts.append("unfused=" + ",".join(self.unfused))
        if self.loss is not None:
            parts.append(f"loss={self.loss}")
        return " ".join(parts)

    def build(self) -> tuple[Any, Any, str, str | None, list[str]]:
        """The model, its abstract inputs, its name, the dtype to record (None:
        read it from the model) and notes about how it was built."""
        import jax

        config = dict(self.config)
        notes: list[str] = []
        dtype: str | None = self.dtype
        if self.custom:
            model, name, cast = (load_custom(self.model, config, self.dtype) if isinstance(self.model, str)
                                 else _module_object(self.model, config))
            inputs = jax.ShapeDtypeStruct(*self.input_spec())
            if not cast:  # built without --dtype (float32 is never passed): it computes in its own dtype
                dtype = None  # the report reads the dtype the model computes in, as analyze does
            if self.dtype != "float32" and not cast:
                cast_inputs = (f"only the inputs were cast (to {inputs.dtype})" if self.input_dtype is None
                               else f"nothing was cast (the inputs are {inputs.dtype}, --input-dtype)")
                notes.append(
                    f"--dtype {self.dtype}: {cast_inputs}; {name} is not a class or "
                    "factory with a dtype argument, so its layers compute in their own dtype "
                    "(see dtype); pass the model's own dtype option with --set to change that"
                )
            return model, inputs, name, dtype, notes
        from xla_cost import zoo  # the zoo (jax, flax) loads only when a model is built

        name = zoo.get_spec(self.model).name
        model = zoo.build_model(name, dtype=self.dtype, **config)
        if self.dtype == FLOAT8:
            dtype = FLOAT8_ACTIVATIONS
            notes.append(
                f"--dtype float8: the projections' and MLPs' matrix products in FP8 (float8_e4m3fn inputs and "
                f"weights, float8_e5m2 gradients, current scaling, float32 accumulation), each counted as the "
                f"{FLOAT8_ACTIVATIONS} product; the scaling (abs, amax, divide, clip, converts, rescale) is "
                f"elementwise FLOP beside them, more than conversions alone; the attention's softmax products, the "
                f"head and the rest in {FLOAT8_ACTIVATIONS}, the dtype recorded; priced at the device's float8 peak "
                f"(the FP8 products' FLOP, PhaseCosts.float8_flops, of a step priced from its totals; a target's FP8 "
                f"kernels), the other products at its {FLOAT8_ACTIVATIONS} one"
            )
        return model, jax.ShapeDtypeStruct(*self.input_spec()), name, dtype, notes

    def input_spec(self) -> tuple[tuple[int, ...], Any]:
        """The inputs' shape (batch first) and dtype, without building the model.

        Raises:
          InputError: a custom model without ``input_shape``.
        """
        if self.custom:
            if not self.input_shape:
                raise _no_input_shape()
            return (self.batch_size, *self.input_shape[1:]), _input_dtype(self.input_dtype or self.dtype)
        from xla_cost import zoo  # the zoo (jax, flax) loads only when a model is built

        inputs = zoo.example_inputs(self.model, self.batch_size, dtype=self.dtype, **dict(self.config))
        shape = (self.batch_size, *self.input_shape[1:]) if self.input_shape else tuple(inputs.shape)
        return shape, inputs.dtype

    def sequence_length(self) -> int | None:
        """Positions per sample of a model whose inputs are token ids (integers
        of shape ``(batch, positions)``), else None (images, features)."""
        import jax.numpy as jnp

        shape, dtype = self.input_spec()
        if len(shape) != 2 or not jnp.issubdtype(dtype, jnp.integer):
            return None
        return int(shape[1])

    def run(self, **options: Any) -> Any:
        """Builds the model and analyses it: a `xla_cost.Report`.

        Args:
          **options: further `xla_cost.analyze` keywords (``timed``,
            ``call_kwargs``, ``compilation_cache``, ...).
        """
        from xla_cost.analysis.pipeline import analyze  # jax loads only when a run runs
        from xla_cost.step.optimizers import resolve_loss  # loads jax and optax, as analyze does

        model, inputs, name, dtype, notes = self.build()
        report = analyze(
            model, inputs, optimizer=self.optimizer, per_layer=self.per_layer or self.depth is not None,
            depth=self.depth, counter=self.counter, name=name, config=dict(self.config),
            dtype=dtype, exact_train_step=self.exact_train_step,
            **({"mesh": dict(self.mesh)} if self.mesh else {}),
            **{**({"target": self.target} if self.target is not None else {}),
               **({"unfused": tuple(self.unfused)} if self.unfused else {}),
               **({"loss": resolve_loss(self.loss)} if self.loss is not None else {}), **options},
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
