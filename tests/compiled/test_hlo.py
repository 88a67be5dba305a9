"""xla_cost.compiled.hlo: collectives, their groups and loop multiplicities from HLO text."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xla_cost.compiled import hlo, work
from xla_cost.compiled.collectives import HloCollective, group_axes, parse_collectives

# ---------------------------------------------------------------------------
# Synthetic HLO

_ADD = """\
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}
"""


def _module(body: str, *, partitions: int = 8, replicas: int = 1, before: str = "") -> str:
    """An HLO module whose ENTRY holds ``body`` (instruction lines) on parameter %p."""
    header = f"HloModule test, is_scheduled=true, num_partitions={partitions}"
    if replicas != 1:
        header += f", replica_count={replicas}"
    return (
        f"{header}\n\n{_ADD}\n{before}\n"
        "ENTRY %main (p: f32[64,32]) -> f32[] {\n"
        "  %p = f32[64,32]{1,0} parameter(0)\n"
        f"{body}\n"
        "  ROOT %c = f32[] constant(0)\n"
        "}\n"
    )


def _one(body: str, **kwargs) -> HloCollective:
    found, notes = parse_collectives(_module(body, **kwargs))
    assert len(found) == 1, (found, notes)
    return found[0]


def _groups(replica_groups: str, partitions: int = 8) -> tuple[tuple[int, ...], ...] | None:
    line = (
        f"  %ar = f32[64,32]{{1,0}} all-reduce(%p), channel_id=1, replica_groups={replica_groups}, "
        "use_global_device_ids=true, to_apply=%add"
    )
    return _one(line, partitions=partitions).groups


def test_all_reduce_line_fields():
    line = (
        "  %all-reduce.4 = f32[256,256]{1,0} all-reduce(%p), channel_id=1, "
        "replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%add, "
        'metadata={op_name="jit(f)/transpose(jvp())/h_0/attn/dot_general" stack_frame_id=6}'
    )
    c = _one(line)
    assert c == HloCollective(
        kind="all-reduce", name="all-reduce.4", computation="main",
        op_name="jit(f)/transpose(jvp())/h_0/attn/dot_general", dtype="f32",
        result_bytes=256 * 256 * 4, bytes=256 * 256 * 4,
        groups=((0, 1, 2, 3), (4, 5, 6, 7)), group_size=4, executions=1, asynchronous=False,
    )


def test_names_without_percent_root_and_tiled_layout():
    text = """HloModule m, num_partitions=4

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main {
  p = f32[8,128]{1,0:T(8,128)} parameter(0)
  ROOT ar = f32[8,128]{1,0:T(8,128)} all-reduce(p), replica_groups={{0,1,2,3}}, to_apply=add
}
"""
    (c,), notes = parse_collectives(text)
    assert (c.name, c.computation, c.bytes, c.group_size, c.executions) == ("ar", "main", 8 * 128 * 4, 4, 1)
    assert c.op_name == "" and notes == ()


# --- replica_groups formats -------------------------------------------------


def test_explicit_groups():
    assert _groups("{{0,2,4,6},{1,3,5,7}}") == ((0, 2, 4, 6), (1, 3, 5, 7))


def test_empty_groups_mean_all_devices_of_the_module():
    assert _groups("{}", partitions=8) == (tuple(range(8)),)
    line = "  %ar = f32[4]{0} all-reduce(%p), replica_groups={}, to_apply=%add"
    # replica_count x num_partitions devices in all
    assert _one(line, partitions=2, replicas=3).groups == (tuple(range(6)),)


def test_iota_groups():
    # iota(8) reshaped to [2,4]: two groups of four
    assert _groups("[2,4]<=[8]") == ((0, 1, 2, 3), (4, 5, 6, 7))


def test_iota_groups_with_transpose():
    # iota(8) as [2,4], transposed: 0,4,1,5,2,6,3,7; then four groups of two
    assert _groups("[4,2]<=[2,4]T(1,0)") == ((0, 4), (1, 5), (2, 6), (3, 7))
    # [2,2,2] transposed by (2,1,0): id = 4a + 2b + c read with c major
    assert _groups("[2,4]<=[2,2,2]T(2,1,0)") == ((0, 4, 2, 6), (1, 5, 3, 7))


def test_mesh_groups():
    # the devices agreeing on axis_1 and axis_2 (axis_1 has size 1)
    assert _groups("mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_0'}") == (
        (0, 4), (1, 5), (2, 6), (3, 7))
    assert _groups("mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_2'}") == (
        (0, 1, 2, 3), (4, 5, 6, 7))


def test_mesh_groups_with_device_ids():
    # devices in order iota(8) as [2,4] transposed: 0,4,1,5,2,6,3,7; as a
    # [4,1,2] mesh, device (a, 0, c) = 4c + a: axis_0 groups the first four
    assert _groups("mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_0'}") == (
        (0, 1, 2, 3), (4, 5, 6, 7))
    assert _groups("mesh['axis_0'=4,'axis_1'=2], device_ids=([2,4]T(1,0)) {'axis_1'}") == (
        (0, 4), (1, 5), (2, 6), (3, 7))


def test_mesh_groups_over_several_axes_and_none():
    assert _groups("mesh['x'=2,'y'=2,'z'=2] {'x','z'}") == ((0, 1, 4, 5), (2, 3, 6, 7))
    # no axis: every device alone
    assert _groups("mesh['x'=2,'y'=4] {}") == tuple((i,) for i in range(8))


def test_mesh_sub_axes():
    # 'a':(1)2 is the major half of a: a = 4 * sub + rest
    assert _groups("mesh['a'=8] {'a':(1)2}") == ((0, 4), (1, 5), (2, 6), (3, 7))
    # 'a':(2)2 is the middle factor of a = 4x + 2y + z
    assert _groups("mesh['a'=8] {'a':(2)2}") == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert _groups("mesh['a'=8] {'a':(1)2,'a':(4)2}") == ((0, 1, 4, 5), (2, 3, 6, 7))


@pytest.mark.parametrize("form", [
    "maximal_mesh[device_id=0] {}",
    "mesh['x'=2,'y'=4], device_ids=(0,2,1,3,4,6,5,7) {'x'}",
    "mesh['x'=2,'y'=4] {'w'}",
    "[2,4]<=[4]",
])
def test_unknown_groups_are_none_with_a_note(form):
    line = f"  %ar = f32[4]{{0}} all-reduce(%p), replica_groups={form}, to_apply=%add"
    (c,), notes = parse_collectives(_module(line))
    assert c.groups is None and c.group_size is None
    assert any("replica_groups" in note and "ar" in note for note in notes), notes


def test_collective_permute_pairs():
    line = (
        "  %cp = f32[8,8]{1,0} collective-permute(%p), channel_id=1, "
        "source_target_pairs={{0,1},{1,2},{2,3},{3,0}}"
    )
    c = _one(line)
    assert (c.kind, c.groups, c.group_size, c.bytes) == (
        "collective-permute", ((0, 1), (1, 2), (2, 3), (3, 0)), 2, 8 * 8 * 4)


# --- sizes -----------------------------------------------------------------


@pytest.mark.parametrize("dtype, nbytes", [
    ("pred", 1), ("s8", 1), ("u8", 1), ("f8e4m3fn", 1), ("f8e5m2", 1),
    ("s16", 2), ("u16", 2), ("f16", 2), ("bf16", 2),
    ("s32", 4), ("u32", 4), ("f32", 4),
    ("s64", 8), ("u64", 8), ("f64", 8), ("c64", 8), ("c128", 16),
])
def test_element_sizes(dtype, nbytes):
    line = f"  %ag = {dtype}[3,5]{{1,0}} all-gather(%p), replica_groups={{}}, dimensions={{0}}"
    c = _one(line)
    assert (c.dtype, c.result_bytes, c.bytes) == (dtype, 15 * nbytes, 15 * nbytes)


def test_four_bit_types_round_up():
    c = _one("  %ag = s4[3,5]{1,0} all-gather(%p), replica_groups={}, dimensions={0}")
    assert c.result_bytes == math.ceil(15 / 2)
    assert _one("  %ag = u4[4]{0} all-gather(%p), replica_groups={}, dimensions={0}").bytes == 2


def test_scalar_and_tuple_results():
    assert _one("  %ar = f32[] all-reduce(%p), replica_groups={}, to_apply=%add").bytes == 4
    line = (
        "  %ar = (f32[], f32[128,256]{1,0}, bf16[256,128]{1,0}) all-reduce(%p, %p, %p), "
        "replica_groups={}, to_apply=%add"
    )
    c = _one(line)
    assert c.dtype == "f32,bf16"
    assert c.result_bytes == c.bytes == 4 + 128 * 256 * 4 + 256 * 128 * 2


def test_tuple_with_index_comments():
    shapes = ", ".join(["f32[1,8]{1,0}"] * 5) + ", /*index=5*/" + ", ".join(["f32[1,8]{1,0}"] * 3)
    c = _one(f"  %a2a = ({shapes}) all-to-all(%p), channel_id=1, replica_groups={{{{0,1,2,3,4,5,6,7}}}}")
    assert (c.kind, c.bytes, c.group_size) == ("all-to-all", 8 * 8 * 4, 8)


def test_reduce_scatter_bytes_are_result_times_group_size():
    line = (
        "  %rs = f32[16,32]{1,0} reduce-scatter(%p), channel_id=1, replica_groups=[2,4]<=[8], "
        "use_global_device_ids=true, dimensions={0}, to_apply=%add"
    )
    c = _one(line)
    assert c.result_bytes == 16 * 32 * 4
    assert c.bytes == 16 * 32 * 4 * 4  # the [64,32] buffer before scattering over 4 devices


# --- async pairs -----------------------------------------------------------


def test_async_all_gather_pair_listed_once_with_its_output():
    body = (
        "  %ags = (f32[8,32]{1,0}, f32[64,32]{1,0}) all-gather-start(%p), channel_id=1, "
        'replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, metadata={op_name="jit(f)/gather"}\n'
        "  %agd = f32[64,32]{1,0} all-gather-done(%ags)"
    )
    c = _one(body)
    assert (c.kind, c.name, c.asynchronous, c.op_name) == ("all-gather", "ags", True, "jit(f)/gather")
    assert c.result_bytes == c.bytes == 64 * 32 * 4


def test_async_all_reduce_and_permute_pairs():
    body = (
        "  %ars = f32[1024]{0} all-reduce-start(%p), channel_id=1, replica_groups={{0,1}}, to_apply=%add\n"
        "  %ard = f32[1024]{0} all-reduce-done(%ars)\n"
        "  %cps = (f32[16]{0}, f32[16]{0}, u32[], u32[]) collective-permute-start(%p), channel_id=2, "
        "source_target_pairs={{0,1},{1,0}}\n"
        "  %cpd = f32[16]{0} collective-permute-done(%cps)"
    )
    found, _ = parse_collectives(_module(body))
    assert [(c.kind, c.name, c.asynchronous, c.bytes, c.group_size) for c in found] == [
        ("all-reduce", "ars", True, 1024 * 4, 2),
        ("collective-permute", "cps", True, 16 * 4, 2),
    ]


def test_async_start_without_done_uses_the_start_result():
    body = (
        "  %rss = ((f32[64,32]{1,0}), f32[8,32]{1,0}, s32[]) reduce-scatter-start(%p), "
        "replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, to_apply=%add"
    )
    c = _one(body)
    assert (c.kind, c.asynchronous) == ("reduce-scatter", True)
    assert (c.result_bytes, c.bytes) == (8 * 32 * 4, 64 * 32 * 4)


def test_generic_async_start_wrapping_a_collective():
    wrapped = """\
