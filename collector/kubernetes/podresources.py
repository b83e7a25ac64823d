"""The kubelet's pod-resources API: which pod and container holds each GPU of this node.

NVML tells a process's pod only by the UID in its cgroup path; the kubelet knows names. It
serves the gRPC service ``v1.PodResourcesLister`` on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``), whose ``List`` answers, for every pod on the
node, the devices each container was assigned by device plugins. The NVIDIA device plugin names
GPUs by UUID (``GPU-…``), MIG devices by MIG UUID (``MIG-…``), time-sliced replicas as
``<id>::<n>``, and, with ``DEVICE_ID_STRATEGY=index``, by index. The equivalent command is
``grpcurl -plaintext -unix /var/lib/kubelet/pod-resources/kubelet.sock
v1.PodResourcesLister/List``.

The messages are decoded here from the protobuf wire format (only the fields used; unknown
fields of every wire type are skipped, so newer kubelets that add fields still parse), with no
generated code. :class:`PodResourcesEnricher` labels samples with what the kubelet says.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol

import grpc
import polars as pl

from collector.nvml import NvmlBackend, NvmlCallError
from collector.records import Batch, GpuSample
from gpuledger_errors import SourceError

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
#: The kubelet's own clients accept answers up to 16 MiB; gRPC's default is 4 MiB.
MAX_MESSAGE_BYTES = 16 * 2**20
SETTING = "agent.pod_resources_socket"


class PodResourcesError(SourceError):
    """The kubelet's pod-resources API could not be read; the message says what to do."""


class ProtocolError(PodResourcesError):
    """The bytes are not a well-formed protobuf message of the expected shape."""


# -- protobuf wire format ----------------------------------------------------------------------
VARINT, I64, LEN, SGROUP, EGROUP, I32 = range(6)
_MASK64 = (1 << 64) - 1
_MAX_FIELD = (1 << 29) - 1


