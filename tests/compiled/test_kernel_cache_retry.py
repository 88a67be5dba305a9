"""A GPU target's compile under XLA's kernel cache when XLA refuses one of the cache's
options (issue 49): `xla_cost.compiled.kernel_cache.compile_reusing`.

The compiles here are stand-ins that record the options they are given and refuse
an option the way XLA does ("No such compile option: '...'"); nothing is compiled.
"""

from __future__ import annotations

from typing import Any

import pytest

from xla_cost.compiled import kernel_cache, targets
from xla_cost.timemodel import devices


def _refusing(name: str, asked: list[dict[str, Any]]):
    def compile_with(options):
        asked.append(dict(options or {}))
        if name in asked[-1]:
            raise RuntimeError(f"INVALID_ARGUMENT: No such compile option: '{name}'")
        return "compiled"
    return compile_with


def test_an_xla_without_the_cache_file_option_compiles_without_any_of_the_caches_options(tmp_path):
    # an XLA that has no kernel cache at all: the compile is done again with the caller's options only,
    # none of the cache's (its other options only serve the cache)
    reuse = devices.target("h100").kernel_cache_options(str(tmp_path))
    assert targets.KERNEL_CACHE_OPTION in reuse and len(reuse) > 1
    asked: list[dict[str, Any]] = []
    mine = {"xla_gpu_enable_triton_gemm": False}
    assert kernel_cache.compile_reusing(_refusing(targets.KERNEL_CACHE_OPTION, asked), mine, reuse) == "compiled"
    assert asked[0] == {**mine, **reuse}  # tried under the cache first
    assert asked[-1] == mine  # then without anything of it
    assert len(asked) == 2


@pytest.mark.parametrize("given", [None, {}])
def test_without_a_cache_the_callers_options_are_compiled_as_given(given):
    asked: list[dict[str, Any]] = []
    assert kernel_cache.compile_reusing(_refusing("none", asked), {"a": 1}, given) == "compiled"
    assert asked == [{"a": 1}]
