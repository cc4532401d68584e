"""Settings: what one request, event or upload may hold (imported by
``dashboard.settings``; each limit's reader is named beside it). Every value can be
set from the environment, as the rest of the settings are (``dashboard.site.env``).
"""

from __future__ import annotations

from dashboard.site.env import env_int

# --- ingest: the events API and trackio -----------------------------------------------
# POST /api/runs/{id}/events: body as sent (maybe gzip), once decompressed, and lines.
EVENTS_MAX_BODY_BYTES = env_int("EVENTS_MAX_BODY_BYTES", 4 << 20, min_value=1024)
EVENTS_MAX_DECODED_BYTES = env_int("EVENTS_MAX_DECODED_BYTES", 32 << 20, min_value=1024)
EVENTS_MAX_LINES = env_int("EVENTS_MAX_LINES", 5000, min_value=1)
# POST /trackio/api/<call> (trackio's client, docs/trackio.md): uncompressed JSON, so
# the limit of a decompressed events body; entries of one bulk call.
TRACKIO_MAX_BODY_BYTES = env_int("TRACKIO_MAX_BODY_BYTES", 32 << 20, min_value=1024)
TRACKIO_MAX_ENTRIES = env_int("TRACKIO_MAX_ENTRIES", 5000, min_value=1)
# JSON values (array items, object members) of one events body, counted by its commas
# and brackets before anything is parsed: what bounds the objects a body can unfold into.
EVENTS_MAX_VALUES = env_int("EVENTS_MAX_VALUES", 1 << 20, min_value=1024)
# What one request may store, bounding how long it holds the embedded database's
# write lock (another writer waits 30 s, then fails): metric values of its step
# events (a row each, ~30-50 us; a 87 KB gzip body once held the lock for 107 s),
# and for trackio the trajectories its completions tables and traces unfold into
# (~0.5 ms each) and the runs it reports to. Our trainer's sink splits a batch
# refused for size (413).
EVENTS_MAX_METRIC_VALUES = env_int("EVENTS_MAX_METRIC_VALUES", 1 << 16, min_value=1024)
TRACKIO_MAX_TRAJECTORIES = env_int("TRACKIO_MAX_TRAJECTORIES", 8192, min_value=64)
TRACKIO_MAX_RUNS = env_int("TRACKIO_MAX_RUNS", 64, min_value=1)
# Ingest bodies (events API, trackio) decoded, parsed and stored at once in this
# process (dashboard.ingest.admission: a 87 KB gzip body once cost ~75 MB to parse);
# a request waits this many seconds for a slot, then is a 503 with Retry-After.
INGEST_MAX_CONCURRENT = env_int("INGEST_MAX_CONCURRENT", 2, min_value=1)
INGEST_QUEUE_WAIT_S = env_int("INGEST_QUEUE_WAIT_S", 5, min_value=0, max_value=300)
# External runs a user may have (deleted ones do not count): one more, created by
# POST /api/runs/external or trackio's first entry of a run, is refused (409).
EXTERNAL_RUNS_MAX_PER_USER = env_int("EXTERNAL_RUNS_MAX_PER_USER", 1000, min_value=1)
# What one event may hold, on every write path (dashboard.ingest.bounds): tokens of a
# trajectory (and the length of each per-token array), its segments, its agent steps
# (and each per-step reward list), characters of one text field (a segment's text, an
# agent step's action or observation, a judge's rationale...). The events API refuses
# an event past them (413); our own trainer's sink stores it cut, marked as cut.
TRAJECTORY_MAX_TOKENS = env_int("TRAJECTORY_MAX_TOKENS", 131_072, min_value=1024)
TRAJECTORY_MAX_SEGMENTS = env_int("TRAJECTORY_MAX_SEGMENTS", 1024, min_value=8)
TRAJECTORY_MAX_STEPS = env_int("TRAJECTORY_MAX_STEPS", 1024, min_value=8)
EVENT_MAX_TEXT_CHARS = env_int("EVENT_MAX_TEXT_CHARS", 1 << 20, min_value=1024)
# What one read of a trajectory returns (the API's page, the trajectory page's token
# colours): segments from an offset while their tokens and characters fit these.
TRAJECTORY_PAGE_TOKENS = env_int("TRAJECTORY_PAGE_TOKENS", 16_384, min_value=256)
TRAJECTORY_PAGE_CHARS = env_int("TRAJECTORY_PAGE_CHARS", 1 << 18, min_value=1024)
# Any other request body (dashboard.site.limits: counted as it streams in, before
# authentication); a body that has not arrived after this many seconds is refused 408.
REQUEST_MAX_BODY_BYTES = env_int("REQUEST_MAX_BODY_BYTES", 2 << 20, min_value=1024)
REQUEST_BODY_TIMEOUT_S = env_int("REQUEST_BODY_TIMEOUT_S", 30, min_value=1)

# --- dataset uploads --------------------------------------------------------------------
# Uploads on /datasets/ land in <first data root>/uploads/<user id>/.
DATASET_MAX_UPLOAD_BYTES = env_int("DATASET_MAX_UPLOAD_BYTES", 50 << 20, min_value=1)
# One row of an upload, checked before it is parsed (dashboard.library.dataset_limits);
# the maxima are the trainer's own (trainer.envs.row_limits.TRAINER_LIMITS), so a run
# reads whatever an upload accepted.
DATASET_MAX_ROW_BYTES = env_int(
    "DATASET_MAX_ROW_BYTES", 1 << 20, min_value=64, max_value=16 << 20
)
DATASET_MAX_ROW_DEPTH = env_int("DATASET_MAX_ROW_DEPTH", 32, min_value=2, max_value=256)
DATASET_MAX_ROW_VALUES = env_int(
    "DATASET_MAX_ROW_VALUES", 100_000, min_value=4, max_value=1_000_000
)
DATASET_MAX_ROWS = env_int(
    "DATASET_MAX_ROWS", 100_000, min_value=1, max_value=10_000_000
)
# The rows of an upload once decoded, in all: a Parquet file's compression and
# dictionary encoding let 800 bytes hold 20 GB of text, which a run would hold.
DATASET_MAX_DECODED_BYTES = env_int(
    "DATASET_MAX_DECODED_BYTES", 512 << 20, min_value=1 << 20, max_value=8 << 30
)
