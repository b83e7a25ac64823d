"""The monthly chargeback job: it writes the month that ended and tells the [alerts]
notifiers what it wrote; a notifier that fails is tried again with a doubling wait."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import fresh_database, simulate
from test_reports import MONTH, NOW

from gpuledger.report_commands import monthly_reports
from gpuledger.settings import load_settings
from reports.alerts.notify import NotifyError, tell_each
from warehouse.client import Warehouse


class _Receiver(BaseHTTPRequestHandler):
    got: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        self.got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_args: Any) -> None:  # quiet
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.got = []
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook"
    server.shutdown()
    server.server_close()


def test_the_monthly_job_writes_last_month_and_tells_the_notifiers(
    engine: Warehouse, tmp_path: Path, receiver: str
) -> None:
    settings = load_settings(
        env={},
        overrides={
            "warehouse": {"data_dir": str(tmp_path)},
            "reports": {"formats": "csv,xlsx", "out_dir": str(tmp_path / "out")},
            "alerts": {"webhook_url": receiver, "log": False},
        },
    )
    with fresh_database(engine) as wh:
        simulate(wh, cluster="sim", days=3, gpus=8, seed=3, now=NOW)
        run = monthly_reports(wh, settings, NOW)
    assert run is not None
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        f"chargeback-{MONTH}.csv",
        f"chargeback-{MONTH}.manifest.json",
        f"chargeback-{MONTH}.xlsx",
    ]
    (notice,) = _Receiver.got
    assert notice["event"] == "report" and notice["subject"] == MONTH
    assert f"chargeback-{MONTH}.csv" in notice["text"] and len(notice["files"]) == 2


def test_a_failing_notifier_is_tried_again_with_a_doubling_wait() -> None:
    class Flaky:
        name = "flaky"
        calls = 0

        def send(self, payload: Any) -> None:
            Flaky.calls += 1
            if Flaky.calls < 3:
                raise NotifyError("down")

    class Down:
        name = "down"

        def send(self, payload: Any) -> None:
            raise NotifyError("still down")

    waits: list[float] = []
    said = tell_each([Flaky(), Down()], {"text": "x"}, attempts=3, sleep=waits.append)
    assert said == {"flaky": None, "down": "still down"}
    assert Flaky.calls == 3 and waits == [2.0, 4.0, 2.0, 4.0]
