"""The live path to the browser: frames (:mod:`~dashboard.live.frames`: the small
JSON messages a run page receives, seq-numbered) and publishing them to a run's
channel group from plain threads (:mod:`~dashboard.live.streaming`). The database is
the source of truth; this path may drop a frame, and the page then backfills.

May import: the root modules only (``models``, ``jsonsafe``).
"""
