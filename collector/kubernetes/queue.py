"""Kueue Workloads that wait without pods, as the jobs their pods will continue.

Kueue holds a Job (``suspend: true``, or a deactivated Workload) until it admits its Workload,
so such a job has no pods yet, and one job per pod alone would hide it from queue analytics.
:class:`~collector.kubernetes.collector.KubernetesCollector` therefore reports a Workload it sees
waiting with no live pod as the jobs its pods will be, one *slot* per pod its pod sets ask for
(``count`` of each), each with that pod's GPU request, queue, priority and tenant (tenant rules
see the namespace and the pod template's labels, which the pods will carry):

* **Job ids.** The Workload's job UID (the ``kueue.x-k8s.io/job-uid`` label, else its
  controller owner's UID, else its own UID) when it asks for one pod; Kueue's pod integration
  makes that the pod's own UID, so nothing changes there. ``<job uid>/<pod set>-<i>`` for each
  pod of a Workload that asks for several.
* **Pods continue them.** A new pod of the Workload takes a free slot (of its pod set, by the
  ``kueue.x-k8s.io/podset`` or Kubeflow replica-type label, else one with the same GPU request,
  else the first) and goes on as that job and attempt: the steps the slot emitted (submitted,
  admitted) are not emitted again, so its wait runs from the Workload's creation and no second
  job appears. A pod that finds no free slot (a Job's retry) is a job of its own, by pod UID.
  Pods owned by a job's children (a JobSet's Jobs, a RayJob's RayCluster) carry no UID of the
  job: such a pod takes a slot of the admitted Workload in its namespace whose job's name
  begins its own ("<job>-...", the longest such name) if it was created after the admission.
* **Requeues are attempts.** When an admitted Workload is evicted and waits again with no live
  pod, its slots (or, if it had none, new ones) wait as the next attempt, from the eviction.
* **Endings.** A slot that never got a pod ends with its Workload: ``cancelled`` when the
  Workload is deleted ("deleted while queued", or the watch-gap reason when it went while
  nobody watched), ``finished`` or ``failed`` (reason ``kueue:<reason>``) when Kueue marks it
  Finished.

A Workload first seen admitted, or with live pods, has no slots: its pods are jobs by pod UID.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from collector.kubernetes.objects import PodSetView, PodView, WorkloadView
from collector.kubernetes.state import Slot, Track
from collector.tenancy import TenantMapper

QUEUED_REASON = "deleted while queued"
PODSET_LABEL = "kueue.x-k8s.io/podset"  # set by Kueue on the pods of a pod set
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"  # Kueue names those pod sets after it


def job_uid(wl: WorkloadView) -> str:
    """The UID of the job a Workload stands for (see the module docstring)."""
    return wl.job_uids[0] if wl.job_uids else (wl.uid or f"{wl.namespace}/{wl.name}")


def wants_gpus(ps: PodSetView) -> bool:
    return bool(ps.shape.whole_gpus or ps.shape.shared_gpus or ps.shape.mig)


def slot_plan(wl: WorkloadView) -> list[tuple[str, PodSetView]]:
    """(job id, pod set) of every pod the Workload asks for, in the order of its pod sets."""
    uid = job_uid(wl)
    if sum(ps.pods for ps in wl.pod_sets) == 1:
        return [(uid, next(ps for ps in wl.pod_sets if ps.pods))]
    return [(f"{uid}/{ps.name}-{i}", ps) for ps in wl.pod_sets for i in range(ps.pods)]


def queued_view(wl: WorkloadView, ps: PodSetView, job_id: str, since: dt.datetime) -> PodView:
    """The pod a slot stands for, as far as the Workload tells it, waiting since ``since``."""
    return PodView(
        uid=job_id,
        name=wl.owner_name or wl.name,
        namespace=wl.namespace,
        created=since,
        labels=ps.labels,
        owner_uid=job_uid(wl),
        workload_name=wl.name,
        node="",
        priority=wl.priority or 0,
        priority_class=wl.priority_class,
        queue=wl.queue,
        user=ps.user,
        workload_type=ps.workload_type,
        gpu_model=ps.shape.gpu_model,
        whole_gpus=ps.shape.whole_gpus,
        shared_gpus=ps.shape.shared_gpus,
        mig=ps.shape.mig,
        phase="Pending",
        status_reason="",
        gated=False,
        scheduled=False,
        scheduled_at=None,
        running=False,
        started_at=None,
        ended_at=None,
        failure="",
        disruption="",
    )


def slot_steps(
    v: PodView, wl: WorkloadView, deleted: bool, now: dt.datetime
) -> list[tuple[str, str, dt.datetime, str]]:
    """(step, event, ts, reason) of every lifecycle step a slot without a pod has reached."""
    steps = [("submitted", "submitted", v.created, "")]
    if wl.admitted:
        why = f"ClusterQueue {wl.cluster_queue}" if wl.cluster_queue else ""
        steps.append(("admitted", "admitted", max(wl.admitted_at or now, v.created), why))
    if wl.finished:
        ok = wl.finished == "Succeeded"
        ts = max(wl.finished_at or now, v.created)
        steps.append(
            ("end", "finished" if ok else "failed", ts, "" if ok else f"kueue:{wl.finished}")
        )
    elif deleted:
        steps.append(("end", "cancelled", now, QUEUED_REASON))
    return steps


def same_shape(v: PodView, queued: PodView) -> bool:
    """Whether a pod asks for the GPUs a slot's pod set asks for."""
    return (v.whole_gpus, v.shared_gpus, v.mig) == (
        queued.whole_gpus,
        queued.shared_gpus,
        queued.mig,
    )


