"""``torch.save`` files of another trainer, read without running code from them.

``torch.load(weights_only=True)`` unpickles tensors and plain containers only. A miles
dump also holds numpy arrays where MoE routing replay is on: ``Sample.
rollout_routed_experts`` (``[tokens - 1, layers, top_k]`` expert ids) and
``rollout_indexer_topk`` (miles/utils/types.py), kept as numpy in
``save_debug_rollout_data``'s ``Sample.to_dict()``. Those are read too, by allowing
exactly what rebuilds an array of numbers: numpy's ``_reconstruct`` and ``scalar``
(under numpy 2's ``numpy._core`` and numpy 1's ``numpy.core`` names), ``ndarray``,
``dtype`` and the dtypes of booleans and numbers. Object arrays and any other class
stay refused, and the error names the file and what it would have had to unpickle.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from trainer.importers.tailing import BadImportFile

# Array dtypes allowed: bool, signed and unsigned integers, floats, complex numbers.
NUMBER_CODES = "?bBhHiIlLqQefdgFDG"
_REFUSED = re.compile(r"GLOBAL ([\w.]+)|but got <class '([\w.]+)'>")


def numpy_globals() -> list[Any]:
    """What ``torch.load(weights_only=True)`` needs to rebuild arrays of numbers."""
    import numpy as np

    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1
        from numpy.core import multiarray  # type: ignore[no-redef]
    out: list[Any] = [np.ndarray, np.dtype]
    for name in ("_reconstruct", "scalar"):
        fn = getattr(multiarray, name)
        out += [
            (fn, f"numpy._core.multiarray.{name}"),
            (fn, f"numpy.core.multiarray.{name}"),
        ]
    out += sorted({type(np.dtype(c)) for c in NUMBER_CODES}, key=str)
    return out


def load_plain(path: Path) -> dict[str, Any]:
    """A ``torch.save`` dict of tensors, arrays of numbers and plain containers."""
    import torch

    try:
        with torch.serialization.safe_globals(numpy_globals()):
            value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 (unpickling raises many kinds)
        found = _REFUSED.search(str(exc))
        if found:
            name = found.group(1) or found.group(2)
            raise BadImportFile(
                f"{path}: holds a pickled {name}, which only running code from the "
                "file could rebuild; read are tensors, numpy arrays of numbers and "
                "plain containers (torch.load weights_only)"
            ) from None
        raise BadImportFile(f"{path}: not a plain torch.save dump: {exc}") from None
    if not isinstance(value, dict):
        raise BadImportFile(f"{path}: not a dict")
    return value
