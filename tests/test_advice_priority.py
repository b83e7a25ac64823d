"""Priority feedback: efficiency per tenant over a trailing window, mapped to priority classes
(the hand-computed cluster of tests/advice_fixture.py), and the [scheduler] settings' checks."""

from __future__ import annotations

from collections.abc import Iterator

import advice_fixture as af
import pytest
from conftest import fresh_database

from gpuledger.settings import SettingsError, load_settings
from scheduler_hooks.policy import Limits, Names, PolicyError, PriorityPolicy
from scheduler_hooks.priority import class_names, priority_classes
from warehouse.client import Warehouse

NLP_SCORE = (2 * 5 * 0.4 + 2 * 4 * 0.01 + 3 * 0.9 + 3 * 0.01 + 0.01 / 3) / (10 + 8 + 6 + 1 / 3)


@pytest.fixture(scope="module")
def cluster(engine: Warehouse) -> Iterator[Warehouse]:
    with fresh_database(engine) as wh:
        yield af.fill(wh)


def test_scores_are_used_over_allocated_hours_and_map_to_classes(cluster: Warehouse) -> None:
    got = priority_classes(cluster, af.T, PriorityPolicy())
    assert sorted(got) == [af.C, af.A, af.B]
    assert got[af.A].score == pytest.approx(NLP_SCORE, abs=1e-6)
    assert got[af.A].allocated_gpu_hours == pytest.approx(24 + 1 / 3)
    assert got[af.B].score == pytest.approx(0.9, abs=1e-6)
    assert got[af.C].score == pytest.approx(0.5, abs=1e-6)
    assert {t: p.priority_class for t, p in got.items()} == {
        af.A: "low",
        af.B: "high",
        af.C: "normal",
    }
    assert got[af.A].to_json()["score"] == round(NLP_SCORE, 4)


def test_thresholds_and_window_come_from_the_policy(cluster: Warehouse) -> None:
    strict = PriorityPolicy.parse(7, "0.95=gold,0.25=silver,0=bronze", "gold=3,silver=1,bronze=1")
    assert class_names(cluster, af.T, strict) == {af.A: "silver", af.B: "silver", af.C: "silver"}
    # a window that ends before any job started holds nothing: no tenant gets a class
    early = PriorityPolicy.parse(0.25, "0.6=high,0=low", "high=2,low=1")
    assert priority_classes(cluster, af.T - 11 * af.H, early) == {}


def test_the_webhook_gets_tenant_to_class_names(cluster: Warehouse) -> None:
    assert class_names(cluster, af.T, PriorityPolicy(), cluster="c1") == {
        af.A: "low",
        af.B: "high",
        af.C: "normal",
    }
    assert class_names(cluster, af.T, PriorityPolicy(), cluster="elsewhere") == {}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PRIORITY_CLASSES": "0.6=high,0.3=normal"}, "must give a class from 0 up"),
        ({"PRIORITY_CLASSES": "high"}, "'high' is not NAME=VALUE"),
        ({"PRIORITY_CLASSES": "1.5=high,0=low"}, "'1.5' is not a share"),
        ({"FAIR_SHARE_WEIGHTS": "high=2,normal=1"}, "gives no weight to low"),
        ({"FAIR_SHARE_WEIGHTS": "high=2,normal=1,low=-1"}, "'-1' is not a positive number"),
        ({"PRIORITY_WINDOW_DAYS": "0"}, "priority_window_days 0 must be more than 0"),
        ({"IDLE_LIMITS": "ml=5%"}, "is not SHARE/DURATION"),
        ({"IDLE_LIMITS": "ml=5%/2x"}, "'2x' is not a duration"),
        ({"IDLE_LIMITS": "ml=5%/2h,ml=1%/1h"}, "names ml twice"),
        ({"INTERACTIVE_LIMITS": "ds=0h"}, "must be longer than 0"),
        ({"KUEUE_API_VERSION": "v1"}, "is not one of v1beta2, v1beta1"),
        ({"HORIZON_H": "0"}, "horizon_h 0 must be positive"),
    ],
)
def test_bad_scheduler_settings_say_what_to_write(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(env={f"GPULEDGER_SCHEDULER__{k}": v for k, v in env.items()})


def test_scheduler_settings_parse_into_the_policy() -> None:
    s = load_settings(
        env={
            "GPULEDGER_SCHEDULER__IDLE_LIMITS": "ml=5%/2h, ml/nlp=0.1/30m, *=2%/1d",
            "GPULEDGER_SCHEDULER__INTERACTIVE_LIMITS": "ds=8h",
            "GPULEDGER_SCHEDULER__KUEUE_QUEUES": "ml/nlp=nlp-cq",
        }
    )
    policy = s.scheduler.policy()
    limits: Limits = policy.limits
    assert limits.idle_of("ml/nlp") == limits.idle["ml/nlp"]
    assert (limits.idle["ml/nlp"].threshold_ratio, limits.idle["ml/nlp"].after_s) == (0.1, 1800)
    assert limits.idle_of("ml/vision") == limits.idle["ml"]  # its org's
    assert limits.idle_of("other/x") == limits.idle["*"] and limits.idle["*"].after_s == 86_400
    assert limits.interactive_of("ds/chat") == 8 * 3600 and limits.interactive_of("ml/x") is None
    names: Names = policy.names
    assert names.cluster_queue("ml/nlp") == "nlp-cq" and names.cluster_queue("ml/vision") == (
        "ml-vision"
    )
    assert names.flavor("train", "A100-80GB") == "a100-80gb"
    assert names.slurm_account("ml/vision") == "vision"
    with pytest.raises(PolicyError):
        PriorityPolicy.parse(7, "0.5=a,0.5=a", "a=1")
