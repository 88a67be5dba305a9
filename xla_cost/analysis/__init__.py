"""`analyze` and what it returns: a step's costs from its jaxprs and its compiled programs.

`pipeline` is `xla_cost.analyze` as named stages over the option objects
(`options`); `programs` traces, counts and compiles each phase; `costs` picks
each phase's best figures (loops corrected, library calls, sharded); `cache`
answers from the results store; `report` holds the result types (`Report`,
`PhaseCosts`) and their renderings; `memory` breaks a step's memory down;
`timing` runs and times it; `user_step` is `xla_cost.analyze_step` (a user's
own step, split into parts) and `step_checks` its notes and step checker;
`diff` compares two reports. It imports `present`, `step`, `count`,
`compiled`, `parallel` and the foundation.
"""
