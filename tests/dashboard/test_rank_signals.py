"""How a rank under torchrun reports its ending when SIGTERM arrives in the middle of a
collective: torch's distributed checkpoint catches every rank's ``BaseException`` during a
save and raises a ``CheckpointException`` (a ``BaseException`` too) holding them all. A
stop must still read as ``terminated`` (the attempt is requeued and resumes), a real
failure gathered the same way as ``failed`` naming it, and neither may leave the rank
without a report (``test_run_multiprocess``'s server stop once found none)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket

import pytest
from torch.distributed.checkpoint.api import CheckpointException

from dashboard.runs import lease, rank, services
from dashboard.runs.multiprocess import Report

pytestmark = pytest.mark.django_db

_RAISE: list[BaseException] = []


def raising_trainer(*args, **kwargs):
    raise _RAISE[0]


def swallowing_trainer(*args, **kwargs):
    """SIGTERM comes inside the checkpoint's write phase, which catches it to gather
    it; the gather then fails because the other rank, stopped elsewhere, is gone."""
    with contextlib.suppress(BaseException):  # dcp's all_reduce keeps it to gather
        rank._on_sigterm(signal.SIGTERM, None)
    raise RuntimeError(
        "[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:3978"
    )


def _gathered(*excs: BaseException) -> CheckpointException:
    """As dcp's ``_DistWrapper.all_reduce`` raises it: rank -> (exception, traceback)."""
    return CheckpointException("write", {r: (e, []) for r, e in enumerate(excs)})


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (rank.Terminated(), "terminated"),
        (_gathered(rank.Terminated(), rank.Terminated()), "terminated"),
        (_gathered(ValueError("disk"), rank.Terminated()), "terminated"),
        (_gathered(OSError("No space left on device")), "failed"),
        (ValueError("bad reward"), "failed"),
    ],
)
def test_a_stop_inside_a_checkpoint_save_is_reported_as_terminated(
    owner, tiny_config, settings, enqueued, tmp_path, monkeypatch, exc, status
):
    _RAISE[:] = [exc]
    report = _train_one_rank(owner, tiny_config, settings, tmp_path, monkeypatch)
    assert report.status == status
    if status == "failed":
        assert report.message.startswith(type(exc).__name__)
        assert report.detail  # the traceback, for the attempt's admin view


@pytest.fixture
def sigterm_restored():
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)
    rank._stop_asked.clear()


def test_a_collective_that_fails_after_this_ranks_sigterm_is_the_stop(
    owner, tiny_config, settings, enqueued, tmp_path, monkeypatch, sigterm_restored
):
    """The other rank left the gather because it was stopped too: the run resumes."""
    trainer = f"{__name__}.swallowing_trainer"
    report = _train_one_rank(
        owner, tiny_config, settings, tmp_path, monkeypatch, trainer
    )
    assert (report.status, report.message) == ("terminated", "stopped by torchrun")


def _train_one_rank(
    owner, tiny_config, settings, tmp_path, monkeypatch, trainer=None
) -> Report:
    with socket.socket() as s:  # a one-process gloo group, as torchrun would start it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in dict(
        RANK=0, LOCAL_RANK=0, WORLD_SIZE=1, MASTER_ADDR="127.0.0.1", MASTER_PORT=port
    ).items():
        monkeypatch.setenv(name, str(value))
    run = services.launch_run(owner, tiny_config)
    claim = lease.claim(run.id)
    settings.RUN_TRAINER = trainer or f"{__name__}.raising_trainer"
    args = argparse.Namespace(
        run_id=str(run.id),
        attempt=claim.attempt,
        checkpoint_dir=str(tmp_path / "ckpt"),
        reports=str(tmp_path / "reports"),
    )
    return rank.train_rank(args, 0)


def test_only_a_stop_is_taken_for_a_stop():
    assert not rank._stop_asked.is_set()
    assert rank.stopped_by_signal(KeyboardInterrupt())
    assert rank.stopped_by_signal(_gathered(RuntimeError("x"), KeyboardInterrupt()))
    assert not rank.stopped_by_signal(_gathered(RuntimeError("x")))
    assert not rank.stopped_by_signal(SystemExit(1))
