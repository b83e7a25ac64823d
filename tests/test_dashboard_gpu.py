"""The GPU page on the hand-made cluster of ``moment_fixture``: a manager sees the GPU's
telemetry and every job that held it; a tenant sees the GPU only while its own jobs held it,
and a GPU it never held (or one that does not exist) reads the same."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import moment_fixture as m
import pytest
from conftest import fresh_database
from dash_helpers import GPU, outputs, update

from collector.records import GpuInventory, GpuSample
from dashboards.app import create_app
from dashboards.context import Viewer
from warehouse.analytics import gpu
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor

STATE = f"?from={m.DAY}&to={m.DAY}"


@pytest.fixture(scope="module")
def moment(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield m.write(wh)


#: A hand-made GPU, g-tc, sampled every 15 s for three minutes from T + 1 h (None: the sample
#: has no value there). Its means leave the None out:
#:
#:   minute  SM clock MHz            tensor active       SM clock mean   tensor mean
#:   0       1410 1410 1980 None     0.25 0.5  None 0.75 1600            0.5
#:   1       1980 1980 1980 1980     None None None None 1980            None
#:   2       None None None None     0    0    1    1    None            0.5
#:   all     (2 x 1410 + 5 x 1980) / 7 = 1817.142857...  3.5 / 7 = 0.5
CLOCK = [1410, 1410, 1980, None, 1980, 1980, 1980, 1980, None, None, None, None]
TENSOR = [0.25, 0.5, None, 0.75, None, None, None, None, 0.0, 0.0, 1.0, 1.0]


@pytest.fixture(scope="module")
def tensor_gpu(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        ing = Ingestor(wh, 35, now=lambda: m.NOW)
        gpus = [GpuInventory(m.at(-24), "c1", "p1", "n1", "g-tc", 0, "H100")]
        assert ing.write_gpus(gpus).quarantined_total == 0
        samples = [
            GpuSample(
                m.at(1) + dt.timedelta(seconds=15 * i), "c1", "n1", "g-tc", 0, "H100",
                gpu_util_ratio=0.5, sm_clock_mhz=clock, tensor_active_ratio=tensor,
            )
            for i, (clock, tensor) in enumerate(zip(CLOCK, TENSOR, strict=True))
        ]  # fmt: skip
        assert ing.write_samples(samples).quarantined_total == 0
        yield wh


def _page(wh: Warehouse, role: str, uuid: str, state: str = STATE) -> dict[str, Any]:
    who = Viewer("someone", role)
    client = create_app(wh, viewer=lambda: who, now=lambda: m.NOW).server.test_client()
    inputs = [("filters-state", "data", state), ("gpu-uuid", "data", uuid)]
    return outputs(update(client, GPU, inputs))


def _times(figure: dict[str, Any]) -> list[dt.datetime]:
    """Every x of the figure's traces, as UTC times."""
    return [
        dt.datetime.fromisoformat(x).replace(tzinfo=dt.UTC)
        if "+" not in x
        else dt.datetime.fromisoformat(x)
        for trace in figure["data"]
        for x in trace.get("x", [])
    ]


def test_a_manager_sees_every_hold_and_how_much_of_it_was_idle(moment: Warehouse) -> None:
    got = _page(moment, "manager", "g-half")
    holds = {r["job_id"]: r for r in got["gpu-holds"]["rowData"]}
    assert sorted(holds) == ["j-half", "j-prev"]
    assert (holds["j-prev"]["tenant"], holds["j-prev"]["idle_gpu_hours"]) == ("team-x/a", 3.0)
    assert (holds["j-half"]["held_gpu_hours"], holds["j-half"]["idle_gpu_hours"]) == (0.5, 0.5)
    assert holds["j-half"]["end"] == "still held"
    identity = json.dumps(got["gpu-identity"]["children"])
    assert "H100" in identity and "n1" in identity
    panels = got["gpu-telemetry"]["figure"]
    names = [t["name"] for t in panels["data"]]
    assert names[:2] == ["Utilisation (mean)", "Utilisation (busiest sample)"]
    assert "Power W" in names and "Temperature °C" in names and "Memory used GiB" in names
    # the fixture's samples have an SM clock (1500 MHz) but no tensor activity: said so
    clock = next(t for t in panels["data"] if t["name"] == "SM clock MHz")
    assert clock["y"] and all(v == pytest.approx(1500) for v in clock["y"])
    assert "Tensor active %" not in names
    notes = [a["text"] for a in panels["layout"]["annotations"]]
    assert notes.count("Not reported by this GPU's source") == 1
    util = panels["data"][0]["y"]
    assert util and all(v == pytest.approx(1.0) for v in util)  # 1 % all along
    times = _times(panels)
    assert min(times) == m.at(-1) and max(times) < m.NOW  # samples from T - 1 h
    (idle,) = [t for t in got["gpu-timeline"]["figure"]["data"] if t["line"]["color"] == "#d9534f"]
    assert idle["x"].count(None) == 2  # one idle stretch per hold, each ended by a gap