#: (job, Workload, event, ts, reason): an event for the collector to emit.
QueuedStep = tuple[Track, WorkloadView | None, str, dt.datetime, str]


class QueuedWorkloads:
    """The slots of the Workloads reported while they waited without pods (module docstring).

    ``slots`` maps "namespace/name" to the Workload's slots of its latest attempt. The methods
    return the events to emit; the collector holds the lock and turns them into job events.
    """

    def __init__(self, tenants: TenantMapper, gpu_pods_only: bool = True):
        self.tenants, self.gpu_pods_only = tenants, gpu_pods_only
        self.slots: dict[str, list[Slot]] = {}

    def settle(
        self, key: str, wl: WorkloadView, pods: Sequence[Track], now: dt.datetime
    ) -> list[QueuedStep]:
        """Report ``wl`` as slots if it waits with no live pod (``pods``: its tracked pods)."""
        if wl.admitted or wl.finished:
            return []
        slots = self.slots.get(key, [])
        if any(s.free for s in slots) or any("end" not in t.done for t in pods):
            return []
        if (slots or pods) and wl.eviction is None:
            return []  # its pods ended and Kueue did not requeue it: nothing waits
        before: dict[str, int] = {}
        for job_id, attempt in [(s.job_id, s.attempt) for s in slots] + [
            (t.job_id, t.attempt) for t in pods
        ]:
            before[job_id] = max(attempt, before.get(job_id, -1))
        since = (wl.eviction[2] if wl.eviction else wl.created) or now
        fresh, steps = [], []
        for job_id, ps in slot_plan(wl):
            if self.gpu_pods_only and not wants_gpus(ps):
                continue
            attempt = before.get(job_id, -1) + 1
            tenant = self.tenants.resolve(namespace=wl.namespace, labels=ps.labels)
            view = queued_view(wl, ps, job_id, since)
            track = Track(view, tenant, set(), False, None, job_id, attempt)
            fresh.append(Slot(job_id, attempt, ps.name, track))
            steps += self._advance(fresh[-1], wl, False, now)
        if fresh:
            self.slots[key] = fresh
        return steps

    def update(self, key: str, wl: WorkloadView, now: dt.datetime) -> list[QueuedStep]:
        """The steps a changed Workload brings its free slots to (admitted, finished)."""
        return [step for s in self.slots.get(key, ()) for step in self._advance(s, wl, False, now)]

    def drop(
        self, key: str, last: WorkloadView | None, gap_reason: str, now: dt.datetime
    ) -> list[QueuedStep]:
        """The Workload is gone: its free slots end (``gap_reason``: while nobody watched)."""
        steps: list[QueuedStep] = []
        for slot in self.slots.pop(key, ()):
            if gap_reason and slot.free and slot.track is not None:
                slot.track.done.add("end")
                steps.append((slot.track, last, "cancelled", now, gap_reason))
            elif last is not None:
                steps += self._advance(slot, last, True, now)
        return steps

    def adopt(self, key: str, v: PodView) -> Track | None:
        """A new pod of Workload ``key`` takes a free slot, if any: it goes on as that job."""
        free = [(s, s.track) for s in self.slots.get(key, ()) if s.free and s.track is not None]
        if not free:
            return None
        podset = v.labels.get(PODSET_LABEL) or v.labels.get(REPLICA_TYPE_LABEL, "").lower()
        slot, queued = min(
            free, key=lambda st: (st[0].podset != podset, not same_shape(v, st[1].view))
        )
        slot.track, slot.pod = None, v.uid
        return Track(v, queued.tenant, set(queued.done), v.gated, None, slot.job_id, slot.attempt)

    def claimant(self, v: PodView, workloads: Mapping[str, WorkloadView]) -> str | None:
        """The Workload a pod that names none is from: by name (see the module docstring)."""
        best: tuple[int, str] | None = None
        for key, slots in self.slots.items():
            wl = workloads.get(key)
            if (
                wl is not None
                and wl.admitted
                and wl.namespace == v.namespace
                and wl.owner_name
                and v.name.startswith(f"{wl.owner_name}-")
                and (wl.admitted_at is None or v.created >= wl.admitted_at)
                and any(s.free for s in slots)
            ):
                best = max(best or (0, ""), (len(wl.owner_name), key))
        return best[1] if best else None

    def _advance(
        self, slot: Slot, wl: WorkloadView, deleted: bool, now: dt.datetime
    ) -> list[QueuedStep]:
        t = slot.track
        if t is None or "end" in t.done:
            return []
        ps = next((p for p in wl.pod_sets if p.name == slot.podset), None)
        if ps is not None:  # queue, priority, requests may change while it waits
            t.view = queued_view(wl, ps, slot.job_id, t.view.created)
        steps: list[QueuedStep] = []
        for step, event, ts, reason in slot_steps(t.view, wl, deleted, now):
            if step not in t.done:
                t.done.add(step)
                steps.append((t, wl, event, ts, reason))
        return steps
