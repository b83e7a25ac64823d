"""Writes the squatting cluster of tests/test_alerts.py into an embedded data directory, in a
process of its own (the engine opens one data directory per process), for the tests that run
`gpuledger alerts` and `gpuledger serve` as a user does.

    python tests/alerts_writer.py DATA_DIR past   # T to T + 6 h, as in test_alerts.py
    python tests/alerts_writer.py DATA_DIR now    # the same, ending now: j-squat idle 3 h
"""

from __future__ import annotations

import datetime as dt
import sys

from alerts_fixture import Cluster, T

from warehouse.client import connect
from warehouse.migrate import RenderOptions, migrate


def main(data_dir: str, mode: str) -> None:
    now = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    start = T if mode == "past" else now - dt.timedelta(hours=3)
    wh = connect(f"chdb://{data_dir}", "gpuledger")
    try:
        migrate(wh, RenderOptions(database="gpuledger"))
        c = Cluster(wh, now=now + dt.timedelta(minutes=1))
        c.gpus("GPU-s", "GPU-b")
        end = min(start + dt.timedelta(hours=6), now)
        c.samples("GPU-s", start, end, 0.01)
        c.samples("GPU-b", start, end, 0.8)
        c.job("j-squat", "ml/vision", ["GPU-s"], start)
        c.job("j-busy", "research/nlp", ["GPU-b"], start)
        c.config()
    finally:
        wh.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
