"""Idle-GPU alerts: rules from the settings, evaluated over the warehouse, deduplicated with a
cooldown, resolved when the condition ends, recorded in the alert history, and delivered to
webhooks, Slack, e-mail and the log with retries.

The modules, each a door of its own (this package imports nothing, so that the settings can
check the ``[alerts]`` section without loading the warehouse):

- :mod:`reports.alerts.rules`: :func:`~reports.alerts.rules.build_rules` from the settings;
- :mod:`reports.alerts.notify`: the notifiers and :func:`~reports.alerts.notify.build_notifiers`;
- :mod:`reports.alerts.evaluate`: :func:`~reports.alerts.evaluate.evaluate`, one look;
- :mod:`reports.alerts.runner`: :class:`~reports.alerts.runner.Alerting` (``start``, ``check``,
  ``deliver``), what ``serve`` and ``gpuledger alerts check`` run.
"""
