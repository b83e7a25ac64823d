"""dcgm-exporter source, parsing: real bodies, label spellings, MIG, blanks and hostile input.

The bodies are ``tests/data/dcgm/*.prom`` (real exporter bodies, see
tests/data/README.md). Scraping them over HTTP, retries, timeouts and down targets are tested in
``test_dcgm_http.py``.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from collector.dcgm import collector as dcgm
from collector.dcgm.collector import FIELDS, parse, parse_detailed
from collector.dcgm.inventory import InventoryChanges, mig_fraction
from collector.dcgm.promtext import parse_text
from collector.records import GpuSample, samples_frame

DATA = Path(__file__).parent / "data" / "dcgm"
FILES = sorted(p.name for p in DATA.glob("*.prom"))
NOW = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
MIB = 2**20
A100 = "a100_40gb_mig_1g5gb__nvidia_cloud-native-docs.prom"
BLANK = "readme_blank_sentinel__nvidia_cloud-native-docs.prom"


def read(name: str) -> str:
    return (DATA / name).read_text()


# --------------------------------------------------------------------------- real bodies


def test_t4_values_converted_to_units() -> None:
    (s,), _ = parse(read("t4_ericsson-ccd__cncf_k8s-ai-conformance.prom"), NOW, "c")
    assert s.gpu_util_ratio == pytest.approx(0.91) and s.mem_util_ratio == pytest.approx(0.73)
    assert s.gr_engine_active_ratio == pytest.approx(0.156205)  # both stored, warehouse picks
    assert s.memory_used_bytes == 5120 * MIB
    assert s.power_watts == pytest.approx(68.244) and s.temperature_celsius == 74.0
    assert s.energy_millijoules == 15152422938 and s.sm_clock_mhz == 660 and s.xid is None
    assert s.tensor_active_ratio == pytest.approx(0.005822)


def test_a100_mig_instance_and_no_double_counting() -> None:
    samples, rejects = parse(read(A100), NOW, "c")
    assert rejects == []
    parent, inst = samples
    assert (parent.mig_instance, parent.mig_profile) == ("", "")
    assert (inst.mig_instance, inst.mig_profile) == ("13", "1g.5gb")
    assert parent.gpu_uuid == inst.gpu_uuid and parent.gpu_model == "" == inst.gpu_model
    assert parent.gr_engine_active_ratio == pytest.approx(0.995630)
    assert inst.gr_engine_active_ratio == pytest.approx(0.995687)
    # tensor activity is per GPU instance, like engine activity: both samples keep theirs
    assert parent.tensor_active_ratio == pytest.approx(0.929260)
    assert inst.tensor_active_ratio == pytest.approx(0.930433)
    assert parent.power_watts == pytest.approx(409.692)
    assert parent.energy_millijoules == 319159391 and parent.temperature_celsius == 61.0
    assert parent.sm_clock_mhz == 1215 and parent.xid is None
    assert parent.memory_used_bytes == 4845 * MIB
    device = ("power_watts", "energy_millijoules", "temperature_celsius", "sm_clock_mhz", "xid")
    assert all(getattr(inst, f) is None for f in device)
    assert sum(s.power_watts or 0 for s in samples) == pytest.approx(409.692)


def _flex_mode_body() -> str:
    """The A100 body as a flex-mode exporter writes it with MIG on: every series carries a
    GPU instance (1 and 2), device-level values repeated on both; no whole-GPU series."""
    out = []
    for line in read(A100).splitlines():
        if "GPU_I_ID" in line:
            continue
        for gi in ("2", "1"):
            out.append(
                line.replace("Hostname=", f'GPU_I_PROFILE="3g.20gb",GPU_I_ID="{gi}",Hostname=')
            )
    return "\n".join(out) + "\n"


def test_mig_only_instance_series_device_fields_taken_once() -> None:
    result = parse_detailed(_flex_mode_body(), NOW, "c")
    parent, one, two = result.samples
    assert result.stats.synthesised_parents == 1
    assert parent.mig_instance == "" and [one.mig_instance, two.mig_instance] == ["1", "2"]
    assert parent.power_watts == pytest.approx(409.692)
    assert parent.energy_millijoules == 319159391
    assert parent.memory_used_bytes is None and parent.pod == ""
    assert one.power_watts is None and two.energy_millijoules is None
    assert one.memory_used_bytes == two.memory_used_bytes == 4845 * MIB
    total_power = sum(s.power_watts or 0 for s in result.samples)
    assert total_power == pytest.approx(409.692)  # not 2 x 409.692


def test_mig_device_field_missing_on_parent_taken_once_from_instances() -> None:
    lines = read(A100).splitlines()
    power = next(ln for ln in lines if ln.startswith("DCGM_FI_DEV_POWER_USAGE"))
    moved = [
        power.replace("Hostname=", f'GPU_I_PROFILE="1g.5gb",GPU_I_ID="{gi}",Hostname=')
        for gi in ("13", "14")
    ]
    body = "\n".join([ln for ln in lines if ln != power] + moved)
    parent, *instances = parse(body, NOW, "c")[0]
    assert parent.power_watts == pytest.approx(409.692)
    assert [i.power_watts for i in instances] == [None, None]


def test_blank_sentinel_real_file_is_never_a_value() -> None:
    result = parse_detailed(read(BLANK), NOW, "c")
    (s,) = result.samples
    assert s.temperature_celsius is None and s.sm_clock_mhz == 139
    # The same real line on a field we map: the blank becomes NULL, not a temperature.
    as_gpu_temp = read(BLANK).replace("DCGM_FI_DEV_MEMORY_TEMP{", "DCGM_FI_DEV_GPU_TEMP{")
    result = parse_detailed(as_gpu_temp, NOW, "c")
    assert result.samples[0].temperature_celsius is None
    assert result.stats.blank_values == 1 and result.rejects == []


BLANKS = [
    "2147483632",
    "2147483633",
    "2147483634",
    "2147483635",  # int32 family
    "9223372036854775792",
    "9223372036854775794",
    "9223372036854775795",  # int64
    "140737488355328.0",
    "140737488355330.000000",
]  # FP64 family


@pytest.mark.parametrize("value", BLANKS)
@pytest.mark.parametrize("metric", sorted(set(FIELDS) - {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}))
def test_blank_family_is_null_on_every_field(metric: str, value: str) -> None:
    body = f'{metric}{{gpu="0",UUID="GPU-1"}} {value}\n'
    result = parse_detailed(body, NOW, "c")
    (s,) = result.samples  # the GPU is still there, with the field NULL
    assert result.rejects == [] and result.stats.blank_values == 1
    assert all(
        value is None
        for value in s[
            GpuSample._fields.index("gpu_util_ratio") : GpuSample._fields.index("xid") + 1
        ]
    )


def test_energy_counter_blank_only_in_int64_family() -> None:
    body = (
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-1"} 2147483640\n'
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",UUID="GPU-2"} 9223372036854775794\n'
    )
    one, two = parse(body, NOW, "c")[0]
    assert one.energy_millijoules == 2147483640  # a real reading: ~0.6 kWh, not a blank
    assert two.energy_millijoules is None


def test_catalogue_types_match_the_mapping() -> None:
    def catalogue(name: str) -> dict[str, str]:
        rows = (
            line.split(",")
            for line in read(name).splitlines()
            if line.strip() and not line.startswith("#")
        )
        return {row[0].strip(): row[1].strip() for row in rows}

    default = catalogue("dcgm-exporter_default-counters.csv")
    dcp = catalogue("dcgm-exporter_dcp-metrics-included.csv")
    for metric, spec in FIELDS.items():
        assert default.get(metric) == spec.prom_type, metric
        assert dcp.get(metric) == spec.prom_type, metric
    # ... and the real bodies' own "# TYPE" lines agree.
    for name in FILES:
        types = parse_detailed(read(name), NOW, "c").stats.types
        for metric, kind in types.items():
            if metric in FIELDS:
                assert kind == FIELDS[metric].prom_type, (name, metric)


@pytest.mark.parametrize("name", FILES)
def test_parser_agrees_with_prometheus_client(name: str) -> None:
    text = read(name)
    ours = {(s.name, frozenset(s.labels.items()), s.value) for s in parse_text(text).samples}
    names = {name for name, _, _ in ours}
    theirs = set()
    renamed = 0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            metric = s.name
            if (
                family.type == "counter"
                and metric == family.name + "_total"
                and (metric not in names)
            ):
                metric = family.name  # prometheus_client renames counters; we do not
                renamed += 1
            # prometheus_client keeps integer text as int; we read every value as a float.
            theirs.add((metric, frozenset(s.labels.items()), float(s.value)))
    assert ours == theirs
    assert renamed == sum(1 for ln in text.splitlines() if "TYPE" in ln and "counter" in ln)


# --------------------------------------------------------------------------- label spellings

LABEL_CASES = {
    "current": (
        'UUID="GPU-a",Hostname="n1",pod="p",namespace="ns",container="c"',
        ("GPU-a", "n1", "ns", "p", "c", "", ""),
    ),
    "newest-hostname": (
        'UUID="GPU-a",hostname="n1",modelName="NVIDIA A10G"',
        ("GPU-a", "n1", "", "", "", "", "NVIDIA A10G"),
    ),
    "use-old-namespace": (
        'uuid="GPU-a",Hostname="n1",pod_name="p",pod_namespace="ns",container_name="c"',
        ("GPU-a", "n1", "ns", "p", "c", "", ""),
    ),
    "old-container": (
        'uuid="GPU-a",pod_name="p",pod_namespace="ns",pod_container_name="c"',
        ("GPU-a", "", "ns", "p", "c", "", ""),
    ),
    "prometheus-relabelled": (
        'UUID="GPU-a",Hostname="n1",exported_pod="p",exported_namespace="ns",'
        'exported_container="c",pod="dcgm-exporter-x",namespace="gpu-operator",container="exp"',
        ("GPU-a", "n1", "ns", "p", "c", "", ""),
    ),
    "hpc-job": (
        'UUID="GPU-a",hpc_job="4242",model_name="NVIDIA A100-SXM4-80GB"',
        ("GPU-a", "", "", "", "", "4242", "NVIDIA A100-SXM4-80GB"),
    ),
    "spaces": (' UUID = "GPU-a" , Hostname="n1", ', ("GPU-a", "n1", "", "", "", "", "")),
}


@pytest.mark.parametrize("case", sorted(LABEL_CASES))
def test_label_spellings(case: str) -> None:
    labels, want = LABEL_CASES[case]
    body = (
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="3",{labels}}} 42\nDCGM_FI_DEV_FB_USED{{gpu="3",{labels}}} 10\n'
    )
    (s,), rejects = parse(body, NOW, "c")
    assert rejects == []
    got = (s.gpu_uuid, s.node, s.namespace, s.pod, s.container, s.job_id, s.gpu_model)
    assert got == want
    assert s.gpu_index == 3 and s.gpu_util_ratio == pytest.approx(0.42)


def test_relabelled_body_ignores_plain_pod_of_the_exporter() -> None:
    body = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",exported_pod="train",'
        'exported_namespace="ml",pod="dcgm-exporter-x",namespace="gpu-operator"} 5\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",pod="dcgm-exporter-x",'
        'namespace="gpu-operator"} 0\n'
    )
    held, free = parse(body, NOW, "c")[0]
    assert (held.namespace, held.pod) == ("ml", "train")
    assert (free.namespace, free.pod) == ("", "")  # not the exporter's own pod


def test_time_sliced_gpu_gives_one_sample() -> None:
    body = "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-a",pod="{p}",namespace="ns"}} 30\n'
        for p in ("b-pod", "a-pod")
    )
    result = parse_detailed(body, NOW, "c")
    (s,) = result.samples
    assert s.pod == "a-pod" and result.stats.shared_gpus == 1


def test_exposition_timestamp_wins_over_now() -> None:
    body = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 10 1700000000123\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b"} 10 99999999999999999\n'
    )
    (a, b), rejects = parse(body, NOW, "c")
    assert a.ts == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    assert b.ts == NOW and [r.field for r in rejects] == ["ts"]


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse("", dt.datetime(2025, 1, 1), "c")


# --------------------------------------------------------------------------- hostile input


def test_bad_lines_become_rejects_and_the_rest_survives() -> None:
    huge = "x" * 1025
    good = read("t4_rafay__cncf_k8s-ai-conformance.prom")
    bad_lines = {
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b"} 250': "gpu_util_ratio",
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-c"} -3': "gpu_util_ratio",
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-b"} 1.5': "gr_engine_active_ratio",
        'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-b"} -0.2': "tensor_active_ratio",
        'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-b"} NaN': "power_watts",
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-b"} +Inf': "temperature_celsius",
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-b"} -Inf': "sm_clock_mhz",
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-b"} -5': "energy_millijoules",
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-b"} 99999999': "memory_used_bytes",
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-b",pod="{huge}"}} 5': "pod",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b" 5': "line",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b"} twelve': "value",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b",gpu="1"} 5': "gpu",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5': "gpu_uuid",
        'DCGM_FI_DEV_GPU_UTIL{gpu="zero",UUID="GPU-d"} 5': "gpu_index",
        'DCGM_FI_DEV_GPU_UTIL{gpu="٣",UUID="GPU-e"} 5': "gpu_index",
        "<html><body>502 Bad Gateway</body></html>": "line",
    }
    odd_mig = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-b",GPU_I_ID="²",GPU_I_PROFILE="x"} 5\n'
    body = good + "\n".join(bad_lines) + "\nSOME_OTHER_EXPORTER_METRIC 1\n" + odd_mig
    result = parse_detailed(body, NOW, "c", "dcgm:http://n1:9400/metrics")
    assert sorted(r.field for r in result.rejects) == sorted(bad_lines.values())
    for r in result.rejects:
        assert r.source == "dcgm:http://n1:9400/metrics" and r.kind == "gpu_sample"
        assert r.reason and r.payload and len(r.payload) <= dcgm.MAX_PAYLOAD_CHARS + 3
        assert len(r.value) <= dcgm.MAX_VALUE_CHARS + 3
    huge_reject = next(r for r in result.rejects if r.field == "pod")
    assert "1025 characters" in huge_reject.reason
    # The real GPU is intact; GPU-b exists with its bad fields NULL, not dropped.
    by_uuid = {s.gpu_uuid: s for s in result.samples if not s.mig_instance}
    assert [s.mig_instance for s in result.samples if s.mig_instance] == ["²"]
    t4 = by_uuid["GPU-d7cbb0cd-d4bd-c2f7-dfaf-221df5e958ea"]
    assert t4.power_watts == pytest.approx(14.512) and t4.memory_total_bytes == 15359 * MIB
    assert by_uuid["GPU-b"].power_watts is None and by_uuid["GPU-b"].gpu_util_ratio is None
    assert "SOME_OTHER_EXPORTER_METRIC" in result.stats.unknown_metrics


REAL_LINES = [ln for name in FILES for ln in read(name).splitlines()]


@st.composite
def hostile_bodies(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            lines.append(draw(st.text(max_size=80)))
        else:
            line = draw(st.sampled_from(REAL_LINES))
            at = draw(st.integers(0, len(line)))
            junk = draw(st.text(alphabet='{}",=\\ \t\n#e+-.0123456789NaIf_x', max_size=8))
            cut = draw(st.integers(0, 6)) if kind == 3 else 0
            lines.append(line[:at] + junk + line[at + cut :])
    return "\n".join(lines)


IDENT_LABELS = [
    "gpu",
    "UUID",
    "uuid",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "Hostname",
    "pod",
    "exported_pod",
    "namespace",
    "modelName",
    "device",
    "hpc_job",
]


LABEL_VALUES = ["0", "1", "GPU-a", "GPU-b", "13", "²", "٣", "9" * 30, ""]  # ² and ٣: isdigit()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def labelled_bodies(draw: st.DrawFn) -> str:
    """Well-formed lines of mapped metrics with arbitrary label values and values."""
    lines = []
    for _ in range(draw(st.integers(1, 12))):
        label_value = st.one_of(st.text(max_size=10), st.sampled_from(LABEL_VALUES))
        labels = draw(st.dictionaries(st.sampled_from(IDENT_LABELS), label_value, max_size=7))
        value = draw(
            st.one_of(
                st.floats(),
                st.integers(-(2**65), 2**65),
                st.sampled_from([*BLANKS, "NaN", "+Inf", "-Inf", "1e400"]),
            )
        )
        text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{draw(st.sampled_from(sorted(FIELDS)))}{{{text}}} {value}")
    return "\n".join(lines)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(hostile_bodies(), labelled_bodies()))
def test_fuzzed_bodies_never_raise_and_yield_valid_samples(body: str) -> None:
    result = parse_detailed(body, NOW, "c")
    for s in result.samples:
        ratios = ("gpu_util_ratio", "gr_engine_active_ratio", "mem_util_ratio")
        for field in (*ratios, "tensor_active_ratio"):
            value = getattr(s, field)
            assert value is None or 0.0 <= value <= 1.0
        for field in ("memory_used_bytes", "energy_millijoules", "sm_clock_mhz", "xid"):
            value = getattr(s, field)
            assert value is None or (isinstance(value, int) and 0 <= value < 2**63)
        assert s.power_watts is None or (math.isfinite(s.power_watts) and s.power_watts >= 0)
        if s.memory_total_bytes is not None:
            assert s.memory_total_bytes >= (s.memory_used_bytes or 0)
        assert s.gpu_uuid and 0 <= s.gpu_index <= 0xFFFF
    for r in result.rejects:
        assert len(r.payload) <= dcgm.MAX_PAYLOAD_CHARS + 3
    samples_frame(result.samples)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_random_text_never_raises(body: str) -> None:
    parse_detailed(body, NOW, "c")


def test_rejects_per_body_are_capped_and_the_rest_counted() -> None:
    body = "<p>not an exporter</p>\n" * (dcgm.MAX_REJECTS + 500)
    rejects = parse(body, NOW, "c")[1]
    assert len(rejects) == dcgm.MAX_REJECTS and rejects[-1].value == "501"


def test_long_line_is_rejected_without_parsing() -> None:
    line = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",x="' + "}" * 70_000 + '"} 5'
    result = parse_detailed(line, NOW, "c")
    assert result.samples == [] and result.rejects[0].field == "line"
    assert "over the" in result.rejects[0].reason


# --------------------------------------------------------------------------- inventory


def test_a100_mig_inventory_from_labels() -> None:
    """The whole GPU keeps the slices no instance holds (6 of 7); the instance holds one."""
    rows = parse_detailed(read(A100), NOW, "c", "dcgm:x", pool="p").inventory
    parent, inst = rows
    assert (parent.gpu_uuid, parent.mig_instance) == (
        "GPU-34319582-d595-d1c7-d1d2-179bcfa61660",
        "",
    )
    assert (inst.gpu_uuid, inst.mig_instance, inst.mig_profile) == (parent.gpu_uuid, "13", "1g.5gb")
    assert parent.capacity_fraction == pytest.approx(6 / 7, abs=1e-6)
    assert inst.capacity_fraction == pytest.approx(1 / 7, abs=1e-6)
    assert parent.memory_total_bytes == (35690 + 4845) * MIB and inst.memory_total_bytes is None
    assert {r.node for r in rows} == {"ub20-a100-k8s"} and {r.pool for r in rows} == {"p"}
    assert {(r.cluster, r.source, r.ts, r.health) for r in rows} == {
        ("c", "dcgm:x", NOW, "healthy")
    }


def test_flex_mode_mig_inventory_shares_add_up() -> None:
    rows = parse_detailed(_flex_mode_body(), NOW, "c").inventory
    assert [(r.mig_instance, r.mig_profile) for r in rows] == [
        ("", ""),
        ("1", "3g.20gb"),
        ("2", "3g.20gb"),
    ]
    assert [round(r.capacity_fraction * 7, 6) for r in rows] == [1, 3, 3]


def test_a_fully_partitioned_gpu_has_no_whole_gpu_row() -> None:
    body = _flex_mode_body().replace("3g.20gb", "7g.40gb").replace('GPU_I_ID="2"', 'GPU_I_ID="1"')
    rows = parse_detailed(body, NOW, "c").inventory
    assert [(r.mig_instance, r.capacity_fraction) for r in rows] == [("1", 1.0)]


@pytest.mark.parametrize(
    ("profile", "model", "share"),
    [
        ("1g.5gb", "NVIDIA A100-SXM4-40GB", 1 / 7),
        ("3g.40gb", "NVIDIA H100 80GB HBM3", 3 / 7),
        ("1g.10gb+me", "NVIDIA H100 80GB HBM3", 1 / 7),
        ("2g.12gb", "NVIDIA A30", 2 / 4),
        ("7g.80gb", "", 1.0),
        ("odd", "", 1 / 7),
    ],
)
def test_mig_fraction(profile: str, model: str, share: float) -> None:
    assert mig_fraction(profile, model) == pytest.approx(share)


def test_inventory_changes_lets_through_new_and_changed_rows_only() -> None:
    rows = parse_detailed(read("l40s_upcloud__cncf_k8s-ai-conformance.prom"), NOW, "c").inventory
    (row,) = rows
    changes = InventoryChanges()
    assert changes.changed(rows) == rows
    later = row._replace(ts=NOW + dt.timedelta(minutes=1))
    assert changes.changed([later]) == []  # the same GPU, only later
    assert changes.changed([later._replace(memory_total_bytes=None)]) == []  # FB fields blank
    updated = later._replace(driver_version="600.1")
    assert changes.changed([updated]) == [updated]
    assert changes.changed([updated._replace(memory_total_bytes=None)]) == []