def test_a_tenant_sees_the_gpu_only_while_its_jobs_held_it(moment: Warehouse) -> None:
    got = _page(moment, "tenant:team-y", "g-half")
    assert [r["job_id"] for r in got["gpu-holds"]["rowData"]] == ["j-half"]
    text = json.dumps(got)
    assert "team-x" not in text and "j-prev" not in text
    times = _times(got["gpu-telemetry"]["figure"])
    held_from = m.NOW - dt.timedelta(hours=1)
    assert times and min(times) >= held_from and max(times) < m.NOW
    # the manager's view of the same GPU has the hour before, held by team-x
    assert min(_times(_page(moment, "manager", "g-half")["gpu-telemetry"]["figure"])) < held_from


@pytest.mark.parametrize("uuid", ["g-idle", "no-such-gpu"])
def test_a_gpu_the_tenant_never_held_shows_nothing(moment: Warehouse, uuid: str) -> None:
    got = _page(moment, "tenant:team-y", uuid)
    assert f"No job of team-y held GPU {uuid}" in json.dumps(got["gpu-message"])
    assert got["gpu-holds"]["rowData"] == [] and got["gpu-identity"]["children"] == []
    assert _times(got["gpu-telemetry"]["figure"]) == []
    assert "team-x" not in json.dumps(got) and "H100" not in json.dumps(got)


def test_a_forged_callback_for_another_tenant_is_refused(moment: Warehouse) -> None:
    got = _page(moment, "tenant:team-y", "g-half", STATE + "&tenant=team-x")
    assert "may see the figures of tenant" in json.dumps(got["gpu-message"])
    assert got["gpu-holds"]["rowData"] == [] and "j-prev" not in json.dumps(got)


def test_an_unknown_gpu_is_said_so_to_a_manager(moment: Warehouse) -> None:
    got = _page(moment, "manager", "no-such-gpu")
    assert "not in the warehouse's inventory" in json.dumps(got["gpu-message"])


def test_the_page_is_served(moment: Warehouse) -> None:
    client = create_app(moment, now=lambda: m.NOW).server.test_client()
    assert client.get("/gpu/g-half").status_code == 200


def test_a_hold_starting_inside_a_bucket_shows_none_of_the_minutes_before_it(
    moment: Warehouse,
) -> None:
    """Only minutes wholly inside the holds are read, and each bucket is dated by its first
    one: a hold from 12:03:30 shows 12:04 onwards, never 12:00."""
    start = m.NOW - dt.timedelta(minutes=56, seconds=30)
    frame = gpu.telemetry(
        moment, "c1", "g-half", m.at(-1), m.NOW, within=[(start, m.NOW)], step_s=300
    )
    assert frame["t"].min() == m.NOW - dt.timedelta(minutes=56)
    assert int(frame["minutes"].sum()) == 56
    assert frame["bucket"].min() < frame["t"].min()  # the bucket itself begins before the hold
    everything = gpu.telemetry(moment, "c1", "g-half", m.at(-1), m.NOW, step_s=300)
    assert int(everything["minutes"].sum()) == 240


def test_the_means_of_sm_clock_and_tensor_activity_are_the_raw_samples(
    tensor_gpu: Warehouse,
) -> None:
    """The 1-minute rollup keeps sums and counts, so the page's means (per minute, and per
    5-minute bucket as the page draws a day) are the raw samples' means, NULLs left out."""
    a, b = m.at(1), m.at(1) + dt.timedelta(minutes=3)
    minutes = gpu.telemetry(tensor_gpu, "c1", "g-tc", a, b, step_s=60)
    raw = tensor_gpu.rows(
        "SELECT toStartOfMinute(ts) AS t, avg(sm_clock_mhz), avg(tensor_active_ratio) "
        "FROM {db:Identifier}.gpu_samples GROUP BY t ORDER BY t",
        {"db": tensor_gpu.database},
    )
    assert minutes["sm_clock_mhz"].to_list() == [1600.0, 1980.0, None] == [r[1] for r in raw]
    assert minutes["tensor_active_ratio"].to_list() == [0.5, None, 0.5] == [r[2] for r in raw]
    panels = _page(tensor_gpu, "manager", "g-tc")["gpu-telemetry"]["figure"]
    by_name = {t["name"]: t["y"] for t in panels["data"]}
    assert by_name["SM clock MHz"] == [pytest.approx((2 * 1410 + 5 * 1980) / 7)]
    assert by_name["Tensor active %"] == [pytest.approx(50.0)]
    notes = [a["text"] for a in panels["layout"].get("annotations", [])]
    # memory, power and temperature are not in these samples, SM clock and tensor activity are
    assert notes.count("Not reported by this GPU's source") == 3
