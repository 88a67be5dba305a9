"""Compiled programs: the one place that lowers, compiles and reads XLA's analyses, and the caches.

`lowering` refuses in one line a kernel the backend cannot lower (a Pallas
kernel on the CPU); `xla` compiles a phase and normalises ``cost_analysis()`` and
``memory_analysis()`` across backends and jax versions (unknown is None, never
0), and turns JAX's persistent compilation cache on; `compiler_log` holds back
what the compiler writes while it compiles and reads it; `hlo` reads a compiled
module's text (computations, instructions, how often each runs), `shapes` its
shapes and sizes, `reads` what an instruction reads and writes of them;
`collectives` lists its collectives; `liveness` replays its schedule;
`kernels` lists its kernels and counts the FLOP its library calls do (and a
target's cost analysis leaves out); `printed` reads a program's text as its
compiler printed it where jaxlib cannot read the program back (libtpu's
SparseCore offloads); `targets` names a device to compile for
when it is not the one at hand (jax's deviceless topologies), and `kernel_cache`
keeps a GPU target's compiled kernels for its later compiles; `store` is the
SQLite store of finished analyses. It imports the foundation only.
"""