def encode_varint(value: int) -> bytes:
    """Base-128 varint; a negative value is its 64-bit two's complement (ten bytes, as int64)."""
    if value < 0:
        value &= _MASK64
    if value > _MASK64:
        raise ValueError(f"{value} does not fit in 64 bits")
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` (as an unsigned 64-bit value) and the position after it."""
    result = 0
    for shift in range(0, 70, 7):
        if pos >= len(data):
            raise ProtocolError(f"truncated varint at byte {pos}")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _MASK64, pos
    raise ProtocolError(f"varint longer than 10 bytes ending at byte {pos}")


def field_key(number: int, wire: int) -> bytes:
    """The tag that starts a field: its number and wire type."""
    if not 1 <= number <= _MAX_FIELD or not 0 <= wire <= 5:
        raise ValueError(f"field {number} wire type {wire} cannot be encoded")
    return encode_varint(number << 3 | wire)


def len_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (string, bytes, embedded message, packed numbers)."""
    return field_key(number, LEN) + encode_varint(len(payload)) + payload


def varint_field(number: int, value: int) -> bytes:
    return field_key(number, VARINT) + encode_varint(value)


def _take(data: bytes, pos: int, size: int) -> tuple[bytes, int]:
    if size > len(data) - pos:
        raise ProtocolError(f"field of {size} bytes at byte {pos} runs past the end")
    return data[pos : pos + size], pos + size


def _read_key(data: bytes, pos: int) -> tuple[int, int, int]:
    key, pos = decode_varint(data, pos)
    number, wire = key >> 3, key & 7
    if not 1 <= number <= _MAX_FIELD:
        raise ProtocolError(f"invalid field number {number} at byte {pos}")
    return number, wire, pos


def _read_value(data: bytes, pos: int, wire: int) -> tuple[int | bytes, int]:
    """The value of a non-group field; fixed-width numbers as unsigned little-endian ints."""
    if wire == VARINT:
        return decode_varint(data, pos)
    if wire in (I64, I32):
        raw, pos = _take(data, pos, 8 if wire == I64 else 4)
        return int.from_bytes(raw, "little"), pos
    if wire == LEN:
        size, pos = decode_varint(data, pos)
        return _take(data, pos, size)
    raise ProtocolError(f"invalid wire type {wire} before byte {pos}")


def _skip_group(data: bytes, pos: int, number: int) -> int:
    """Skip a (deprecated, proto2) group up to its matching end tag; returns the position after."""
    open_groups = [number]
    while open_groups:
        if pos >= len(data):
            raise ProtocolError(f"group {open_groups[-1]} is not closed")
        inner, wire, pos = _read_key(data, pos)
        if wire == SGROUP:
            open_groups.append(inner)
        elif wire == EGROUP:
            if inner != open_groups.pop():
                raise ProtocolError(f"end of group {inner} does not match its start")
        else:
            _, pos = _read_value(data, pos, wire)
    return pos


def iter_fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field number, wire type, value)`` for each field of a message, in order.

    Groups are skipped whole (no field here is one); malformed input raises
    :class:`ProtocolError` naming the byte where it went wrong.
    """
    pos = 0
    while pos < len(data):
        number, wire, pos = _read_key(data, pos)
        if wire == SGROUP:
            pos = _skip_group(data, pos, number)
            continue
        if wire == EGROUP:
            raise ProtocolError(f"end of group {number} without its start, before byte {pos}")
        value, pos = _read_value(data, pos, wire)
        yield number, wire, value


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _string(value: bytes, what: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} is not valid UTF-8: {exc}") from None


def _int64s(value: int | bytes) -> list[int]:
    """A repeated int64 field's values from one occurrence: packed (LEN) or one varint."""
    if isinstance(value, int):
        return [_int64(value)]
    out, pos = [], 0
    while pos < len(value):
        item, pos = decode_varint(value, pos)
        out.append(_int64(item))
    return out


# -- the messages (fields gpuledger reads; the rest is skipped) --------------------------------
@dataclasses.dataclass(frozen=True)
class ContainerDevices:
    """Devices of one resource assigned to a container (``ContainerDevices``)."""

    resource_name: str  # field 1, e.g. "nvidia.com/gpu"
    device_ids: tuple[str, ...] = ()  # field 2
    numa_nodes: tuple[int, ...] = ()  # field 3: TopologyInfo{repeated NUMANode{int64 ID=1}=1}


@dataclasses.dataclass(frozen=True)
class ContainerResources:
    """One container's assigned resources (``ContainerResources``; memory and dynamic
    resources, fields 4 and 5, are not read)."""

    name: str  # field 1
    devices: tuple[ContainerDevices, ...] = ()  # field 2
    cpu_ids: tuple[int, ...] = ()  # field 3, exclusive CPUs from the CPU manager


@dataclasses.dataclass(frozen=True)
class PodResources:
    """One pod and its containers (``PodResources``)."""

    name: str  # field 1
    namespace: str  # field 2
    containers: tuple[ContainerResources, ...] = ()  # field 3


def _decode_numa_nodes(data: bytes) -> list[int]:
    nodes = []
    for number, _, value in iter_fields(data):
        if number == 1 and isinstance(value, bytes):  # NUMANode
            node_id = 0
            for inner, _, v in iter_fields(value):
                if inner == 1 and isinstance(v, int):
                    node_id = _int64(v)
            nodes.append(node_id)
    return nodes


def _decode_devices(data: bytes) -> ContainerDevices:
    name, ids, numa = "", [], []
    for number, _, value in iter_fields(data):
        if isinstance(value, bytes):  # a known field with another wire type is skipped
            if number == 1:
                name = _string(value, "ContainerDevices.resource_name")
            elif number == 2:
                ids.append(_string(value, "ContainerDevices.device_ids"))
            elif number == 3:  # a repeated occurrence of a message field merges into it
                numa += _decode_numa_nodes(value)
    return ContainerDevices(name, tuple(ids), tuple(numa))


def _decode_container(data: bytes) -> ContainerResources:
    name, devices, cpus = "", [], []
    for number, wire, value in iter_fields(data):
        if number == 1 and isinstance(value, bytes):
            name = _string(value, "ContainerResources.name")
        elif number == 2 and isinstance(value, bytes):
            devices.append(_decode_devices(value))
        elif number == 3 and wire in (VARINT, LEN):
            cpus += _int64s(value)
    return ContainerResources(name, tuple(devices), tuple(cpus))


def _decode_pod(data: bytes) -> PodResources:
    name, namespace, containers = "", "", []
    for number, _, value in iter_fields(data):
        if not isinstance(value, bytes):
            continue
        if number == 1:
            name = _string(value, "PodResources.name")
        elif number == 2:
            namespace = _string(value, "PodResources.namespace")
        elif number == 3:
            containers.append(_decode_container(value))
    return PodResources(name, namespace, tuple(containers))


def decode_list_response(data: bytes) -> list[PodResources]:
    """``ListPodResourcesResponse{repeated PodResources pod_resources = 1}`` from its bytes."""
    return [
        _decode_pod(value)
        for number, _, value in iter_fields(bytes(data))
        if number == 1 and isinstance(value, bytes)
    ]


def _encode_devices(d: ContainerDevices) -> bytes:
    out = len_field(1, d.resource_name.encode()) if d.resource_name else b""
    out += b"".join(len_field(2, i.encode()) for i in d.device_ids)
    if d.numa_nodes:
        nodes = b"".join(len_field(1, varint_field(1, n) if n else b"") for n in d.numa_nodes)
        out += len_field(3, nodes)
    return out


def _encode_container(c: ContainerResources) -> bytes:
    out = len_field(1, c.name.encode()) if c.name else b""
    out += b"".join(len_field(2, _encode_devices(d)) for d in c.devices)
    if c.cpu_ids:
        out += len_field(3, b"".join(encode_varint(i) for i in c.cpu_ids))
    return out


def encode_pod(p: PodResources) -> bytes:
    out = len_field(1, p.name.encode()) if p.name else b""
    out += len_field(2, p.namespace.encode()) if p.namespace else b""
    return out + b"".join(len_field(3, _encode_container(c)) for c in p.containers)


def encode_list_response(pods: Iterable[PodResources]) -> bytes:
    """The canonical proto3 encoding of a ``ListPodResourcesResponse`` (what a kubelet sends)."""
    return b"".join(len_field(1, encode_pod(p)) for p in pods)


def encode_list_request(_request: object = None) -> bytes:
    """``ListPodResourcesRequest{}`` has no fields: its encoding is empty."""
    return b""


# -- the client --------------------------------------------------------------------------------
def _missing(path: str) -> PodResourcesError:
    return PodResourcesError(
        f"the kubelet's pod-resources socket {path} does not exist: on a Kubernetes node, mount "
        f"the host's {os.path.dirname(DEFAULT_SOCKET)} into the agent (hostPath) or set "
        f"{SETTING} to where the socket is; empty turns pod labels off"
    )


def _denied(path: str) -> PodResourcesError:
    return PodResourcesError(
        f"permission denied on the kubelet's pod-resources socket {path}: the agent needs read "
        "and write access to it (connecting to a unix socket needs both); run the agent as "
        f"root or as the socket's owner, or empty {SETTING} to turn pod labels off"
    )


class PodResourcesClient:
    """Calls ``v1.PodResourcesLister/List`` on the kubelet's unix socket through gRPC.

    One channel, reused (gRPC reconnects by itself); every call has a deadline of
    ``timeout_s``. Errors become :class:`PodResourcesError` saying what to do.
    """

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout_s: float = 5.0):
        self.socket_path = os.path.abspath(socket_path)
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(
            "unix:" + self.socket_path,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.initial_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 5000),
            ],
        )
        # The answer is decoded after the call, not by gRPC, so a malformed message is
        # reported with its reason rather than as gRPC's generic deserialisation failure.
        self._list = self._channel.unary_unary(
            LIST_METHOD, request_serializer=encode_list_request, response_deserializer=bytes
        )

    def list(self) -> list[PodResources]:
        """Every pod on the node with the devices assigned to its containers."""
        self._check_socket()
        try:
            raw = self._list(None, timeout=self.timeout_s)
        except grpc.RpcError as err:
            raise self._explain(err) from None
        try:
            return decode_list_response(raw)
        except ProtocolError as err:
            raise ProtocolError(
                f"the kubelet at {self.socket_path} answered List with {err}"
            ) from None

    def _check_socket(self) -> None:
        path = self.socket_path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise _missing(path) from None
        except PermissionError:
            raise _denied(path) from None
        if not stat.S_ISSOCK(st.st_mode):
            raise PodResourcesError(f"{path} is not a unix socket: check {SETTING}")
        if not os.access(path, os.R_OK | os.W_OK):
            raise _denied(path)

    def _explain(self, err: grpc.RpcError) -> PodResourcesError:
        code = err.code() if isinstance(err, grpc.Call) else None
        detail = err.details() if isinstance(err, grpc.Call) else str(err)
        path, text = self.socket_path, str(detail or "")
        if "Permission denied" in text:
            return _denied(path)
        if "No such file" in text:
            return _missing(path)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return PodResourcesError(
                f"the kubelet at {path} did not answer List within {self.timeout_s:g} s"
            )
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return PodResourcesError(
                f"the kubelet at {path} does not serve {LIST_METHOD} (Kubernetes 1.20 or later "
                f"serves it); empty {SETTING} to turn pod labels off"
            )
        if code == grpc.StatusCode.UNAVAILABLE:
            return PodResourcesError(
                f"the kubelet's pod-resources socket {path} is not answering ({text}): "
                "is the kubelet running?"
            )
        name = code.name if code is not None else "error"
        return PodResourcesError(f"the kubelet at {path} failed List: {name}: {text}")

    def close(self) -> None:
        self._channel.close()


# -- pods → GPUs -------------------------------------------------------------------------------
class PodRef(NamedTuple):
    """Who holds a device; ordered by namespace, then pod, then container."""

    namespace: str
    pod: str
    container: str


class GpuSlot(NamedTuple):
    """A whole GPU (``mig_instance`` "") or one MIG GPU instance, as samples key them."""

    gpu_uuid: str
    mig_instance: str = ""


_GPU_RESOURCE = re.compile(r"^nvidia\.com/(gpu(\.shared)?|mig-.+)$")
_LEGACY_MIG = re.compile(r"^MIG-(GPU-[^/]+)/(\d+)/\d+$")  # drivers before 470


def is_gpu_resource(name: str) -> bool:
    """``nvidia.com/gpu``, ``nvidia.com/gpu.shared`` and ``nvidia.com/mig-<profile>[.shared]``."""
    return _GPU_RESOURCE.match(name) is not None


def gpu_assignments(pods: Iterable[PodResources]) -> dict[str, list[PodRef]]:
    """Device id (as the device plugin names it) → the containers it is assigned to."""
    out: dict[str, list[PodRef]] = {}
    for pod in pods:
        for container in pod.containers:
            ref = PodRef(pod.namespace, pod.name, container.name)
            for devices in container.devices:
                if is_gpu_resource(devices.resource_name):
                    for device_id in devices.device_ids:
                        out.setdefault(device_id, []).append(ref)
    return out


def resolve_device_id(
    device_id: str, by_index: Mapping[int, str], mig_uuids: Mapping[str, GpuSlot]
) -> GpuSlot | None:
    """The GPU or MIG instance a device id names, or None when it cannot be told.

    ``GPU-…`` is a GPU's UUID; ``MIG-GPU-<uuid>/<gi>/<ci>`` a MIG device in the old format;
    ``MIG-…`` a MIG device's UUID (looked up in ``mig_uuids``); a number is a GPU index
    (looked up in ``by_index``). A time-sliced replica's ``::<n>`` suffix is dropped.
    """
    base = device_id.split("::", 1)[0]
    if base.startswith("GPU-"):
        return GpuSlot(base)
    if m := _LEGACY_MIG.match(base):
        return GpuSlot(m[1], m[2])
    if base.startswith("MIG-"):
        return mig_uuids.get(base)
    if base.isdigit() and int(base) in by_index:
        return GpuSlot(by_index[int(base)])
    return None


def nvml_mig_uuids(backend: NvmlBackend) -> dict[str, GpuSlot]:
    """MIG device UUID → (parent GPU UUID, GPU-instance id), as ``nvidia-smi -L`` lists them.

    A GPU that cannot be read (or has no MIG mode) contributes nothing.
    """
    out: dict[str, GpuSlot] = {}
    for index in range(backend.device_count()):
        try:
            h = backend.device_handle(index)
            if not backend.mig_enabled(h):
                continue
            parent = backend.uuid(h)
            for mig in backend.mig_devices(h):
                out[backend.uuid(mig.handle)] = GpuSlot(parent, str(mig.gpu_instance_id))
        except NvmlCallError as err:
            log.debug("MIG UUIDs of GPU %d not read: %s", index, err)
    return out


class Lister(Protocol):
    def list(self) -> list[PodResources]: ...


class PodResourcesEnricher:
    """Labels samples with the pod, namespace and container their GPU is assigned to.

    A pipeline enricher (``Batch`` → ``Batch``). It asks the kubelet (``lister``) at most every
    ``refresh_s`` seconds and keeps the answer in between. Samples that already carry a pod
    keep it. A GPU or MIG instance held by several containers (a time-sliced or shared GPU)
    is labelled with the first of them in (namespace, pod, container) order, so the same
    assignment always gives the same label and no utilisation is counted twice.

    Device ids that are indices are mapped to UUIDs through the samples and inventory rows of
    ``node`` (every node when None) seen so far; MIG UUIDs through ``mig_uuids`` (e.g. NVML's
    list, :func:`nvml_mig_uuids`), asked again at each refresh. An id that still cannot be
    resolved is ignored, logged once.

    Best effort: when the kubelet cannot be asked, the error is logged (once until it changes
    or recovers) and counted in ``errors``, and samples pass unlabelled until it answers again;
    a batch is never lost or held up for it. GPU process rows carry no pod name columns, so
    only samples are labelled.
    """

    name = "pod_resources"

    def __init__(
        self,
        lister: Lister,
        *,
        node: str | None = None,
        refresh_s: float = 10.0,
        mig_uuids: Callable[[], Mapping[str, GpuSlot]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.lister, self.node, self.refresh_s = lister, node, refresh_s
        self.mig_uuids, self.clock = mig_uuids, clock
        self.errors = 0
        self.last_error = ""
        self._assigned: dict[str, list[PodRef]] = {}
        self._migs: Mapping[str, GpuSlot] = {}
        self._asked_at: float | None = None
        self._by_index: dict[int, str] = {}
        self._unresolved: set[str] = set()

    def __call__(self, batch: Batch) -> Batch:
        try:
            self._learn_indices(batch)
            if not len(batch.samples):
                return batch
            slots = self.slots()
            if not slots:
                return batch
            return dataclasses.replace(batch, samples=label_samples(batch.samples, slots))
        except Exception:  # a labelling bug must never cost the batch
            log.exception("pod labels not applied to this batch")
            return batch

    def slots(self) -> dict[GpuSlot, PodRef]:
        """The current GPU/MIG instance → holder map (asking the kubelet if it is due)."""
        self._refresh()
        holders: dict[GpuSlot, list[PodRef]] = {}
        for device_id, refs in self._assigned.items():
            slot = resolve_device_id(device_id, self._by_index, self._migs)
            if slot is None:
                self._log_unresolved(device_id)
                continue
            holders.setdefault(slot, []).extend(refs)
        return {slot: min(refs) for slot, refs in holders.items()}

    def _refresh(self) -> None:
        now = self.clock()
        if self._asked_at is not None and now - self._asked_at < self.refresh_s:
            return
        self._asked_at = now
        try:
            self._assigned = gpu_assignments(self.lister.list())
        except PodResourcesError as err:
            self._assigned = {}  # stale labels would misattribute: unlabelled until it answers
            self.errors += 1
            if str(err) != self.last_error:
                log.error("pod labels unavailable: %s", err)
            self.last_error = str(err)
            return
        if self.last_error:
            log.info("the kubelet's pod-resources API answers again; labelling samples")
            self.last_error = ""
        needs_migs = any(i.startswith("MIG-") and not _LEGACY_MIG.match(i) for i in self._assigned)
        if needs_migs and self.mig_uuids is not None:
            self._migs = self.mig_uuids()

    def _learn_indices(self, batch: Batch) -> None:
        rows: list[tuple[int, str]] = [
            (g.gpu_index, g.gpu_uuid)
            for g in batch.gpus
            if not g.mig_instance and self.node in (None, g.node)
        ]
        samples = batch.samples
        if isinstance(samples, pl.DataFrame):
            whole = samples.filter(pl.col("mig_instance") == "")
            if self.node is not None:
                whole = whole.filter(pl.col("node") == self.node)
            rows += whole.select("gpu_index", "gpu_uuid").unique().rows()
        else:
            rows += [
                (s.gpu_index, s.gpu_uuid)
                for s in samples
                if not s.mig_instance and self.node in (None, s.node)
            ]
        self._by_index.update(rows)

    def _log_unresolved(self, device_id: str) -> None:
        if device_id in self._unresolved:
            return
        self._unresolved.add(device_id)
        log.warning(
            "the kubelet assigns GPU device %r, which names no GPU or MIG instance sampled on "
            "this node; its pod is not labelled (logged once)",
            device_id,
        )


def label_samples(
    samples: pl.DataFrame | Sequence[GpuSample], slots: Mapping[GpuSlot, PodRef]
) -> pl.DataFrame | list[GpuSample]:
    """Fill ``pod``, ``namespace`` and ``container`` of samples whose ``pod`` is empty and
    whose (``gpu_uuid``, ``mig_instance``) is in ``slots``."""
    if not isinstance(samples, pl.DataFrame):
        out = []
        for s in samples:
            ref = None if s.pod else slots.get(GpuSlot(s.gpu_uuid, s.mig_instance))
            out.append(
                s._replace(pod=ref.pod, namespace=ref.namespace, container=ref.container)
                if ref
                else s
            )
        return out
    table = pl.DataFrame(
        [
            (slot.gpu_uuid, slot.mig_instance, r.pod, r.namespace, r.container)
            for slot, r in slots.items()
        ],
        schema=dict.fromkeys(
            ("gpu_uuid", "mig_instance", "_pod", "_namespace", "_container"), pl.String()
        ),
        orient="row",
    )
    joined = samples.join(table, on=["gpu_uuid", "mig_instance"], how="left", maintain_order="left")
    take = (pl.col("pod") == "") & pl.col("_pod").is_not_null()
    return joined.with_columns(
        pl.when(take).then(pl.col(f"_{c}")).otherwise(pl.col(c)).alias(c)
        for c in ("pod", "namespace", "container")
    ).drop("_pod", "_namespace", "_container")
