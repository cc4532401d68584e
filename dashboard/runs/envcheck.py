"""The run's environment built once at submit, so that what only building it tells
(a dataset row without the prompt key, an empty split) is refused beside its field
before launch instead of failing the run after it.

A ``dataset`` environment reads its file when it is built (at most ``max_rows`` rows,
each held to the trainer's row limits: :mod:`trainer.envs.row_limits`). The form checks
as the user types, so a build is kept, by what it depends on: the environment's name,
parameters and seed, and the size and modification time of each file they name (a file
replaced is read again). Only the outcome is kept (the vocabulary's size, which the step
budget needs, and the refusals), never the rows; at most :data:`KEPT` of them.

An environment without a file among its parameters (``calc``, ``search``'s built-in
corpus, ``swarm``) takes nothing from the user that building it could refuse: the check
leaves it alone, and the budget builds it for its vocabulary only when it needs one.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dashboard.library import roots

log = logging.getLogger(__name__)

KEPT = 32
_FIELD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*): (.+)$", re.S)


@dataclass(frozen=True)
class Built:
    """What building the environment told: the default tokenizer's words (None when
    it could not be built) and ``config.env.params.<field>: message`` refusals."""

    vocabulary: int | None
    errors: tuple[str, ...] = ()


def check_env(config: Any) -> list[str]:
    """Refusals for a checked ``TrainConfig`` whose environment reads a file and
    cannot be built from it; empty when it builds, or reads no file."""
    if not _files(config.env.params.model_dump(mode="json")):
        return []
    return list(built(config).errors)


def built(config: Any) -> Built:
    """The environment of ``config`` built, or the outcome kept from the last build
    with the same parameters and files."""
    params = config.env.params.model_dump(mode="json")
    stamps = tuple((p, _stamp(p)) for p in _files(params))
    return _build(
        config.env.name, json.dumps(params, sort_keys=True), config.seed, stamps
    )


def _files(params: dict[str, Any]) -> list[str]:
    out = []
    for loc in roots.path_fields(params):
        value: Any = params
        for key in loc:
            value = value[key]
        if value:
            out.append(value)
    return out


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@lru_cache(maxsize=KEPT)
def _build(name: str, params_json: str, seed: int, stamps: tuple) -> Built:
    from trainer.envs.base import make_env
    from trainer.envs.row_limits import DatasetError

    params = json.loads(params_json)
    try:
        env = make_env(name, params, seed=seed)
        return Built(len(env.vocabulary()))
    except DatasetError as exc:
        # The file is at fault unless the message names another field.
        return Built(None, (_line(name, params, str(exc), default="path") or "",))
    except ValueError as exc:  # "holdout: the 'train' split of 3 rows is empty"
        line = _line(name, params, str(exc), default=None)
        if line is not None:
            return Built(None, (line,))
        log.warning("env check: %s could not be built", name, exc_info=True)
    except Exception:  # an environment that cannot be built here: the worker tells
        log.warning("env check: %s could not be built", name, exc_info=True)
    return Built(None)


def _line(
    name: str, params: dict[str, Any], message: str, default: str | None
) -> str | None:
    """``config.env.params.<field>: message`` for the field the message starts with
    (a parameter of the environment), else for ``default``; None without either.
    A path in the message as the form names it (no server path in an answer)."""
    from trainer.envs.base import ENVIRONMENTS

    fields = ENVIRONMENTS.get(name).Params.model_fields
    m = _FIELD.match(message)
    field, text = (m.group(1), m.group(2)) if m else (None, message)
    if field not in fields:
        field, text = default, message
    if field is None:
        return None
    text = roots.shown_text(text, {"env": {"params": params}})
    return f"config.env.params.{field}: {text}"
