"""The browser UI: HTML pages (runs, new run, run page, trajectories, compare).

Views here are adapters: they read through :mod:`dashboard.reads`, validate
through :mod:`dashboard.pages.forms` and act through ``dashboard.runs.services``. Live data
reaches the browser over the platform's websocket and JSON API; this package never
writes event rows. Model-generated text is rendered auto-escaped, never marked safe.

May import: ``reads``, ``runs``, ``ingest``, ``live``, ``library``, ``site`` and the
root modules; never ``api``.
"""
