"""Feedback to the scheduler, consumers of the ledger's and analytics' public API:

- ``priority``: each tenant's efficiency over a trailing window and its priority class;
- ``advice`` (types, standings), ``recommend`` and ``limits`` (what to change), ``report``
  (a cluster's advice at an instant, read from the warehouse);
- ``proposals`` (proposed, approved, applied, with hysteresis and the audit log), ``render``
  (Kueue, Volcano, Slurm), ``kube`` (read and patch through the Kubernetes API), ``apply``;
- ``api`` (``GET /api/advice``); ``admission``, ``snapshot`` and ``webhook`` (the admission
  webhook).

The rules come from the settings' ``[scheduler]`` section, parsed by ``policy``.
"""
