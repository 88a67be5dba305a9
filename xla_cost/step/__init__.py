"""What is analysed: one training step made abstract.

`phases` declares the phases (forward, backward, grad, update, train_step);
`workload` turns a model, inputs, a loss and an optimizer into the phases'
pure functions and abstract arguments (`build_workload`), through `adapters`
(Linen modules, NNX modules, apply functions; `nnx_scopes` names NNX modules'
operations), `checks` (what inputs, outputs and losses must be, with one-line
errors), `optimizers` (the optimizers known by name, the default loss),
`remat` (jax.checkpoint policies) and `trees` (shapes and bytes of abstract
pytrees). It imports the foundation (`xla_cost.errors`, `xla_cost.choices`,
`xla_cost.options`) and nothing else of xla_cost.
"""
