"""Model and data roots: which files a run on the platform may read.

Every path in a run config (``model.path``, a judge's ``model_path``, and every
``path`` / ``*_path`` field of the environment's parameters, plugins' included) must
resolve, after symlinks (``os.path.realpath``), inside a root: ``MODEL_ROOTS`` for
model directories, ``DATA_ROOTS`` for data files. A relative path resolves against the
roots in order, the first holding it (as a shell's PATH; the model picker offers
models by that path, so no answer shows a root's place on the server); a ``..``
component is refused outright. A dataset uploaded by one user
(``<data root>/uploads/<user id>/``) is refused to every other user. The refusal is
one message per field, the same whether the path is missing, of the wrong kind or
outside every root, so an answer never tells whether a path outside the roots exists.
A judge's ``endpoint`` must name an enabled entry of the allow-list.

Pure functions over ``settings``; the database (the allow-list, runs) is the caller's
(:mod:`dashboard.runs.services`). The trainer CLI never goes through here: on the user's own
machine it reads what it is given.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings

MODEL_MESSAGE = "must be a directory inside the model roots"
DATA_MESSAGE = "must be a file inside the data roots"
ENDPOINT_MESSAGE = "must name an enabled judge endpoint of the allow-list"
UPLOADS = "uploads"


def model_roots() -> list[Path]:
    return [Path(p) for p in settings.MODEL_ROOTS]


def data_roots() -> list[Path]:
    return [Path(p) for p in settings.DATA_ROOTS]


def uploads_dir(user_id: Any) -> Path:
    """Where a user's uploaded datasets live: ``<first data root>/uploads/<id>``."""
    return data_roots()[0] / UPLOADS / str(int(user_id))


def _real(path: Path | str) -> str:
    return os.path.realpath(path)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve(
    value: Any, roots: list[Path], *, want_dir: bool, owner_id: Any = None
) -> str | None:
    """The real path of ``value`` if it is a directory (``want_dir``) or a file inside
    ``roots`` that ``owner_id`` may read; None otherwise (whatever the reason)."""
    if not isinstance(value, str) or not value or "\x00" in value or not roots:
        return None
    path = Path(value)
    if ".." in path.parts:
        return None
    if path.is_absolute():
        return _check(path, roots, want_dir, owner_id)
    for root in roots:
        real = _check(root / path, roots, want_dir, owner_id)
        if real is not None:
            return real
    return None


def _check(path: Path, roots: list[Path], want_dir: bool, owner_id: Any) -> str | None:
    real = _real(path)
    real_roots = [_real(r) for r in roots]
    if not any(_under(real, r) for r in real_roots):
        return None
    for r in (_real(d) for d in data_roots()):
        uploads = os.path.join(r, UPLOADS)
        mine = os.path.join(uploads, str(owner_id)) if owner_id is not None else None
        if _under(real, uploads) and not (mine and _under(real, mine)):
            return None  # another user's upload (or the uploads folder itself)
    ok = os.path.isdir(real) if want_dir else os.path.isfile(real)
    return real if ok else None


def path_fields(config: Any, loc: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Locations of the path fields set in a config dict: keys ``path`` or
    ``*_path`` holding a string, at any depth."""
    if isinstance(config, dict):
        for key, value in config.items():
            here = (*loc, key)
            if isinstance(value, str) and (key == "path" or str(key).endswith("_path")):
                yield here
            else:
                yield from path_fields(value, here)
    elif isinstance(config, list):
        for i, value in enumerate(config):
            yield from path_fields(value, (*loc, i))


def is_model_path(loc: tuple[Any, ...]) -> bool:
    return loc[:1] == ("model",) or loc[-1] == "model_path"


def field_name(loc: tuple[Any, ...]) -> str:
    return "config." + ".".join(str(p) for p in loc)


def shown(path: str, model: bool) -> str:
    """``path`` as a person picks it: relative to the first model (``model``) or
    data root that holds it, as the form's pickers write it; the path as it is
    where that would not name it again (outside every root, or shadowed by the
    same relative path in an earlier root). The stored config keeps the real path
    the trainer opens; pages show this one (no server path on a page)."""
    if not isinstance(path, str) or not path or "\x00" in path:
        return path
    real = _real(path)
    roots = model_roots() if model else data_roots()
    for root in roots:
        top = _real(root)
        if real != top and _under(real, top):
            rel = os.path.relpath(real, top)
            for again in roots:  # the first root with this relative path wins
                candidate = Path(again) / rel
                if os.path.lexists(candidate):
                    return rel if _real(candidate) == real else path
    return path


def shown_paths(config: Any) -> Any:
    """``config`` (a dict) with each path field as :func:`shown` shows it."""
    if not isinstance(config, dict):
        return config
    out = copy.deepcopy(config)
    for loc in list(path_fields(config)):
        holder = out
        for key in loc[:-1]:
            holder = holder[key]
        holder[loc[-1]] = shown(holder[loc[-1]], is_model_path(loc))
    return out


def shown_config(run: Any) -> Any:
    """A run's config as every page and API answer shows it (the run page, compare,
    ``GET /api/runs/{id}``, its export): each path as :func:`shown` shows it. An
    external run's config is its trainer's, shown as it was sent."""
    return run.config if run.external else shown_paths(run.config)


def shown_text(text: str, config: Any) -> str:
    """``text`` (a run's error quoting its dataset's path, a refusal) with each path
    of ``config`` written as :func:`shown` shows it."""
    if not text or not isinstance(config, dict):
        return text
    for loc in path_fields(config):
        holder = config
        for key in loc:
            holder = holder[key]
        real = holder
        if real and real in text:
            text = text.replace(real, shown(real, is_model_path(loc)))
    return text


def shown_errors(run: Any, attempts: list[Any]) -> list[Any]:
    """``attempts`` of ``run``; the run's error and each attempt's message, for a
    page (never saved), with the config's paths as :func:`shown_text` writes them."""
    if not run.external:
        run.error = shown_text(run.error, run.config)
        for a in attempts:
            a.message = shown_text(a.message, run.config)
    return attempts


def check_paths(
    config: dict[str, Any], *, owner_id: Any = None, endpoints: Collection[str] = ()
) -> tuple[dict[str, Any], list[str]]:
    """(the config with every path replaced by its real path, ``field: message``
    refusals). ``config`` is a validated config's JSON dump."""
    out = copy.deepcopy(config)
    errors: list[str] = []
    for loc in list(path_fields(config)):
        model = is_model_path(loc)
        holder = out
        for key in loc[:-1]:
            holder = holder[key]
        real = resolve(
            holder[loc[-1]],
            model_roots() if model else data_roots(),
            want_dir=model,
            owner_id=owner_id,
        )
        if real is None:
            errors.append(
                f"{field_name(loc)}: {MODEL_MESSAGE if model else DATA_MESSAGE}"
            )
        else:
            holder[loc[-1]] = real
    judges = (config.get("reward") or {}).get("judges") or []
    for i, judge in enumerate(judges):
        name = judge.get("endpoint")
        if name is not None and name not in endpoints:
            errors.append(f"config.reward.judges.{i}.endpoint: {ENDPOINT_MESSAGE}")
    return out, errors