%async_computation (param: f32[64,32]) -> f32[64,32] {
  %param = f32[64,32]{1,0} parameter(0)
  ROOT %a2a = f32[64,32]{1,0} all-to-all(%param), channel_id=3, replica_groups=[2,4]<=[8], \
dimensions={0}, metadata={op_name="jit(f)/a2a"}
}
"""
    body = (
        "  %as = ((f32[64,32]{1,0}), f32[64,32]{1,0}, s32[]) async-start(%p), calls=%async_computation\n"
        "  %ad = f32[64,32]{1,0} async-done(%as), calls=%async_computation"
    )
    found, notes = parse_collectives(_module(body, before=wrapped))
    assert len(found) == 1, found
    c = found[0]
    assert (c.kind, c.name, c.computation, c.asynchronous) == ("all-to-all", "as", "main", True)
    assert (c.bytes, c.groups, c.op_name, c.executions) == (
        64 * 32 * 4, ((0, 1, 2, 3), (4, 5, 6, 7)), "jit(f)/a2a", 1)
    assert notes == ()


# --- loops -----------------------------------------------------------------


def _while(name: str, cond: str, body: str, trip: int | None, state: str = "(s32[], f32[64,32]{1,0})") -> str:
    config = "" if trip is None else (
        ', backend_config={"known_induction_variable":{"tuple_index":"0"},'
        f'"known_trip_count":{{"n":"{trip}"}}}}'
    )
    return (f"  %{name} = {state} while(%t), condition=%{cond}, body=%{body}, "
            f'metadata={{op_name="jit(f)/{name}"}}{config}')


def _loop_computations(inner_trip: int | None, *, inner_body_also_called: bool = False) -> str:
    """Loop ``outer`` (the caller's) holds loop ``inner``; optionally a fusion calls
    the inner loop's body once more per outer iteration."""
    cond = """\
%{name} (s: (s32[], f32[64,32])) -> pred[] {{
  %s = (s32[], f32[64,32]{{1,0}}) parameter(0)
  ROOT %lt = pred[] constant(true)
}}
"""
    inner = """\
%inner_body (s: (s32[], f32[64,32])) -> (s32[], f32[64,32]) {
  %s = (s32[], f32[64,32]{1,0}) parameter(0)
  %x = f32[64,32]{1,0} get-tuple-element(%s), index=1
  %ar.in = f32[64,32]{1,0} all-reduce(%x), replica_groups={}, to_apply=%add
  %i = s32[] get-tuple-element(%s), index=0
  ROOT %r = (s32[], f32[64,32]{1,0}) tuple(%i, %ar.in)
}
"""
    root = (
        "  ROOT %f = (s32[], f32[64,32]{1,0}) fusion(%inner), kind=kLoop, calls=%inner_body"
        if inner_body_also_called else "  ROOT %f = (s32[], f32[64,32]{1,0}) copy(%inner)"
    )
    outer = f"""\
%outer_body (s: (s32[], f32[64,32])) -> (s32[], f32[64,32]) {{
  %s = (s32[], f32[64,32]{{1,0}}) parameter(0)
  %x = f32[64,32]{{1,0}} get-tuple-element(%s), index=1
  %ag.out = f32[64,32]{{1,0}} all-gather(%x), replica_groups={{}}, dimensions={{0}}
  %t = (s32[], f32[64,32]{{1,0}}) tuple(%s, %ag.out)
{_while("inner", "inner_cond", "inner_body", inner_trip)}
{root}
}}
"""
    return cond.format(name="inner_cond") + cond.format(name="outer_cond") + inner + outer


_OUTER = "  %t = (s32[], f32[64,32]{1,0}) tuple(%p)\n" + _while("outer", "outer_cond", "outer_body", 3)


def test_nested_while_loops_multiply_trip_counts():
    found, notes = parse_collectives(_module(_OUTER, before=_loop_computations(inner_trip=5)))
    # all-gather: in the outer loop, 3 times; all-reduce: in the inner loop, 3 * 5 times
    assert {c.name: c.executions for c in found} == {"ag.out": 3, "ar.in": 3 * 5}
    assert {c.name: c.computation for c in found} == {"ag.out": "outer_body", "ar.in": "inner_body"}
    assert notes == ()
    # program order: the outer body runs before its inner loop's body
    assert [c.name for c in found] == ["ag.out", "ar.in"]


def test_executions_sum_over_call_paths():
    before = _loop_computations(inner_trip=5, inner_body_also_called=True)
    found, _ = parse_collectives(_module(_OUTER, before=before))
    # inner_body runs 5 times per outer iteration in the loop, and once more from the fusion
    assert {c.name: c.executions for c in found} == {"ag.out": 3, "ar.in": 3 * 5 + 3}


def test_scan_like_loop_in_entry():
    cond = (
        "%cond (s: (s32[], f32[64,32])) -> pred[] {\n"
        "  %s = (s32[], f32[64,32]{1,0}) parameter(0)\n"
        "  ROOT %lt = pred[] constant(true)\n}\n"
    )
    body_comp = (
        "%body (s: (s32[], f32[64,32])) -> (s32[], f32[64,32]) {\n"
        "  %s = (s32[], f32[64,32]{1,0}) parameter(0)\n"
        "  %x = f32[64,32]{1,0} get-tuple-element(%s), index=1\n"
        "  %ar = f32[64,32]{1,0} all-reduce(%x), replica_groups={}, to_apply=%add\n"
        "  ROOT %r = (s32[], f32[64,32]{1,0}) tuple(%s, %ar)\n}\n"
    )
    body = "  %t = (s32[], f32[64,32]{1,0}) tuple(%p)\n" + _while("loop", "cond", "body", 12)
    (c,), _ = parse_collectives(_module(body, before=cond + body_comp))
    assert (c.computation, c.executions) == ("body", 12)


def test_while_without_trip_count_gives_none_and_a_note():
    found, notes = parse_collectives(_module(_OUTER, before=_loop_computations(inner_trip=None)))
    runs = {c.name: c.executions for c in found}
    assert runs == {"ag.out": 3, "ar.in": None}
    assert any("inner" in note and "jit(f)/inner" in note and "trip count" in note for note in notes), notes


def test_conditional_branches_counted_once_with_a_note():
    branches = "".join(
        f"%{name} (x: f32[64,32]) -> f32[64,32] {{\n"
        "  %x = f32[64,32]{1,0} parameter(0)\n"
        f"  ROOT %ar.{name} = f32[64,32]{{1,0}} all-reduce(%x), replica_groups={{}}, to_apply=%add\n}}\n"
        for name in ("yes", "no")
    )
    body = (
        "  %b = s32[] constant(0)\n"
        "  %cond = f32[64,32]{1,0} conditional(%b, %p, %p), branch_computations={%yes, %no}, "
        'metadata={op_name="jit(f)/cond"}'
    )
    found, notes = parse_collectives(_module(body, before=branches))
    assert [(c.name, c.executions) for c in found] == [("ar.yes", 1), ("ar.no", 1)]
    assert any("conditional" in note and "jit(f)/cond" in note for note in notes), notes


def test_has_while_loop():
    assert hlo.has_while_loop(_module(_OUTER, before=_loop_computations(inner_trip=5)))
    assert not hlo.has_while_loop(_module("  %n = f32[] constant(1)"))


def test_round_trip_through_dict():
    c = _one("  %ar = f32[8]{0} all-reduce(%p), replica_groups={{0,1},{2,3}}, to_apply=%add", partitions=4)
    assert HloCollective.from_dict(c.to_dict()) == c
    assert c.total_bytes == 32


# --- group_axes ------------------------------------------------------------

_MESH = {"data": 2, "model": 4}


def test_group_axes():
    assert group_axes([[0, 1, 2, 3], [4, 5, 6, 7]], _MESH) == ("model",)
    assert group_axes([[0, 4], [1, 5], [2, 6], [3, 7]], _MESH) == ("data",)
    assert group_axes([list(range(8))], _MESH) == ("data", "model")
    assert group_axes([[i] for i in range(8)], _MESH) == ()
    assert group_axes([[0, 1], [2, 3], [4, 5], [6, 7]], _MESH) == ("model",)
    # device ids run from 0 to 2 * 4 - 1 = 7: the mesh's first and last are in it, one past either is not
    assert group_axes([[0, 7]], _MESH) == ("data", "model")
    for outside in ([[0, 8]], [[-1, 0]]):
        with pytest.raises(ValueError, match="outside a mesh of 8 devices"):
            group_axes(outside, _MESH)


# ---------------------------------------------------------------------------
# Real compiled programs (8 CPU devices: tests/conftest.py)

P = jax.sharding.PartitionSpec

_SHAPES = {"w1": (16, 32), "b1": (32,), "w2": (32, 8), "b2": (8,)}
_PARAM_BYTES = 4 * sum(math.prod(shape) for shape in _SHAPES.values())  # f32


def _mesh(shape: dict[str, int]):
    if jax.device_count() < 8:
        pytest.skip(f"needs 8 CPU devices (jax_num_cpu_devices=8 in conftest), has {jax.device_count()}")
    devices = np.array(jax.devices()[:8]).reshape(tuple(shape.values()))
    return jax.sharding.Mesh(devices, tuple(shape))


def _params():
    return {name: jax.ShapeDtypeStruct(shape, jnp.float32) for name, shape in _SHAPES.items()}


def _mlp_loss(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"][None, :])
    return jnp.mean((h @ params["w2"] + params["b2"][None, :]) ** 2)


def _compiled_text(fn, in_shardings, out_shardings, *args) -> str:
    jitted = jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings)
    return jitted.lower(*args).compile().as_text()


def test_data_parallel_gradient_all_reduces_the_parameters():
    mesh = _mesh({"data": 8})
    rep = jax.sharding.NamedSharding(mesh, P())
    params = _params()
    shard = jax.tree.map(lambda _: rep, params)
    x = jax.ShapeDtypeStruct((64, 16), jnp.float32)
    text = _compiled_text(jax.grad(_mlp_loss), (shard, jax.sharding.NamedSharding(mesh, P("data"))), shard,
                          params, x)
    found, notes = parse_collectives(text)
    assert found and notes == ()
    assert {c.kind for c in found} == {"all-reduce"}
    # every gradient summed over the 8 data-parallel devices once: 4 bytes x parameters
    assert sum(c.bytes * c.executions for c in found) == _PARAM_BYTES
    for c in found:
        assert c.groups == (tuple(range(8)),) and c.group_size == 8
        assert group_axes(c.groups, mesh.shape) == ("data",)
        assert c.op_name.startswith("jit(")


def test_scan_gradient_all_reduce_runs_once_per_layer():
    mesh = _mesh({"data": 8})
    layers, width = 4, 16

    def loss(ws, x):
        def layer(h, w):
            return jnp.tanh(h @ w), None

        h, _ = jax.lax.scan(layer, x, ws)
        return jnp.mean(h**2)

    rep = jax.sharding.NamedSharding(mesh, P())
    ws = jax.ShapeDtypeStruct((layers, width, width), jnp.float32)
    x = jax.ShapeDtypeStruct((64, width), jnp.float32)
    text = _compiled_text(jax.grad(loss), (rep, jax.sharding.NamedSharding(mesh, P("data"))), rep, ws, x)
    assert hlo.has_while_loop(text)
    found, notes = parse_collectives(text)
    assert notes == ()
    in_loop = [c for c in found if c.executions != 1]
    assert in_loop, found
    for c in in_loop:
        assert c.executions == layers  # the loop's trip count
        assert c.computation != "main" and "while" in c.op_name
        assert group_axes(c.groups, mesh.shape) == ("data",)
    # one layer's gradient per iteration: width x width f32, all layers in all
    assert sum(c.bytes * c.executions for c in found) == 4 * layers * width * width


def test_fsdp_gathers_full_parameters_over_model():
    mesh = _mesh({"data": 2, "model": 4})
    named = jax.sharding.NamedSharding
    params = _params()
    sharded = jax.tree.map(lambda _: named(mesh, P("model")), params)
    replicated = jax.tree.map(lambda _: named(mesh, P()), params)

    def loss(params, x):  # FSDP: gather each parameter where it is used
        return _mlp_loss(jax.lax.with_sharding_constraint(params, replicated), x)

    x = jax.ShapeDtypeStruct((64, 16), jnp.float32)
    text = _compiled_text(jax.grad(loss), (sharded, named(mesh, P("data"))), sharded, params, x)
    found, notes = parse_collectives(text)
    assert notes == ()
    gathers = [c for c in found if c.kind == "all-gather"]
    # every parameter gathered whole from its 4 shards over "model"
    assert sum(c.bytes for c in gathers) == _PARAM_BYTES
    for c in gathers:
        assert c.group_size == 4 and group_axes(c.groups, mesh.shape) == ("model",)
    # the gradients are summed over "data": reduce-scatter, or all-reduce + slice
    reductions = [c for c in found if c.kind in ("reduce-scatter", "all-reduce")]
    assert reductions
    assert "data" in set().union(*(group_axes(c.groups, mesh.shape) for c in reductions))
    # each gradient reduced whole once (the buffer before any scattering)
    assert sum(c.bytes * c.executions for c in reductions) == _PARAM_BYTES


def test_custom_call_targets_count_library_calls_not_annotations():
    text = "\n".join([
        'ENTRY %main {',
        '  %a = f32[4,5]{1,0} custom-call(f32[4,6]{1,0} %p, f32[6,5]{1,0} %w), custom_call_target="__cublas$gemm"',
        '  %b = f32[4,5]{1,0} custom-call(f32[4,6]{1,0} %p, f32[6,5]{1,0} %w), custom_call_target="__cublas$gemm"',
        '  %c = (f32[1,8,8,4]{3,2,1,0}, u8[0]{0}) custom-call(%x, %k), custom_call_target="__cudnn$convForward"',
        '  %s = f32[4,5]{1,0} custom-call(f32[4,5]{1,0} %a), custom_call_target="Sharding"',
        '  %m = f32[4,5]{1,0} multiply(%a, %b)',
        '}',
    ])
    assert hlo.custom_call_targets(text) == {"__cublas$gemm": 2, "__cudnn$convForward": 1}


def test_library_call_bytes_count_operands_and_results_of_library_calls():
    text = "\n".join([
        'HloModule m',
        '%body (s: (s32[], f32[4,6])) -> (s32[], f32[4,6]) {',
        '  %s = (s32[], f32[4,6]{1,0}) parameter(0)',
        '  %i = s32[] get-tuple-element(%s), index=0',
        '  %v = f32[4,6]{1,0} get-tuple-element(%s), index=1',
        '  %g = f32[4,6]{1,0} custom-call(%v, %w6), custom_call_target="__cublas$gemm"',
        '  ROOT %t = (s32[], f32[4,6]{1,0}) tuple(%i, %g)',
        '}',
        '%cond (s: (s32[], f32[4,6])) -> pred[] {',
        '  %s = (s32[], f32[4,6]{1,0}) parameter(0)',
        '  ROOT %c = pred[] constant(true)',
        '}',
        'ENTRY %main {',
        '  %p = f32[4,6]{1,0} parameter(0)',
        '  %w = f32[6,5]{1,0} parameter(1)',
        '  %x = f32[1,8,8,2]{3,2,1,0} parameter(2)',
        '  %k = f32[3,3,2,4]{3,2,1,0} parameter(3)',
        '  %a = f32[4,5]{1,0} custom-call(f32[4,6]{1,0} %p, f32[6,5]{1,0} %w), custom_call_target="__cublas$gemm"',
        '  %c = (f32[1,8,8,4]{3,2,1,0}, u8[1024]{0}) custom-call(%x, %k), custom_call_target="__cudnn$convForward"',
        '  %s = f32[4,5]{1,0} custom-call(f32[4,5]{1,0} %a), custom_call_target="Sharding"',
        '  %l = (s32[], f32[4,6]{1,0}) while(%init), condition=%cond, body=%body, '
        'backend_config={"known_trip_count":{"n":"3"}}',
        '  ROOT %m = f32[4,5]{1,0} multiply(%a, %a)',
        '}',
    ])
    found = hlo.library_call_bytes(text)
    # the gemm: p f32[4,6] and w f32[6,5] read, f32[4,5] written: (24 + 30 + 20) * 4 = 296
    # the convolution: x 1*8*8*2 and k 3*3*2*4 read, 1*8*8*4 written, its u8 scratch left
    # out: (128 + 72 + 256) * 4 = 1824; the sharding annotation is no library call
    # the gemm in the loop body reads a shape the text does not give (%w6): unknown bytes
    assert found.calls == 1 + 1 + 3  # the body's gemm runs 3 times
    assert found.bytes is None and found.unknown == ("g",)
    known = hlo.library_call_bytes(text.replace("%w6", "f32[6,6]{1,0} %w6"))
    # the body's gemm: (24 + 36 + 24) * 4 = 336 bytes, 3 iterations
    assert known.bytes == 296 + 1824 + 3 * 336 and known.unknown == ()
    assert hlo.library_call_bytes("ENTRY %main {\n  ROOT %p = f32[2]{0} parameter(0)\n}") == hlo.LibraryBytes(0, 0)


def test_unsized_conv_scratch_is_the_largest_convolution_left_without_a_workspace():
    text = "\n".join([
        'ENTRY %main {',
        '  %x = f32[2,8,8,2]{3,2,1,0} parameter(0)',
        '  %k = f32[3,3,2,4]{3,2,1,0} parameter(1)',
        '  %y = f32[2,8,8,4]{3,2,1,0} parameter(2)',
        '  %a = (f32[2,8,8,4]{3,2,1,0}, u8[0]{0}) custom-call(%x, %k), custom_call_target="__cudnn$convForward"',
        '  %b = (f32[3,3,2,4]{3,2,1,0}, u8[0]{0}) custom-call(%x, %y), custom_call_target="__cudnn$convBackwardFilter"',
        '  %c = (f32[2,8,8,4]{3,2,1,0}, u8[0]{0}) custom-call(f32[1,8,8,2]{3,2,1,0} %x1, %k), '
        'custom_call_target="__cudnn$convForward"',
        '  %d = (f32[2,8,8,4]{3,2,1,0}, u8[4096]{0}) custom-call(%x, %k), custom_call_target="__cudnn$convForward"',
        '  ROOT %g = (f32[2,8,8,4]{3,2,1,0}, u8[0]{0}) custom-call(%x, %k), custom_call_target="__cublas$gemm"',
        '}',
    ])
    # %a and %b read x (2*8*8*2 = 256 floats) and the kernel or y, and write the other:
    # 256 + 72 + 512 = 840 floats each; %c reads a smaller image (128); %d was given its
    # workspace (a device's compile); a gemm is no convolution
    assert hlo.unsized_conv_scratch(text) == 4 * (256 + 72 + 512)
    assert hlo.unsized_conv_scratch(text.replace("u8[0]", "u8[64]")) == 0
    assert hlo.unsized_conv_scratch("ENTRY %main {\n  ROOT %p = f32[2]{0} parameter(0)\n}") == 0


def test_a_fusion_that_leaves_an_operand_unread_or_crops_it_is_not_counted_whole():
    from xla_cost.compiled.reads import untouched_bytes

    text = "\n".join([
        'HloModule m',
        '%fused_add (x: f32[4,5], y: f32[4,5]) -> f32[4,5] {',
        '  %x = f32[4,5]{1,0} parameter(0)',
        '  %y = f32[4,5]{1,0} parameter(1)',
        '  ROOT %s = f32[4,5]{1,0} add(%x, %y)',
        '}',
        '%fused_unused (x: f32[4,5], y: f32[4,5]) -> f32[4,5] {',
        '  %x = f32[4,5]{1,0} parameter(0)',
        '  %y = f32[4,5]{1,0} parameter(1)',
        '  ROOT %e = f32[4,5]{1,0} exponential(%x)',
        '}',
        '%fused_crop (x: f32[4,6]) -> f32[4,5] {',
        '  %x = f32[4,6]{1,0} parameter(0)',
        '  %z = f32[] constant(0)',
        '  ROOT %c = f32[4,5]{1,0} pad(%x, %z), padding=0_0x0_-1',
        '}',
        'ENTRY %main {',
        '  %a = f32[4,5]{1,0} parameter(0)',
        '  %b = f32[4,5]{1,0} parameter(1)',
        '  %w = f32[4,6]{1,0} parameter(2)',
        '  %s = f32[4,5]{1,0} fusion(%a, %b), kind=kLoop, calls=%fused_add',
        '  %u = f32[4,5]{1,0} fusion(%a, %b), kind=kLoop, calls=%fused_unused',
        '  ROOT %c = f32[4,5]{1,0} fusion(%w), kind=kLoop, calls=%fused_crop',
        '}',
    ])
    module = hlo.parse_module(text)
    entry = module.computations[module.entry]
    shapes = {i.name: i.shape_text for i in entry.instructions}
    moved = {i.name: untouched_bytes(i, shapes, module.computations) for i in entry.instructions
             if i.opcode == "fusion"}
    # an add reads both operands whole; the second fusion never reads %b (4 x 5 floats, 80 bytes);
    # the pad drops the last of %w's 6 columns: 4 floats (16 bytes) unread
    assert moved == {"s": 0, "u": 80, "c": 16}


WORK_HLO = "\n".join([
    'HloModule m',
    '%fused_dot (a: f32[4,6], b: f32[6,5]) -> f32[4,5] {',
    '  %a = f32[4,6]{1,0} parameter(0)',
    '  %b = f32[6,5]{1,0} parameter(1)',
    '  ROOT %d = f32[4,5]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}',
    '}',
    '%fused_add (x: f32[4,5], y: f32[4,5]) -> f32[4,5] {',
    '  %x = f32[4,5]{1,0} parameter(0)',
    '  %y = f32[4,5]{1,0} parameter(1)',
    '  ROOT %s = f32[4,5]{1,0} add(%x, %y)',
    '}',
    '%fused_slice (stack: f32[3,4,6], i: s32[]) -> f32[1,4,6] {',
    '  %stack = f32[3,4,6]{2,1,0} parameter(0)',
    '  %i = s32[] parameter(1)',
    '  %z = s32[] constant(0)',
    '  ROOT %sl = f32[1,4,6]{2,1,0} dynamic-slice(%stack, %i, %z, %z), dynamic_slice_sizes={1,4,6}',
    '}',
    '%fused_update (stack: f32[3,4,5], u: f32[1,4,5], i: s32[]) -> f32[3,4,5] {',
    '  %stack = f32[3,4,5]{2,1,0} parameter(0)',
    '  %u = f32[1,4,5]{2,1,0} parameter(1)',
    '  %i = s32[] parameter(2)',
    '  %z = s32[] constant(0)',
    '  ROOT %up = f32[3,4,5]{2,1,0} dynamic-update-slice(%stack, %u, %i, %z, %z)',
    '}',
    '%body (s: (s32[], f32[3,4,6], f32[3,4,5])) -> (s32[], f32[3,4,6], f32[3,4,5]) {',
    '  %s = (s32[], f32[3,4,6]{2,1,0}, f32[3,4,5]{2,1,0}) parameter(0)',
    '  %i = s32[] get-tuple-element(%s), index=0',
    '  %stack = f32[3,4,6]{2,1,0} get-tuple-element(%s), index=1',
    '  %out = f32[3,4,5]{2,1,0} get-tuple-element(%s), index=2',
    '  %x = f32[1,4,6]{2,1,0} fusion(%stack, %i), kind=kLoop, calls=%fused_slice',
    '  %u = f32[1,4,5]{2,1,0} fusion(%x, %x), kind=kLoop, calls=%fused_nothing',
    '  %o = f32[3,4,5]{2,1,0} fusion(%out, %u, %i), kind=kLoop, calls=%fused_update',
    '  ROOT %t = (s32[], f32[3,4,6]{2,1,0}, f32[3,4,5]{2,1,0}) tuple(%i, %stack, %o)',
    '}',
    '%cond (s: (s32[], f32[3,4,6], f32[3,4,5])) -> pred[] {',
    '  %s = (s32[], f32[3,4,6]{2,1,0}, f32[3,4,5]{2,1,0}) parameter(0)',
    '  ROOT %c = pred[] constant(true)',
    '}',
    'ENTRY %main {',
    '  %p = f32[4,6]{1,0} parameter(0)',
    '  %w = f32[6,5]{1,0} parameter(1)',
    '  %init = (s32[], f32[3,4,6]{2,1,0}, f32[3,4,5]{2,1,0}) parameter(2)',
    '  %d = f32[4,5]{1,0} fusion(%p, %w), kind=kOutput, calls=%fused_dot',
    '  %e = f32[4,5]{1,0} fusion(%d, %d), kind=kLoop, calls=%fused_add',
    '  %r = f32[4,5]{1,0} all-reduce(%e), replica_groups={}, to_apply=%fused_add',
    '  %l = (s32[], f32[3,4,6]{2,1,0}, f32[3,4,5]{2,1,0}) while(%init), condition=%cond, body=%body, '
    'backend_config={"known_trip_count":{"n":"3"}}',
    '  ROOT %t = f32[4,5]{1,0} tuple(%r)',
    '}',
])


def test_work_bytes_split_matrix_products_from_the_memory_bound_rest():
    found = work.work_bytes(WORK_HLO)
    # the dot fusion: p f32[4,6] and w f32[6,5] read, f32[4,5] written: (24 + 30 + 20) * 4 = 296
    assert found.matmul == (24 + 30 + 20) * 4
    # memory-bound, per execution of ENTRY:
    # the add fusion: d read twice (two operands of 20), 20 written: 60 * 4 = 240
    # the loop body, 3 iterations: the slice fusion reads one 4x6 slice of the stack (not all 3) and
    # its index, and writes the slice: (24 + 1 + 24) * 4 = 196; the unknown fusion %fused_nothing reads
    # x twice and writes u: (24 + 24 + 20) * 4 = 272; the update fusion reads the update operand and the
    # index (20 * 4 + 4 = 84) and writes the 4x5 update once, in place (20 * 4 = 80; the stack is neither
    # read nor copied): 2 x update + index, as XLA's cost analysis counts a dynamic-update-slice
    # the all-reduce is communication, the while, tuples and get-tuple-elements move nothing
    body = (24 + 1 + 24) * 4 + (24 + 24 + 20) * 4 + 20 * 4 + 20 * 4 + 4
    assert found.other == 240 + 3 * body
    # kernels: the dot and add fusions once, the body's three fusions three times each
    assert found.kernels == 2 + 3 * 3
    assert found.unknown == ()


REDUCING_HLO = "\n".join([
    'HloModule m',
    '%sum (a: f32[], b: f32[]) -> f32[] {',
    '  %a = f32[] parameter(0)',
    '  %b = f32[] parameter(1)',
    '  ROOT %s = f32[] add(%a, %b)',
    '}',
    '%less (a: f32[], b: f32[]) -> pred[] {',
    '  %a = f32[] parameter(0)',
    '  %b = f32[] parameter(1)',
    '  ROOT %c = pred[] compare(%a, %b), direction=LT',
    '}',
    '%fused_reduce (x: f32[8,16]) -> f32[8] {',
    '  %x = f32[8,16]{1,0} parameter(0)',
    '  %zero = f32[] constant(0)',
    '  ROOT %r = f32[8]{0} reduce(%x, %zero), dimensions={1}, to_apply=%sum',
    '}',
    'ENTRY %main {',
    '  %p = f32[8,16]{1,0} parameter(0)',
    '  %zero = f32[] constant(0)',
    '  %f = f32[8]{0} fusion(%p), kind=kInput, calls=%fused_reduce',
    '  %m = f32[] reduce(%f, %zero), dimensions={0}, to_apply=%sum',
    '  %o = f32[8]{0} sort(%f), dimensions={0}, to_apply=%less',
    '  %ar = f32[8]{0} all-reduce(%o), replica_groups={}, to_apply=%sum',
    '  ROOT %t = (f32[], f32[8]{0}) tuple(%m, %ar)',
    '}',
])


def test_work_bytes_counts_no_kernel_for_a_reduction_or_sort_computation():
    """The computations a reduce, a sort or an all-reduce names run inside that
    instruction: their adds and compares are not kernels of their own."""
    found = work.work_bytes(REDUCING_HLO)
    assert hlo.code_computations(hlo.parse_module(REDUCING_HLO)) == ["main"]
    # kernels: the reducing fusion, the entry's reduce and the sort (the all-reduce is communication)
    assert found.kernels == 3
    # the fusion reads 8x16 and writes 8: (128 + 8) * 4; the reduce reads 8 and its scalar
    # initial value and writes 1: (8 + 1 + 1) * 4; the sort reads and writes 8: 16 * 4
    assert found.other == (128 + 8) * 4 + (8 + 1 + 1) * 4 + 16 * 4 and found.matmul == 0


def test_work_bytes_counts_an_asynchronous_op_once_by_the_op_it_wraps():
    """An ``async-start`` / ``async-done`` pair launches the op its computation
    wraps: one kernel, with that op's bytes (not the start's tuple, which
    repeats the operands beside the result and a context)."""
    text = "\n".join([
        'HloModule m',
        '%wrapped (p: f32[8]) -> f32[8] {',
        '  %p = f32[8]{0} parameter(0)',
        '  ROOT %n = f32[8]{0} negate(%p)',
        '}',
        'ENTRY %main {',
        '  %x = f32[8]{0} parameter(0)',
        '  %s = ((f32[8]{0}), f32[8]{0}, s32[]) async-start(%x), calls=%wrapped',
        '  ROOT %d = f32[8]{0} async-done(%s)',
        '}',
    ])
    found = work.work_bytes(text)
    assert hlo.code_computations(hlo.parse_module(text)) == ["main", "wrapped"]
    assert (found.kernels, found.other, found.matmul) == (1, (8 + 8) * 4, 0)  # negate reads 8, writes 8


def test_work_bytes_kernels_are_no_more_than_a_real_h100_launched():
    """Every instruction that runs code launches at least one GPU kernel: the count
    read from the program an H100 ran is at most the launches its profiler saw
    (ConvNet batch 64, bfloat16, Adam: reports/data/kernels_nvidia-h100-80gb-hbm3_2026-11-26.csv,
    ``python benchmarks/kernel_profile.py``: 50 launches), and what it misses are
    the kernels a library call launches beyond its own (the profile shows a cuDNN
    convolution's padding kernels and memsets: a few per call, 3 allowed here).
    Counting a reduction's add as a kernel made it 87."""
    import gzip
    import pathlib

    import pandas as pd

    data = pathlib.Path(__file__).resolve().parents[2] / "reports" / "data"
    with gzip.open(data / "kernels_nvidia-h100-80gb-hbm3_2026-11-26_conv_net-64-bfloat16-adam.hlo.gz", "rt") as f:
        text = f.read()
    profile = pd.read_csv(data / "kernels_nvidia-h100-80gb-hbm3_2026-11-26.csv")
    launched = profile[profile["case"] == "conv_net:64:bfloat16:adam"]["calls_per_step"].sum()
    found = work.work_bytes(text)
    library = sum(hlo.custom_call_targets(text).values())
    assert found.kernels <= launched <= found.kernels + 3 * library


def test_work_bytes_of_a_program_without_work():
    assert work.work_bytes("ENTRY %main {\n  ROOT %p = f32[2]{0} parameter(0)\n}") == work.WorkBytes(0, 0, 0)


def test_entry_arguments_are_the_arrays_a_call_is_passed():
    """A train-step-like call: a dict of two parameters, a tuple of two optimizer arrays and a
    batch are five arrays however they are nested; the program's entry takes five parameters."""
    params = {"w": jnp.ones((4, 3)), "b": jnp.ones((3,))}
    state = (jnp.zeros((4, 3)), jnp.zeros((3,)))

    def step(params, state, x):
        return jax.tree.map(lambda p, s: p - 0.1 * s, params, {"w": state[0], "b": state[1]}), (x @ params["w"]).sum()

    text = jax.jit(step).lower(params, state, jnp.ones((2, 4))).compile().as_text()
    assert hlo.entry_arguments(text) == 2 + 2 + 1
    assert hlo.entry_arguments("HloModule m\n") is None  # no entry computation: unknown, not zero


def test_an_op_names_escaped_quotes_are_read_as_the_name_stack_has_them():
    # XLA prints the metadata's strings with their quotes escaped: an NNX state's path as a jitted function's
    # argument, args[0]['layers'][1]['kernel'], reads \' in the text; the name is the stack's own
    text = (
        "HloModule m\n\nENTRY %main (p: f32[4]) -> f32[4] {\n"
        "  %p = f32[4]{0} parameter(0), "
        "metadata={op_name=\"args[0][\\'layers\\'][1][\\'kernel\\'].value\"}\n"
        "  ROOT %n = f32[4]{0} negate(%p), metadata={op_name=\"jit(f)/say \\\"hi\\\"/neg\"}\n}\n"
    )
    module = hlo.parse_module(text)
    names = [i.op_name for c in module.computations.values() for i in c.instructions]
    assert names == ["args[0]['layers'][1]['kernel'].value", 'jit(f)/say "hi"/neg']


def test_a_nameless_collective_is_named_by_the_operands_it_combines():
    # a GPU's combined all-reduce: a fusion of a concatenate of bitcasts packs the gradients, and neither it nor the
    # all-reduce has an op_name (it read "", so a user's step put the gradients' reduction under "other"): the
    # named operands are found through them, in XLA's own combiner's form (the CPU's "jit(f)/(a:b)"); through a
    # tuple's element, one name alone; an argument's reduction keeps none
    wrapped = """\
%wrapped_concatenate_computation (a: f32[2048], b: f32[32], c: f32[1]) -> f32[2081] {
  %a = f32[2048]{0} parameter(0)
  %b = f32[32]{0} parameter(1)
  %c = f32[1]{0} parameter(2)
  ROOT %cat = f32[2081]{0} concatenate(%a, %b, %c), dimensions={0}
}
"""
    body = (
        '  %dw = f32[64,32]{1,0} multiply(%p, %p), metadata={op_name="jit(step)/transpose(jvp(M))/fc/dot_general"}\n'
        '  %db = f32[32]{0} reduce(%p, %c), dimensions={0}, to_apply=%add, '
        'metadata={op_name="jit(step)/transpose(jvp(M))/fc/reduce_sum"}\n'
        '  %loss = f32[] reduce(%p, %c), dimensions={0,1}, to_apply=%add, metadata={op_name="jit(step)/jvp()/reduce_sum"}\n'
        "  %w = f32[2048]{0} bitcast(%dw)\n"
        "  %l = f32[1]{0} bitcast(%loss)\n"
        "  %packed = f32[2081]{0} fusion(%w, %db, %l), kind=kLoop, calls=%wrapped_concatenate_computation\n"
        "  %ars = f32[2081]{0} all-reduce-start(%packed), channel_id=1, replica_groups={}, to_apply=%add\n"
        "  %ard = f32[2081]{0} all-reduce-done(%ars)\n"
        "  %t = (f32[32]{0}, f32[64,32]{1,0}) tuple(%db, %p)\n"
        "  %g = f32[32]{0} get-tuple-element(%t), index=0\n"
        "  %one = f32[32]{0} all-reduce(%g), channel_id=2, replica_groups={}, to_apply=%add\n"
        "  %arg = f32[64,32]{1,0} all-reduce(%p), channel_id=3, replica_groups={}, to_apply=%add"
    )
    found, _ = parse_collectives(_module(body, before=wrapped))
    assert [c.op_name for c in found] == [
        "jit(step)/(transpose(jvp(M))/fc/dot_general:transpose(jvp(M))/fc/reduce_sum:jvp()/reduce_sum)",
        "jit(step)/transpose(jvp(M))/fc/reduce_sum",
        "",
    ]
    assert found[0].bytes == (64 * 32 + 32 + 1) * 4  # the packed gradients and loss, float32
