"""Runs by name: analyses of zoo (or ``package.module:attr``) models at given configurations.

`configs` holds `RunConfig` (one analysis, by name, as the store keys it);
`sweeps` runs every combination of a grid (`sweep_runners`: in worker
processes or on Dask); `fit` finds the largest batch that fits a device;
`scaling` prices sharded steps on many devices (curves and training-run
estimates; `priced` holds their results). It imports every
layer below it (`analysis` and the zoo included); not `study` or `cli`.
"""
