"""Submitting and executing runs: the services that check a config and queue a run
(:mod:`~dashboard.runs.services`), the lease every execution holds
(:mod:`~dashboard.runs.lease`), executing one claimed run
(:mod:`~dashboard.runs.execution`) from a Celery job (:mod:`~dashboard.runs.jobs`) or
the embedded in-process pool (:mod:`~dashboard.runs.inprocess`), runs of several
processes (:mod:`~dashboard.runs.multiprocess`, one rank each:
:mod:`~dashboard.runs.rank`), device queues (:mod:`~dashboard.runs.devices`), what the
workers announce they serve (:mod:`~dashboard.runs.workers`), the step budget checked
at submit (:mod:`~dashboard.runs.budget`), the watch that makes a cancel stop a run
(:mod:`~dashboard.runs.stopping`), the sink a run writes through
(:mod:`~dashboard.runs.sinks`) and runs trained elsewhere that report over HTTP
(:mod:`~dashboard.runs.external`).

May import: ``ingest`` (the one write path), ``live`` (frames), ``library`` (roots,
models and data a run may read), ``site`` and the root modules; never ``reads``,
``api`` or ``pages``.
"""
