"""The limits an uploaded dataset is held to (from settings) and how a refusal reads.

The checks themselves are the trainer's (:mod:`trainer.envs.row_limits`), so an upload
and a run read a file alike; this module only names each limit by its setting.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from trainer.envs.row_limits import DatasetError, RowLimits

SETTINGS = {
    "max_row_bytes": "DATASET_MAX_ROW_BYTES",
    "max_row_depth": "DATASET_MAX_ROW_DEPTH",
    "max_row_values": "DATASET_MAX_ROW_VALUES",
    "max_rows": "DATASET_MAX_ROWS",
    "max_decoded_bytes": "DATASET_MAX_DECODED_BYTES",
}


def upload_limits() -> RowLimits:
    from trainer.envs.row_limits import RowLimits

    return RowLimits(
        max_row_bytes=settings.DATASET_MAX_ROW_BYTES,
        max_row_depth=settings.DATASET_MAX_ROW_DEPTH,
        max_row_values=settings.DATASET_MAX_ROW_VALUES,
        max_rows=settings.DATASET_MAX_ROWS,
        max_decoded_bytes=settings.DATASET_MAX_DECODED_BYTES,
    )


def refusal(exc: DatasetError, path: str, name: str) -> str:
    """``exc`` as the upload form shows it: ``file: line 3 ...``, a limit named by its
    setting, the file by ``name`` rather than where it is stored (``path``)."""
    from trainer.envs.row_limits import RowLimitError

    if isinstance(exc, RowLimitError):
        sizes = ("max_row_bytes", "max_decoded_bytes")
        amount = size_text(exc.value) if exc.limit in sizes else None
        message = exc.describe(amount, SETTINGS[exc.limit])
    else:
        message = str(exc).replace(repr(path), repr(name))
    return re.sub(r"^path: ", "file: ", message)


def size_text(n: int) -> str:
    return f"{n / (1 << 20):g} MB" if n >= 1 << 20 else f"{n} bytes"
