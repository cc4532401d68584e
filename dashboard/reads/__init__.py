"""The read side, by concept: what the JSON API and the pages read, through the same
functions and one serialiser per model.

* :mod:`dashboard.reads.runs`: lists, filters, summaries and the run's JSON;
* :mod:`dashboard.reads.metrics`: metric keys, downsampled series;
  :mod:`dashboard.reads.sparklines`: the runs list's reward lines;
* :mod:`dashboard.reads.reward_names`: which stored metric is a run's reward (an
  external run's trainer may log it as ``train/reward``);
* :mod:`dashboard.reads.trajectories`: trajectories, judgements, critical paths of a
  step or a task, and their JSON;
* :mod:`dashboard.reads.stream`: a run's events again (backfill for a client that
  missed frames, export as JSON lines).

Everything is bounded so a run with 100k steps and 10k trajectories reads quickly, and
everything returned for JSON is JSON-ready (non-finite floats are the strings ``"NaN"``,
``"Infinity"``, ``"-Infinity"``). Ownership is the caller's job
(``services.visible_runs`` / ``get_run_for_user``); nothing here writes.

May import: ``ingest`` (the stored shapes: rollup levels, packed arrays, shared
prompts), ``live``, ``library``, ``site`` and the root modules; never ``runs``,
``api`` or ``pages``.
"""
