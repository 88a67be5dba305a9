"""The device registry: one table every consumer reads (timing, fit, comm, scaling, the CLI).

Figures are checked against the datasheets named beside them here, and every
consumer is checked to answer for every device that has what it needs: the
tables used to disagree (``comm.cluster("h200")`` refused a device the CLI offered).
"""

from __future__ import annotations

import pytest

from xla_cost.analysis import timing
from xla_cost.cli import build_parser
from xla_cost.errors import InputError
from xla_cost.timemodel import comm, devices
from xla_cost.timemodel.devices import DEVICES
from xla_cost.runs import fit

T = 1e12


DATASHEETS = [  # name, dense BF16 and float32 TFLOPS, memory bandwidth (B/s), memory (B)
    # H100 SXM5 datasheet: dense BF16, TF32, HBM3 3.35 TB/s; memory as the driver reports it, 81,559 MiB
    # (nvidia-smi on the device machine; the datasheet's "80 GB")
    ("h100", 989.4, 494.7, 3.35e12, 81559 * 2**20),
    ("h100-pcie", 756, 378, 2.0e12, 80e9),   # H100 PCIe datasheet: dense BF16 756, TF32 378, 2.0 TB/s, 80 GB HBM2e
    # H200 datasheet: HBM3e 4.8 TB/s; memory 143,771 MiB as nvidia-smi reports it (the datasheet's "141 GB";
    # reports/data/device_check_nvidia-h200_2026-11-26.json)
    ("h200", 989, 494.7, 4.8e12, 143771 * 2**20),
    # NVIDIA HGX B200 specifications, per GPU, with sparsity halved: FP16/BF16 4.5 PFLOPS -> 2,250, TF32 2.2 ->
    # 1,100; HBM3e 7.7 TB/s, 180 GB (DGX B200 user guide: 1,440 GB for 8)
    ("b200", 2250, 1100, 7.7e12, 1440e9 / 8),
    ("a100", 312, 156, 1.555e12, 40e9),      # A100 40GB: 1,555 GB/s
    ("a100-80gb", 312, 156, 2.039e12, 80e9),  # A100 80GB SXM: 2,039 GB/s
    ("v100", 15.7, 15.7, 900e9, 16e9),       # V100 SXM2: no BF16 tensor cores (FP32 rate), HBM2 900 GB/s
    ("v100-32gb", 15.7, 15.7, 900e9, 32e9),  # V100 SXM2 32 GB: the same chip
    ("p100", 0.0, 10.6, 732e9, 16e9),        # Tesla P100 SXM2: FP32 10.6 TFLOPS, no BF16, CoWoS HBM2 732 GB/s
    ("p40", 0.0, 11.76, 346e9, 24e9),        # Tesla P40: 3840 cores x 2 x 1.531 GHz = 11.76 TFLOPS FP32
    ("tpu-v5e", 197, 197, 819e9, 16e9),      # Cloud TPU v5e: bf16 197 TFLOPs (float32 in one bf16 pass), 819 GBps, 16 GB
    ("tpu-v4", 275, 275, 1200e9, 32 * 2**30),  # Cloud TPU v4: 275 teraflops bf16, HBM2 32 GiB at 1200 GBps
    ("tpu-v5p", 459, 459, 2765e9, 95e9),     # Cloud TPU v5p: 459 TFLOPs bf16, HBM2e 95 GB at 2765 GBps
    ("tpu-v6e", 918, 918, 1638e9, 32e9),     # Cloud TPU v6e: 918 TFLOPs bf16, HBM 32 GB at 1638 GBps
]


def test_a_gpu_allocator_takes_its_share_of_what_the_cuda_context_leaves():
    from xla_cost.timemodel.devices import CUDA_CONTEXT_BYTES, allocatable, target

    # measured on an H200: JAX's limit 112,583,507,968 bytes = 0.75 x (143,771 MiB - the context)
    assert 0.75 * allocatable(DEVICES["h200"])[0] == pytest.approx(112_583_507_968, abs=1)
    assert 600 * 2**20 < CUDA_CONTEXT_BYTES < 620 * 2**20  # 614 MiB
    assert target("h200").memory_bytes * target("h200").memory_fraction == pytest.approx(112_583_507_968, abs=1)
    # a TPU's runtime keeps no context out of it, and takes it all
    assert allocatable(DEVICES["tpu-v5e"])[0] == DEVICES["tpu-v5e"].memory
    assert target("tpu-v5e").memory_fraction == 1.0


