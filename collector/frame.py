"""The batch frame: the bytes an agent sends to ``gpuledger serve`` and a spool keeps.

    b"GLB1" | header length (8 bytes, big-endian) | header (JSON) | samples (Arrow IPC file)

The header is a JSON object with a key per record kind (``gpus``, ``nodes``, ``job_events``,
``rejects``, ``processes``, ``health``; a kind with no records may be left out), each a list of
records, each record a JSON list of its fields in the NamedTuple's order (a datetime as
``{"$dt": ISO 8601}``, a tuple as a list). The samples, when there are any, are an Arrow IPC
file with :data:`~collector.records.SAMPLE_SCHEMA`'s columns, compressed (zstd); one from an
agent or spool older than a column in ``ADDED_SAMPLE_COLUMNS`` may lack it (read as null).

:func:`load_batch` checks the *frame* and refuses a malformed one with :class:`BatchFormatError`,
whose message says what is wrong: the magic, a header length that runs past the body, a header
that is not a JSON object (or nests too deeply), an unknown kind, a record that is not a list of
its kind's number of fields, samples that are not an Arrow file, or whose columns are not
SAMPLE_SCHEMA's (each column of a type that converts without loss: any integer type for an
integer column, a time zone-aware timestamp for ``ts``), or that would take more than
``max_decoded_bytes`` once decompressed (measured from the Arrow metadata *before* anything is
decompressed, so a small body cannot expand into a large one).

It does not judge the *values* of fields: a string where an integer belongs, a negative GPU
index, an unknown event is decoded as given (a ``{"$dt": ...}`` that does not parse stays as it
came) and quarantined by the ingest checks with the field, the value and the reason.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from typing import Any

import polars as pl
import pyarrow as pa

from collector.records import (
    ADDED_SAMPLE_COLUMNS,
    SAMPLE_SCHEMA,
    Batch,
    GpuHealth,
    GpuInventory,
    GpuProcess,
    JobEvent,
    NodeInventory,
    Reject,
    samples_frame,
)
from gpuledger_errors import InputError

MAGIC = b"GLB1"
_PREFIX = len(MAGIC) + 8
#: The record kinds of the header: Batch field → record type.
KINDS: dict[str, Any] = {
    "gpus": GpuInventory,
    "nodes": NodeInventory,
    "job_events": JobEvent,
    "rejects": Reject,
    "processes": GpuProcess,
    "health": GpuHealth,
}
#: What samples may decompress to, by default; UNBOUNDED: no limit.
DEFAULT_MAX_DECODED_BYTES = 1 << 30
UNBOUNDED = 1 << 62
_ARROW_MAGIC = b"ARROW1"


class BatchFormatError(InputError):
    """The bytes are not a well-formed batch frame; the message says what is wrong."""


def dump_batch(batch: Batch) -> bytes:
    """Serialise a batch: a JSON header with the small record kinds, then samples as Arrow IPC."""
    header = {kind: [_encode_record(r) for r in getattr(batch, kind)] for kind in KINDS}
    head = json.dumps(header, separators=(",", ":")).encode()
    body = io.BytesIO()
    if len(batch.samples):
        samples_frame(batch.samples).write_ipc(body, compression="zstd")
    return MAGIC + struct.pack(">Q", len(head)) + head + body.getvalue()


def load_batch(data: bytes, max_decoded_bytes: int = DEFAULT_MAX_DECODED_BYTES) -> Batch:
    """The inverse of :func:`dump_batch`; :class:`BatchFormatError` for a malformed frame."""
    if len(data) < _PREFIX or data[: len(MAGIC)] != MAGIC:
        raise BatchFormatError(
            f"the body is not a gpuledger batch: it must start with {MAGIC!r} and an 8-byte "
            f"header length ({len(data)} bytes received)"
        )
    (size,) = struct.unpack(">Q", data[len(MAGIC) : _PREFIX])
    if size > len(data) - _PREFIX:
        raise BatchFormatError(
            f"the header length {size} runs past the end of the body "
            f"({len(data) - _PREFIX} bytes after the length)"
        )
    kinds = _load_header(data[_PREFIX : _PREFIX + size])
    rest = data[_PREFIX + size :]
    samples: pl.DataFrame | tuple[()] = _load_samples(rest, max_decoded_bytes) if rest else ()
    return Batch(samples=samples, **kinds)


# -- the header -------------------------------------------------------------------------------
def _encode_record(record: Any) -> list[Any]:
    out: list[Any] = []
    for value in record:
        if isinstance(value, dt.datetime):
            out.append({"$dt": value.isoformat()})
        elif isinstance(value, tuple):
            out.append(list(value))
        else:
            out.append(value)
    return out


def _load_header(head: bytes) -> dict[str, list[Any]]:
    try:
        header = json.loads(head)
    except RecursionError:
        raise BatchFormatError("the header nests too deeply to be a batch header") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5,000-digit number
        raise BatchFormatError(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise BatchFormatError(
            f"the header must be a JSON object of record kinds, not a {_json_type(header)}"
        )
    unknown = sorted(set(header) - set(KINDS))
    if unknown:
        raise BatchFormatError(
            f"the header has unknown record kinds {unknown}: the kinds are {', '.join(KINDS)}"
        )
    kinds: dict[str, list[Any]] = {}
    for kind, cls in KINDS.items():
        records = header.get(kind, [])
        if not isinstance(records, list):
            raise BatchFormatError(
                f"header kind {kind!r} must be a list of records, not a {_json_type(records)}"
            )
        kinds[kind] = [_decode_record(kind, cls, i, values) for i, values in enumerate(records)]
    return kinds


def _decode_record(kind: str, cls: Any, index: int, values: Any) -> Any:
    """One record as its NamedTuple; field values are kept as they came, but for a datetime
    (``{"$dt": ISO}``) that parses and a list (a tuple)."""
    fields = cls._fields
    if not isinstance(values, list) or len(values) != len(fields):
        what = f"{len(values)} values" if isinstance(values, list) else f"a {_json_type(values)}"
        raise BatchFormatError(
            f"{kind}[{index}] must be a list of the {len(fields)} fields of {cls.__name__} "
            f"({', '.join(fields)}), not {what}"
        )
    return cls(*(_decode_value(v) for v in values))


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("$dt"), str):
        try:
            return dt.datetime.fromisoformat(value["$dt"])
        except ValueError:
            return value  # the checks quarantine the record: ts must be a datetime
    if isinstance(value, list):
        return tuple(value)
    return value


def _json_type(value: Any) -> str:
    names = {dict: "JSON object", list: "JSON list", str: "string", bool: "boolean"}
    return next((n for t, n in names.items() if isinstance(value, t)), type(value).__name__)


# -- the samples ------------------------------------------------------------------------------
def _load_samples(data: bytes, max_decoded_bytes: int) -> pl.DataFrame:
    """The Arrow IPC file after the header, checked: its size once decompressed (before
    decompressing), its validity, its columns and their types."""
    if len(data) < 2 * len(_ARROW_MAGIC) + 4 or not (
        data.startswith(_ARROW_MAGIC) and data.endswith(_ARROW_MAGIC)
    ):
        raise BatchFormatError(
            "the samples after the header are not an Arrow IPC file (the ARROW1 magic is "
            "missing): write them with collector.spool.dump_batch"
        )
    decoded = arrow_decoded_bytes(data)
    if decoded > max_decoded_bytes:
        raise BatchFormatError(
            f"the samples would take {decoded:,} bytes decompressed, more than the "
            f"{max_decoded_bytes:,} allowed: send fewer samples per batch"
        )
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        table.validate(full=True)
    except Exception as exc:  # any failure to read what a client sent is its frame's fault
        raise BatchFormatError(f"the samples are not a readable Arrow IPC file: {exc}") from None
    _check_columns(table.schema)
    try:
        frame = pl.from_arrow(table)
    except (pl.exceptions.PolarsError, pa.ArrowException, ValueError, TypeError) as exc:
        raise BatchFormatError(f"the samples cannot be read as a table: {exc}") from None
    assert isinstance(frame, pl.DataFrame)
    absent = [c for c in ADDED_SAMPLE_COLUMNS if c not in frame.columns]
    if absent:  # written before these columns existed: the source did not report them
        nulls = [pl.lit(None, SAMPLE_SCHEMA[c]).alias(c) for c in absent]
        frame = frame.with_columns(nulls).select(list(SAMPLE_SCHEMA))
    return frame


def _check_columns(schema: pa.Schema) -> None:
    """Refuse samples without SAMPLE_SCHEMA's columns (but those added later), with others, or
    with a column of a type that does not convert without loss (values that do not fit a column
    are quarantined)."""
    names = list(schema.names)
    missing = [c for c in SAMPLE_SCHEMA if c not in names and c not in ADDED_SAMPLE_COLUMNS]
    extra = [c for c in names if c not in SAMPLE_SCHEMA]
    if missing or extra or len(set(names)) != len(names):
        raise BatchFormatError(
            f"the samples' columns must be SAMPLE_SCHEMA's ({', '.join(SAMPLE_SCHEMA)}); "
            f"missing {missing}, unknown {extra}"
            + (", some repeated" if len(set(names)) != len(names) else "")
        )
    for field in schema:
        wanted = SAMPLE_SCHEMA[field.name]
        if not _fits(field.type, wanted):
            raise BatchFormatError(
                f"samples column {field.name!r} is {field.type}, which does not convert to "
                f"{wanted} without loss"
            )


def _fits(given: pa.DataType, wanted: pl.DataType) -> bool:
    t = pa.types
    if t.is_null(given):
        return True
    if t.is_dictionary(given):
        return _fits(given.value_type, wanted)
    if wanted == pl.String():
        return bool(t.is_string(given) or t.is_large_string(given) or t.is_string_view(given))
    if isinstance(wanted, pl.Datetime):
        return bool(t.is_timestamp(given) and given.tz is not None)
    if wanted.is_integer():
        return bool(t.is_integer(given))
    if wanted.is_float():
        return bool(t.is_integer(given) or t.is_floating(given))
    return False


# Arrow's metadata are flatbuffers (https://arrow.apache.org/docs/format/Columnar.html): the
# footer lists the blocks (dictionaries, record batches), each a message whose metadata list
# its buffers; a compressed buffer starts with its decompressed length (8 bytes, -1: stored
# as is). Only the few fields needed to add those lengths up are read.
_BLOCK_BYTES = 24  # Block: offset (int64), metaDataLength (int32, padded), bodyLength (int64)
_BUFFER_BYTES = 16  # Buffer: offset (int64), length (int64)
_DICTIONARY_BATCH, _RECORD_BATCH = 2, 3


def arrow_decoded_bytes(data: bytes) -> int:
    """The bytes the buffers of an Arrow IPC file take once decompressed, read from its
    metadata without decompressing anything; :class:`BatchFormatError` when the metadata are
    not well formed."""
    try:
        return _decoded_bytes(data)
    except Exception as exc:  # pyarrow's reader raises several kinds (EOFError among them)
        raise BatchFormatError(f"the samples' Arrow metadata are not readable: {exc}") from None


def _decoded_bytes(data: bytes) -> int:
    magic = len(_ARROW_MAGIC)
    (footer_len,) = _read("<i", data, len(data) - magic - 4)
    footer_at = len(data) - magic - 4 - footer_len
    if footer_len <= 0 or footer_at < magic:
        raise ValueError(f"footer length {footer_len} does not fit the file")
    footer = _Table.root(data[footer_at : len(data) - magic - 4])
    whole = pa.py_buffer(data)
    total = 0
    for field in (2, 3):  # dictionaries, recordBatches
        for at in footer.structs(field, _BLOCK_BYTES):
            offset, meta_len, _pad, body_len = _read("<qiiq", footer.buf, at)
            if min(offset, meta_len, body_len) < 0 or offset + meta_len + body_len > footer_at:
                raise ValueError(f"block ({offset}, {meta_len}, {body_len}) lies outside the file")
            message = pa.ipc.read_message(whole.slice(offset, meta_len + body_len))
            total += _message_bytes(message)
    return total


def _message_bytes(message: Any) -> int:
    root = _Table.root(message.metadata.to_pybytes())
    kind = root.scalar(1, "<B", 0)
    header = root.table(2)
    if kind == _DICTIONARY_BATCH and header is not None:
        header = header.table(1)
    elif kind != _RECORD_BATCH:
        return 0
    if header is None:
        raise ValueError("a batch message has no header")
    body = message.body.to_pybytes() if message.body is not None else b""
    compressed = header.table(3) is not None
    total = 0
    for at in header.structs(2, _BUFFER_BYTES):
        offset, length = _read("<qq", header.buf, at)
        if offset < 0 or length < 0 or offset + length > len(body):
            raise ValueError(f"a buffer ({offset}, {length}) lies outside its message body")
        if not compressed or length == 0:
            total += length
            continue
        (decoded,) = _read("<q", body, offset)
        if decoded < -1:
            raise ValueError(f"a buffer claims {decoded} bytes decompressed")
        total += length - 8 if decoded == -1 else decoded
    return total


def _read(fmt: str, buf: bytes, at: int) -> tuple[Any, ...]:
    if at < 0 or at + struct.calcsize(fmt) > len(buf):
        raise ValueError(f"a read at {at} lies outside {len(buf)} bytes of metadata")
    return struct.unpack_from(fmt, buf, at)


class _Table:
    """A flatbuffer table at ``pos`` in ``buf``: its fields by index, read with bounds checks."""

    def __init__(self, buf: bytes, pos: int):
        self.buf, self.pos = buf, pos
        (back,) = _read("<i", buf, pos)
        self.vtable = pos - back
        (self.vtable_len,) = _read("<H", buf, self.vtable)

    @classmethod
    def root(cls, buf: bytes) -> _Table:
        (pos,) = _read("<I", buf, 0)
        return cls(buf, pos)

    def _field(self, index: int) -> int:
        entry = 4 + 2 * index
        if entry + 2 > self.vtable_len:
            return 0
        (offset,) = _read("<H", self.buf, self.vtable + entry)
        return self.pos + offset if offset else 0

    def scalar(self, index: int, fmt: str, default: Any) -> Any:
        at = self._field(index)
        return _read(fmt, self.buf, at)[0] if at else default

    def table(self, index: int) -> _Table | None:
        at = self._field(index)
        return _Table(self.buf, at + _read("<I", self.buf, at)[0]) if at else None

    def structs(self, index: int, size: int) -> list[int]:
        """The positions of the elements of a vector of structs of ``size`` bytes."""
        at = self._field(index)
        if not at:
            return []
        vector = at + _read("<I", self.buf, at)[0]
        (count,) = _read("<I", self.buf, vector)
        if vector + 4 + count * size > len(self.buf):
            raise ValueError(f"a vector of {count} elements runs past its metadata")
        return [vector + 4 + i * size for i in range(count)]
