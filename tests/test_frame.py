"""The batch frame's parser (collector.frame.load_batch) against what a client may send:
malformed frames are refused with BatchFormatError and a reason, never another exception;
a compressed sample table is measured before it is decompressed.

The property tests feed it random bytes, random JSON headers and valid frames with bytes
flipped, cut or inserted; every outcome is a Batch or a BatchFormatError.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.frame import MAGIC, BatchFormatError, dump_batch, load_batch
from collector.records import (
    SAMPLE_SCHEMA,
    Batch,
    GpuHealth,
    GpuInventory,
    GpuProcess,
    GpuSample,
    JobEvent,
    NodeInventory,
    Reject,
    samples_frame,
)
from warehouse.ingest.screen import schema_problems

T = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)


def full_batch() -> Batch:
    """One record of every kind and two samples."""
    samples = [
        GpuSample(T, "c1", "n1", f"GPU-{g}", g, "H100", gpu_util_ratio=0.5, source="t")
        for g in range(2)
    ]
    return Batch(
        samples=samples_frame(samples),
        gpus=[GpuInventory(T, "c1", "p", "n1", "GPU-0", 0, "H100", memory_total_bytes=80)],
        nodes=[NodeInventory(T, "c1", "p", "n1", "H100", 8)],
        job_events=[JobEvent(T, "c1", "j1", "started", gpu_uuids=("GPU-0",), started_at=T)],
        rejects=[Reject("dcgm", "gpu_sample", "line", "x{", "cannot parse")],
        processes=[GpuProcess(T, "GPU-0", "", 7, 2**20, 0.5, cluster="c1", node="n1")],
        health=[GpuHealth(T, "GPU-0", 0, 0, cluster="c1", node="n1")],
    )


VALID = dump_batch(full_batch())


def frame(header: object, rest: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return MAGIC + struct.pack(">Q", len(head)) + head + rest


def arrow(df: pl.DataFrame) -> bytes:
    out = io.BytesIO()
    df.write_ipc(out, compression="zstd")
    return out.getvalue()


def test_a_frame_reads_back_as_written() -> None:
    batch = load_batch(VALID)
    original = full_batch()
    for kind in ("gpus", "nodes", "job_events", "rejects", "processes", "health"):
        assert list(getattr(batch, kind)) == list(getattr(original, kind))
    assert isinstance(batch.samples, pl.DataFrame)
    assert batch.samples.equals(samples_frame(original.samples))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "must start with b'GLB1'"),
        (MAGIC + b"abc", "must start with b'GLB1'"),
        (b"GLB2" + bytes(8), "must start with b'GLB1'"),
        (MAGIC + struct.pack(">Q", 2**63) + b"{}", "runs past the end of the body"),
        (frame([["gpus"]]), "must be a JSON object of record kinds, not a JSON list"),
        (frame("gpus"), "not a string"),
        (MAGIC + struct.pack(">Q", 3) + b"{x}", "the header is not JSON"),
        (MAGIC + struct.pack(">Q", 2) + b"\xff\xfe", "the header is not JSON"),
        (frame({"gpus": {}}), "header kind 'gpus' must be a list of records"),
        (frame({"gpuz": []}), "unknown record kinds ['gpuz']"),
        (frame({"gpus": [[1, 2]]}), "gpus[0] must be a list of the 20 fields of GpuInventory"),
        (frame({"nodes": [None]}), "nodes[0] must be a list of the 12 fields"),
        (frame({}, b"garbage that is not arrow"), "not an Arrow IPC file"),
        (frame({}, b"ARROW1\0\0" + b"\0" * 64 + b"ARROW1"), "Arrow metadata are not readable"),
    ],
)
def test_malformed_frames_are_refused_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(BatchFormatError) as refused:
        load_batch(body)
    assert reason in str(refused.value)


def test_a_deeply_nested_header_is_refused() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(BatchFormatError, match="nests too deeply"):
        load_batch(MAGIC + struct.pack(">Q", len(deep)) + deep)


def test_values_of_the_wrong_type_are_decoded_as_given_for_the_checks() -> None:
    """A frame is judged by its structure; what is in a field is the ingest checks' to judge."""
    gpu = json.loads(VALID[12 : 12 + struct.unpack(">Q", VALID[4:12])[0]])["gpus"][0]
    gpu[1], gpu[5], gpu[11] = 123, "abc", "80"  # cluster, gpu_index, memory_total_bytes
    gpu[0] = {"$dt": "yesterday"}
    batch = load_batch(frame({"gpus": [gpu]}))
    (record,) = batch.gpus
    assert (record.ts, record.cluster, record.gpu_index) == ({"$dt": "yesterday"}, 123, "abc")