@pytest.mark.parametrize("name, bf16, f32, bandwidth, memory", DATASHEETS)
def test_datasheet_figures(name, bf16, f32, bandwidth, memory):
    device = DEVICES[name]
    assert device.peak.for_dtype("bfloat16") == pytest.approx(bf16 * T)
    assert device.peak.for_dtype("float32") == pytest.approx(f32 * T)
    assert device.peak.bandwidth == bandwidth and device.memory == memory


def test_every_entry_is_whole_and_its_links_exist():
    assert list(DEVICES) == [d.name for d in DEVICES.values()]
    # every device with a peak or a memory has its datasheet's figures checked above
    assert {d.name for d in DEVICES.values() if d.peak is not None or d.memory is not None} \
        == {row[0] for row in DATASHEETS}
    for device in DEVICES.values():
        assert device.name == device.name.lower() and device.kind and device.title
        if device.peak is not None:
            assert device.peak.source
        if device.memory is not None:
            assert device.memory_source
        if device.has_cluster:
            assert device.intra in comm.INTERCONNECTS and device.inter in comm.INTERCONNECTS
    # devices per node: 8-GPU servers (DGX/HGX H100 and A100, and the V100, P100 and P40 servers),
    # a 256-chip TPU v5e or v6e pod, a 4096-chip v4 pod, the largest v5p slice (16x16x24 = 6144 chips;
    # Cloud TPU documentation of each), one CPU host
    assert {d.name: d.node_size for d in DEVICES.values() if d.has_cluster} == {
        **{name: 8 for name in ("h100", "h100-pcie", "h200", "b200", "a100", "a100-80gb", "v100", "v100-32gb", "p100", "p40")},
        "tpu-v5e": 256, "tpu-v6e": 256, "tpu-v4": 4096, "tpu-v5p": 6144, "cpu": 1}


@pytest.mark.parametrize("kind, name", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA A100-SXM4-40GB", "a100"),
    ("Tesla V100-SXM2-16GB", "v100"), ("Tesla V100-SXM2-32GB", "v100-32gb"), ("Tesla P40", "p40"),
    ("TPU v5 lite", "tpu-v5e"), ("TPU v5", "tpu-v5p"), ("TPU v4", "tpu-v4"), ("TPU v6 lite", "tpu-v6e"),
    ("cpu", "cpu"),
])
def test_a_device_kind_finds_its_most_specific_entry(kind, name):
    assert devices.match_kind(kind).name == name
    assert devices.device(kind).name == name


@pytest.mark.parametrize("name", ["RTX A1000", "a1000", "p400", "h1000", "GH200", "a100x"])
def test_a_name_that_only_contains_a_registry_key_is_not_that_device(name):
    # a fourth new user's `fit one_net --device "RTX A1000"` was answered with an A100's 40 GB (the key "a100"
    # is in "a1000"), `p400` with a P40's, `h1000` with an H100's: a typo or another card, silently priced
    assert devices.match_kind(name) is None
    with pytest.raises(InputError, match="a device with a known memory"):
        fit.device_memory(name)


def test_every_consumer_answers_for_every_device_that_has_what_it_needs():
    for name in devices.names("cluster"):
        assert comm.cluster(name) == comm.CLUSTERS[name]
    for name in devices.names("memory"):
        assert fit.device_memory(name) == devices.allocatable(DEVICES[name])
    for name in devices.names("peak"):
        assert timing.device_peak(DEVICES[name].kind[0] + " " + " ".join(DEVICES[name].kind[1:])).name \
            == DEVICES[name].title
    assert comm.cluster("h200") == comm.CLUSTERS["h100"]  # the same NVLink 4 / NDR servers (H200 datasheet)


def test_the_command_line_offers_what_the_registry_has():
    parser = build_parser()
    help_text = {action.dest: action.help for sub in parser._subparsers._group_actions  # noqa: SLF001
                 for name, p in sub.choices.items() for action in p._actions if name in ("fit", "scaling")}  # noqa: SLF001
    for name in devices.names("peak"):
        assert name in help_text["device"]


