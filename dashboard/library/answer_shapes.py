"""What a dataset's answers are, seen from its first rows: can a model that starts
from nothing reach them?

The built-in model (no ``model.path``, no ``model.init_from_run``) starts from random
weights with a word-level vocabulary built from the dataset, and its warm start
teaches it only the grammar of an action: a number of the prompt, or a calculator call
on two of them (:meth:`trainer.envs.dataset.DatasetSession.random_action`). RL then
has to find, by sampling, which of those actions the reward pays. So an answer is
within its reach when it is

- ``copy``: the answer is a word (:data:`COPY_WORDS`) or a number of the prompt, or
- ``calc``: a number that one operation (+ - *, the warm start's) on two numbers of
  the prompt gives,
  with the calculator tool on (``bench/learning.py dataset_arith``: "tom has 3 apples
  and gets 5 more . how many apples does tom have ?" -> "8"), and otherwise

- ``needs_calc``: such a number with the calculator off (the model would have to do
  the sum in its head), or
- ``free``: free text ("What is the capital of France?" -> "Paris") or a number no
  such operation gives: no number of steps teaches it these.

Only the first :data:`SAMPLE` rows are read (the trainer's reader, under the upload
limits), once per file version and keys; a file that cannot be read says nothing
(the form's own check says why).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice

SAMPLE = 20
COPY_WORDS = 1  # the warm start answers one word of the prompt, never a phrase
QUOTE_CHARS = 60
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_STRIP = " .,;:!?\"'`()[]{}"


@dataclass(frozen=True)
class Shapes:
    """How many of the rows read are of each kind, and the first ``free`` and
    ``needs_calc`` rows as ``(line, prompt, answer)``, cut to :data:`QUOTE_CHARS`."""

    rows: int
    counts: dict[str, int]
    first: dict[str, tuple[int, str, str]]

    def share(self, *kinds: str) -> float:
        return sum(self.counts.get(k, 0) for k in kinds) / self.rows if self.rows else 0


def _words(text: str) -> list[str]:
    return [w.strip(_STRIP) for w in text.lower().split() if w.strip(_STRIP)]


def _numbers(text: str) -> list[float]:
    return [float(n) for n in _NUMBER.findall(text)]


def _one_operation(target: float, numbers: list[float]) -> bool:
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i == j:
                continue
            results = [a + b, a - b, a * b]  # the calls the warm start makes
            if any(abs(r - target) < 1e-9 for r in results):
                return True
    return False


def kind_of(prompt: str, answer: str, calculator: bool) -> str:
    """``copy``, ``calc``, ``needs_calc`` or ``free`` (see the module's docstring)."""
    said = " ".join(answer.split()).strip(_STRIP).lower()
    numbers = _numbers(prompt)
    if _NUMBER.fullmatch(said):
        value = float(said)
        if any(abs(value - n) < 1e-9 for n in numbers):
            return "copy"
        if not _one_operation(value, numbers[:12]):
            # the calculator can chain calls; with it on and numbers to use, the
            # benefit of the doubt
            return "calc" if calculator and len(numbers) >= 2 else "free"
        return "calc" if calculator else "needs_calc"
    words = _words(said)
    if words and len(words) <= COPY_WORDS and set(words) <= set(_words(prompt)):
        return "copy"
    return "free"


def shapes(
    path: str, fmt: str, prompt_key: str, answer_key: str, calculator: bool
) -> Shapes | None:
    """The kinds of the first rows of the file at ``path`` (a checked real path), or
    None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_size, st.st_mtime_ns)
    return _shapes(path, stamp, fmt, prompt_key, answer_key, calculator)


@lru_cache(maxsize=32)
def _shapes(
    path: str,
    stamp: tuple[int, int],
    fmt: str,
    prompt_key: str,
    answer_key: str,
    calculator: bool,
) -> Shapes | None:
    """``stamp`` (size, modification time) is only the cache's key."""
    from contextlib import closing

    from dashboard.library.dataset_limits import upload_limits
    from trainer.envs.dataset_files import (
        DatasetError,
        file_format,
        iter_records,
        row_of,
    )

    counts: dict[str, int] = {}
    first: dict[str, tuple[int, str, str]] = {}
    rows = 0
    try:
        fmt = file_format(path, fmt)
        with closing(iter_records(path, fmt=fmt, limits=upload_limits())) as records:
            for line, raw in islice(records, SAMPLE):
                row = row_of(line, raw, prompt_key, answer_key, None, fmt)
                kind = kind_of(row.prompt, row.answer, calculator)
                counts[kind] = counts.get(kind, 0) + 1
                first.setdefault(kind, (line, _cut(row.prompt), _cut(row.answer)))
                rows += 1
    except (DatasetError, OSError, ValueError):
        return None
    return Shapes(rows, counts, first) if rows else None


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"
