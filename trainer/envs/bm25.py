"""BM25 indexes (``bm25s``) for the search environment and the search tool.

``bm25s`` probes JAX when it is imported (a top-k on JAX's default device, to pick
its selection backend). On a GPU machine with JAX installed, that initialises JAX on
the GPU, and JAX takes 75% of the GPU's memory up front (its preallocation), away
from the trainer's PyTorch; with several test or worker processes it runs the GPU out
of memory (seen on an H200). We only use bm25s's numpy scoring (``get_scores``), so
JAX is kept on the CPU unless the user has chosen its platform (``JAX_PLATFORMS``).
"""

from __future__ import annotations

import os
from typing import Any


def new_index(corpus: list[list[str]]) -> Any:  # a bm25s.BM25
    """A BM25 index over documents given as word lists."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import bm25s

    index = bm25s.BM25()
    index.index(corpus, show_progress=False)
    return index