def test_unknown_devices_are_refused_with_the_names_that_qualify():
    with pytest.raises(InputError, match="a device with a known memory .*h100.*p40.*tpu-v5e"):
        fit.device_memory("cpu")
    with pytest.raises(InputError, match="a device with a cluster preset"):
        comm.cluster("b300")  # not in the registry
    with pytest.raises(InputError, match="a device with a published peak"):
        devices.device("cpu", has="peak")


# Dense FP8 peaks, half of each datasheet's "with sparsity" figure: H100 SXM5 3,958 -> 1,979 TFLOPS, H100 PCIe
# 3,026 -> 1,513, H200 3,958 -> 1,979 (NVIDIA H100 and H200 datasheets), B200 9 PFLOPS -> 4,500 (NVIDIA HGX
# B200 specifications, per GPU)
FP8_SPARSE = {"h100": 3958, "h100-pcie": 3026, "h200": 3958, "b200": 9000}


def test_fp8_peaks_are_the_datasheets_dense_figures_and_only_where_there_are_fp8_units():
    for name, device in DEVICES.items():
        if device.peak is None:
            continue
        if name in FP8_SPARSE:
            assert device.peak.require("float8") == pytest.approx(FP8_SPARSE[name] / 2 * T)
            # an FP8 tensor core does twice the 16-bit one's multiply-adds a cycle
            assert device.peak.for_dtype("float8") == pytest.approx(2 * device.peak.for_dtype("bfloat16"), rel=0.001)
            continue
        # no FP8 units (an A100, a V100, the TPUs here): no float8 peak, never the float32 one in its place
        assert device.peak.for_dtype("float8") == 0.0
        with pytest.raises(InputError, match="a device with float8 units \\(h100, h100-pcie, h200, b200\\)") as refused:
            device.peak.require("float8")
        assert "\n" not in str(refused.value) and "float32" in str(refused.value)


def test_a_dgx_b200_is_eight_gpus_on_nvlink_5_with_an_ndr_adapter_each():
    b200 = comm.cluster("b200")
    # NVLink 5: 1.8 TB/s per GPU both directions (HGX B200 specifications; DGX B200: 14.4 TB/s for 8), per direction
    assert b200.intra.name == "nvlink5" and b200.intra.bandwidth == 1.8e12 / 2 == 14.4e12 / 8 / 2
    # DGX B200 user guide: 8 single-port ConnectX-7, 400 Gb/s each, for 8 GPUs: 400e9 / 8 bytes/s per GPU
    assert b200.inter.bandwidth == 8 * 400e9 / 8 / 8 and b200.node_size == 8
    assert devices.node("dgx-b200").source.startswith("NVIDIA DGX B200 user guide")


@pytest.mark.parametrize("name", ["tpu-v5e", "tpu-v5p", "tpu-v6e"])
def test_a_dtype_a_device_publishes_no_peak_for_is_refused_not_priced_at_float32s(name):
    # TPUs publish bfloat16 (and float32 run at its rate) only: float16's peak is unknown, not float32's renamed
    peak = DEVICES[name].peak
    assert set(peak.flops_per_s) == {"bfloat16", "float32"}
    with pytest.raises(InputError, match=r"a dtype the Google TPU v\w+ has a published peak for \(bfloat16, "
                                         r"float32\), got 'float16'"):
        peak.require("float16")
    assert peak.require("bfloat16") == peak.flops_per_s["bfloat16"]


def test_a_refusal_suggests_only_devices_with_units_for_the_dtype():
    # a V100 runs bfloat16 on its FP32 cores (its bfloat16 figure is the FP32 rate, its FP16 tensor cores
    # 8x faster): no bfloat16 units to suggest; a TPU's bfloat16 is its one rate
    assert not DEVICES["v100"].peak.has_units("bfloat16") and DEVICES["v100"].peak.has_units("float16")
    assert DEVICES["tpu-v5e"].peak.has_units("bfloat16") and DEVICES["h100"].peak.has_units("bfloat16")
    with pytest.raises(InputError) as info:
        DEVICES["p100"].peak.require("bfloat16")
    suggested = str(info.value).split("a device with bfloat16 units (", 1)[1]
    assert "h100" in suggested and "tpu-v5e" in suggested and "v100" not in suggested
