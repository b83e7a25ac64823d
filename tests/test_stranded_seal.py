"""Sealed stranded hours: each past hour's fragmentation is kept, read back instead of sampling
the cluster again while its data stays the same, and sampled live again once a late job event
changes a day. Every figure is checked against the live sampling of the same range
(:func:`warehouse.analytics.fragmentation.stranded_over`), on a simulated cluster."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
from conftest import give_inventory, recent, simulate
from polars.testing import assert_frame_equal

from collector.records import GpuSample, JobEvent
from warehouse.analytics import fragmentation as fr
from warehouse.analytics import stranded as st
from warehouse.client import Warehouse
from warehouse.ingest.writer import Ingestor
from warehouse.ledger import IdleRule
from warehouse.ledger.tail import LiveTail, kept_stranded

NOW = recent(dt.datetime(2026, 11, 20, 14, 25, tzinfo=dt.UTC))
H = dt.timedelta(hours=1)
D = dt.timedelta(days=1)
MIDNIGHT = NOW.replace(hour=0, minute=0)


@pytest.fixture
def cluster(wh: Warehouse) -> Warehouse:
    simulate(wh, cluster="sim", days=2.5, gpus=16, seed=5, now=NOW)
    return wh


def _same(got: tuple[pl.DataFrame, pl.DataFrame], want: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    for a, b in zip(got, want, strict=True):
        keys = [c for c in b.columns if b.schema[c] != pl.Float64]
        assert_frame_equal(a.sort(keys), b.sort(keys), check_exact=False, abs_tol=1e-9)


def _seal_rows(wh: Warehouse) -> dict[dt.date, tuple[dt.datetime, int]]:
    rows = wh.rows(
        f"SELECT day, argMax(last_ts, sealed_at), argMax(seal_id, sealed_at) "
        f"FROM {wh.database}.frag_seals GROUP BY day"
    )
    return {day: (last, int(seal_id)) for day, last, seal_id in rows}


RANGES = [
    (MIDNIGHT - 2 * D, NOW),  # sealed days, then today's sealed hours, then live ones
    (MIDNIGHT - D + 5 * H, NOW - 5 * H - dt.timedelta(minutes=17)),  # cut inside hours
    (MIDNIGHT - 2 * D, NOW + 3 * H),  # hours to come: nothing measured there yet
]


def test_sealed_hours_give_the_live_figures_and_are_read(cluster: Warehouse) -> None:
    report = st.seal_hours(cluster, now=NOW)
    first = max(
        cluster.rows(f"SELECT min(ts) FROM {cluster.database}.gpu_inventory_log")[0][0],
        cluster.rows(f"SELECT min(ts) FROM {cluster.database}.job_events WHERE event = 'started'")[
            0
        ][0]
        - 7 * D,
    )
    days = sorted(day for _, day in report.sealed)
    n = (NOW.date() - first.date()).days + 1
    assert days == [first.date() + k * D for k in range(n)] and n >= 3 and report.rows > 0
    # today's seal reaches the last hour at least SEAL_LAG ago, and no further
    assert _seal_rows(cluster)[NOW.date()][0] == (NOW - st.SEAL_LAG).replace(minute=0)
    for start, end in RANGES:
        _same(
            st.stranded_over(cluster, "sim", start, end),
            fr.stranded_over(cluster, "sim", start, end),
        )

    # the sealed rows are what the answer is read from: change them and it changes
    before = st.stranded_over(cluster, "sim", *RANGES[0])[0]["stranded_gpu_hours"].sum()
    cluster.command(
        f"ALTER TABLE {cluster.database}.frag_hours UPDATE stranded_gpus = stranded_gpus + 1 "
        "WHERE ts < {t:DateTime64(3, 'UTC')} SETTINGS mutations_sync = 2",
        {"t": MIDNIGHT - D},
    )
    pools = fr.stranded_over(cluster, "sim", *RANGES[0])[0].filter(pl.col("ts") == MIDNIGHT)
    after = st.stranded_over(cluster, "sim", *RANGES[0])[0]["stranded_gpu_hours"].sum()
    assert after == pytest.approx(before + 24 * pools.height)


def test_a_late_job_event_puts_its_days_back_on_the_live_path(cluster: Warehouse) -> None:
    st.seal_hours(cluster, now=NOW)
    sealed = _seal_rows(cluster)
    live = fr.stranded_over(cluster, "sim", *RANGES[0])
    free = fr.free_state(cluster, "sim", MIDNIGHT - D + 3 * H).filter(pl.col("free") >= 1)
    assert free.height, "the fixture needs a free GPU yesterday at 03:00"
    gpu = free.row(0, named=True)
    late = dict(cluster="sim", job_id="late-1", tenant="late/one", org="late", project="one",
                pool=gpu["pool"], gpu_model=gpu["gpu_model"], gpus_requested=1.0,
                node=gpu["node"], source="test")  # fmt: skip
    Ingestor(cluster, 35).write_job_events(
        [
            JobEvent(
                MIDNIGHT - D + 2 * H + 30 * 60 * dt.timedelta(seconds=1),
                event="started",
                gpu_uuids=(gpu["gpu_uuid"],),
                **late,
            ),
            JobEvent(
                MIDNIGHT - D + 6 * H,
                event="finished",
                gpu_uuids=(gpu["gpu_uuid"],),
                started_at=MIDNIGHT - D + 2 * H,
                **late,
            ),
        ]
    )
    changed = fr.stranded_over(cluster, "sim", *RANGES[0])
    assert not changed[0].equals(live[0])  # the job held a GPU: the free state moved
    _same(st.stranded_over(cluster, "sim", *RANGES[0]), changed)

    # sealing again redoes the days whose inputs changed (the event counts in the task mix of
    # the next 7 days) and leaves the day before as it was
    again = st.seal_hours(cluster, now=NOW)
    assert {day for _, day in again.sealed} == {(MIDNIGHT - D).date(), MIDNIGHT.date()}
    assert again.still_sealed == len(sealed) - 2
    assert _seal_rows(cluster)[(MIDNIGHT - 2 * D).date()] == sealed[(MIDNIGHT - 2 * D).date()]
    _same(st.stranded_over(cluster, "sim", *RANGES[0]), changed)
    # the replaced seals' rows are gone
    seal_ids = [s for _, s in _seal_rows(cluster).values()]
    kept = cluster.rows(f"SELECT DISTINCT seal_id FROM {cluster.database}.frag_hours")
    assert sorted(int(r[0]) for r in kept) == sorted(seal_ids)


def test_today_is_sealed_again_as_its_hours_close(cluster: Warehouse) -> None:
    st.seal_hours(cluster, now=NOW)
    first = _seal_rows(cluster)
    assert st.seal_hours(cluster, now=NOW).sealed == ()  # nothing new: nothing done
    later = NOW + 2 * H
    report = st.seal_hours(cluster, now=later)
    assert report.sealed == (("sim", NOW.date()),) and report.still_sealed == len(first) - 1
    now_sealed = _seal_rows(cluster)
    assert now_sealed[NOW.date()][0] == (later - st.SEAL_LAG).replace(minute=0)
    assert now_sealed[NOW.date()][1] != first[NOW.date()][1]
    _same(
        st.stranded_over(cluster, "sim", MIDNIGHT - D, later),
        fr.stranded_over(cluster, "sim", MIDNIGHT - D, later),
    )


def test_other_settings_and_steps_are_sampled_live(cluster: Warehouse) -> None:
    st.seal_hours(cluster, now=NOW)
    cluster.command(
        f"ALTER TABLE {cluster.database}.frag_hours UPDATE stranded_gpus = -1 WHERE 1 "
        "SETTINGS mutations_sync = 2"
    )
    start, end = MIDNIGHT - D, NOW
    _same(
        st.stranded_over(cluster, "sim", start, end, scope="cluster"),
        fr.stranded_over(cluster, "sim", start, end, scope="cluster"),
    )
    _same(
        st.stranded_over(cluster, "sim", start, end, 2 * H),
        fr.stranded_over(cluster, "sim", start, end, 2 * H),
    )
    off = start + dt.timedelta(minutes=30)  # instants off the hour: none of them sealed
    _same(st.stranded_over(cluster, "sim", off, end), fr.stranded_over(cluster, "sim", off, end))
    with pytest.raises(fr.FragmentationError, match="timezone-aware"):
        st.stranded_over(cluster, "sim", start.replace(tzinfo=None), end)


def test_a_cluster_with_no_inventory_or_no_job_seals_nothing(wh: Warehouse) -> None:
    assert st.seal_hours(wh, now=NOW, clusters=["nowhere"]) == st.HoursSealed((), 0, 0)
    give_inventory(wh, [GpuSample(NOW - 30 * D, "idle", "n1", "GPU-1", 0, "H100")])
    assert st.seal_hours(wh, now=NOW, clusters=["idle"]) == st.HoursSealed((), 0, 0)


def test_a_kept_tail_holds_the_stranded_hours_up_to_its_instant(cluster: Warehouse) -> None:
    """The server's live tail keeps each cluster's stranded rows from its first sealed day to
    its instant: a range from a midnight to that instant (or before it) as of that instant
    adds up the same figures as asking; another instant, or a range cut inside an hour at its
    start, asks."""
    st.seal_hours(cluster, now=NOW)
    kept = LiveTail(cluster, IdleRule(0.05, 1800), every_s=60, clock=lambda: NOW)
    tail = kept.refresh()
    since = tail.stranded["sim"][0]
    assert since.date() == min(_seal_rows(cluster)) and since <= MIDNIGHT - 2 * D
    with kept.offered():
        spans = (
            (MIDNIGHT - 2 * D, NOW),
            (MIDNIGHT - D, MIDNIGHT),
            (MIDNIGHT, NOW),
            (MIDNIGHT, NOW - H),
        )
        for start, end in spans:
            got = kept_stranded(cluster, "sim", start, end, now=NOW)
            assert got is not None
            _same(got, st.stranded_over(cluster, "sim", start, end))
        assert kept_stranded(cluster, "sim", MIDNIGHT + H / 2, NOW, now=NOW) is None
        assert kept_stranded(cluster, "sim", MIDNIGHT, NOW, now=NOW + H) is None
        assert kept_stranded(cluster, "sim", MIDNIGHT, NOW + H, now=NOW) is None
