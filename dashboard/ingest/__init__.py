"""The one write path for events, whoever sends them (the worker's sink, the HTTP
events API, an import): the batch writer (:mod:`~dashboard.ingest.writer`: idempotent,
first-write-wins inserts of the rows of :mod:`~dashboard.ingest.rows`, conflicts in
:mod:`~dashboard.ingest.conflicts`), metric rollups
(:mod:`~dashboard.ingest.rollups`, array literals in
:mod:`~dashboard.ingest.sqlarrays`), packed per-token arrays
(:mod:`~dashboard.ingest.arrays`), shared group prompts
(:mod:`~dashboard.ingest.prompts`), the recording policy on the server
(:mod:`~dashboard.ingest.recording_policy`), the hacking detectors on the server
(:mod:`~dashboard.ingest.detection`), the fields of an event
(:mod:`~dashboard.ingest.fields`), explicit retention
(:mod:`~dashboard.ingest.retention`) and how many ingest bodies the API views decode,
parse and store at once (:mod:`~dashboard.ingest.admission`).

May import: ``live`` (frames are sent after the commit), ``site`` and the root
modules; never ``reads``, ``runs``, ``api`` or ``pages`` (the write side does not read
through the read side).
"""
