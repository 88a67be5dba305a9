"""Counting jaxprs: FLOP, transcendentals and bytes per equation, per layer and per pass.

`registry` holds the cost type and the rule registry; `rules` and
`random_rules` the per-primitive rules (`attention`: fused attention's
convention, which the compiled programs' reader prices its custom calls by too); `interpret` walks a jaxpr (loops
multiplied out, branches, calls) and counts every equation; `attribution`
is the one mapper from a name stack or an HLO ``op_name`` to a layer and a
pass, and groups counts into per-layer rows (`layers`); `hoisted` finds the
forward's loop invariants a gradient program runs once outside its loop. It imports `step`
and the foundation; nothing here compiles.
"""
