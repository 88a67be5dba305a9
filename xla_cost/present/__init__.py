"""How results read: number formats, terminal tables, markdown, the output formats, the figure style.

`units` formats raw numbers (the one place units and digits are chosen),
`text` lays out terminal tables that fit a width, `markdown` writes pipe
tables, `formats` picks one of the
output formats every result renders in, `document` gives a result those
formats from its data, `figures` is the one matplotlib style, `files` writes
a result to a path (atomically, or in place for a device or a pipe). Presentation
only: nothing here computes a figure. It imports the foundation
(`xla_cost.errors`) and nothing else of xla_cost; pandas, rich and matplotlib
load inside the functions that draw.
"""
