"""Fixtures shared by every test package."""

from __future__ import annotations

import os
import sys

import pytest


def _threads_per_process() -> None:
    """Run a process per core (``make test``: pytest-xdist), each process computes on
    its share of the cores. PyTorch takes every core by default, and its threads wait
    for each other spinning: two processes of two threads each on two cores made the
    embedded smoke test's warm start nine times slower (36 s alone, 321 s beside
    another process). ``OMP_NUM_THREADS`` is set before PyTorch is imported, so the
    servers, ranks and CLIs the tests start take the same share; a value already set
    is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers < 1 or "OMP_NUM_THREADS" in os.environ:
        return
    share = max(1, (os.cpu_count() or 1) // workers)
    os.environ["OMP_NUM_THREADS"] = str(share)
    torch = sys.modules.get("torch")
    if torch is not None:  # imported before this file (by a plugin): set it too
        torch.set_num_threads(share)


_threads_per_process()


def pytest_collection_modifyitems(config, items):
    """The long test files first: those that need the services (a Celery worker, a
    killed process, a Redis outage), then the slow and browser ones, each file's tests
    in their order. Run a process per core (``make test``, pytest-xdist hands out a
    file at a time), the few-test files that take minutes no longer come last, with
    one process working and the other idle."""

    def weight(item) -> int:
        marks = {m.name for m in item.iter_markers()}
        return 0 if "services" in marks else 1 if marks & {"slow", "browser"} else 2

    def file_of(item) -> str:
        return item.nodeid.split("::", 1)[0]

    weights: dict[str, int] = {}  # by file, in the order collected
    for item in items:
        weights[file_of(item)] = min(weights.get(file_of(item), 2), weight(item))
    order = {path: (w, i) for i, (path, w) in enumerate(weights.items())}
    items.sort(key=lambda item: order[file_of(item)])


@pytest.fixture
def plugin_sandbox():
    """Put the registries, the run schema and the plugin loader back as they were
    after a test that loads plugins (a plugin's registrations last for the process)."""
    import trainer.plugins as tp
    from rewards.components import COMPONENTS
    from rewards.judges import JUDGE_BACKENDS
    from rewards.judges.checks import RUBRIC_CHECKS
    from trainer.config import refresh_schema
    from trainer.envs import ENVIRONMENTS
    from trainer.envs.tools import TOOLS

    registries = [ENVIRONMENTS, COMPONENTS, TOOLS, JUDGE_BACKENDS, RUBRIC_CHECKS]
    saved = [dict(r._items) for r in registries]
    loaded = set(tp._loaded)
    yield
    for registry, items in zip(registries, saved, strict=True):
        registry._items.clear()
        registry._items.update(items)
    for name in tp._loaded - loaded:
        sys.modules.pop(name.partition(":")[0], None)
    tp._loaded.intersection_update(loaded)
    refresh_schema()


@pytest.fixture(autouse=True, scope="session")
def _auto_device_is_the_cpu():
    """On a machine with a GPU, ``model.device: auto`` means CUDA, but the tests
    build their inputs on the CPU and compare float32 numbers: for the tests, ``auto``
    is the CPU, as on the CI machine (the ``gpu`` tests ask for ``cuda`` by name).
    Session-wide, so module-scoped policies are built on the CPU too. Without CUDA
    this changes nothing."""
    import torch

    if not torch.cuda.is_available():
        yield
        return
    import trainer.models
    import trainer.policy

    real = trainer.models.resolve_device

    def resolve(name: str):
        return real("cpu" if name == "auto" else name)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer.models, "resolve_device", resolve)
        mp.setattr(trainer.policy, "resolve_device", resolve)
        yield


@pytest.fixture(autouse=True)
def _no_alert_sender_outlives_its_test():
    """A test that sends alert webhooks starts this process's sender thread; left
    running, it would look for due deliveries in later tests, which have no
    database (or another test's). Stopped after each test that started it."""
    yield
    webhooks = sys.modules.get("dashboard.ingest.webhooks")
    if webhooks is not None:
        webhooks.stop()