def test_sample_columns_must_be_the_schema_s() -> None:
    good = samples_frame(full_batch().samples)
    with pytest.raises(BatchFormatError, match=r"missing \['xid'\], unknown \[\]"):
        load_batch(frame({}, arrow(good.drop("xid"))))
    with pytest.raises(BatchFormatError, match=r"unknown \['extra'\]"):
        load_batch(frame({}, arrow(good.with_columns(extra=pl.lit(1)))))
    as_text = good.with_columns(pl.col("memory_total_bytes").cast(pl.String))
    with pytest.raises(BatchFormatError, match="'memory_total_bytes' is string_view, which"):
        load_batch(frame({}, arrow(as_text)))
    naive = good.with_columns(pl.col("ts").dt.replace_time_zone(None))
    with pytest.raises(BatchFormatError, match="'ts' is timestamp"):
        load_batch(frame({}, arrow(naive)))
    # wider integers and other time zones convert without loss: values are checked later
    wide = good.with_columns(
        pl.col("gpu_index").cast(pl.Int64) - 1, pl.col("ts").dt.convert_time_zone("Asia/Tokyo")
    )
    samples = load_batch(frame({}, arrow(wide))).samples
    assert isinstance(samples, pl.DataFrame) and samples["gpu_index"].to_list() == [-1, 0]


def test_samples_from_before_a_column_was_added_read_it_as_null() -> None:
    """An agent or spool older than tensor_active_ratio sends samples without it: accepted,
    the column null, in SAMPLE_SCHEMA's order (any other missing column is still refused)."""
    old = samples_frame(full_batch().samples).drop("tensor_active_ratio")
    samples = load_batch(frame({}, arrow(old))).samples
    assert isinstance(samples, pl.DataFrame) and samples.columns == list(SAMPLE_SCHEMA)
    assert samples["tensor_active_ratio"].to_list() == [None, None]
    assert samples.drop("tensor_active_ratio").equals(old)


def test_samples_are_measured_before_they_are_decompressed() -> None:
    """A few kilobytes of zstd that would expand to a quarter of a gigabyte are refused unread."""
    rows = 1_000_000
    zeros = pl.select(
        pl.repeat(pl.lit(T, SAMPLE_SCHEMA["ts"]), rows).alias("ts"),
        *(pl.repeat(None, rows, dtype=t).alias(c) for c, t in SAMPLE_SCHEMA.items() if c != "ts"),
    )
    body = frame({}, arrow(zeros))
    assert len(body) < 100_000
    with pytest.raises(BatchFormatError, match=r"would take 261,000,000 bytes decompr"):
        load_batch(body, max_decoded_bytes=10_000_000)


# -- properties -------------------------------------------------------------------------------
def outcome(data: bytes) -> None:
    """load_batch answers with a Batch or a BatchFormatError, nothing else; what it decodes,
    the route's schema checks judge without failing either."""
    try:
        batch = load_batch(data, max_decoded_bytes=1 << 24)
    except BatchFormatError as exc:
        assert str(exc)
    else:
        assert isinstance(batch, Batch)
        for problem in schema_problems(batch):
            assert problem["reason"]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.fixed_dictionaries({"$dt": st.text(max_size=30)}),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    outcome(data)
    outcome(MAGIC + data)
    outcome(MAGIC + struct.pack(">Q", len(data)) + data)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["gpus", "nodes", "job_events", "rejects", "processes", "health", "x"]),
        st.lists(st.lists(json_values, min_size=0, max_size=26) | json_values, max_size=3),
        max_size=4,
    )
    | json_values
)
def test_random_headers(header: object) -> None:
    outcome(frame(header))


@FUZZ
@given(st.data())
def test_mutated_frames(data: st.DataObject) -> None:
    body = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(body) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        if action == "flip":
            body[at] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del body[at : at + data.draw(st.integers(1, 16))]
        elif action == "insert":
            body[at:at] = data.draw(st.binary(min_size=1, max_size=16))
        else:
            del body[at:]
        if not body:
            break
    outcome(bytes(body))


@FUZZ
@given(st.data())
def test_mutated_sample_tables(data: st.DataObject) -> None:
    """Mutations inside the Arrow file, where the metadata and the compressed buffers are."""
    head_len = struct.unpack(">Q", VALID[4:12])[0]
    table = bytearray(VALID[12 + head_len :])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(table) - 1))
        table[at] = data.draw(st.integers(0, 255))
    outcome(VALID[: 12 + head_len] + bytes(table))
