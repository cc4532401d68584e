"""How a rank under torchrun reports its ending when SIGTERM arrives in the middle of a
collective: torch's distributed checkpoint catches every rank's ``BaseException`` during a
save and raises a ``CheckpointException`` (a ``BaseException`` too) holding them all. A
stop must still read as ``terminated`` (the attempt is requeued and resumes), a real
failure gathered the same way as ``failed`` naming it, and neither may leave the rank
without a report (``test_run_multiprocess``'s server stop once found none)."""

from __future__ import annotations

import argparse
import socket

import pytest
from torch.distributed.checkpoint.api import CheckpointException

from dashboard.runs import lease, rank, services

pytestmark = pytest.mark.django_db

_RAISE: list[BaseException] = []


def raising_trainer(*args, **kwargs):
    raise _RAISE[0]


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
    with socket.socket() as s:  # a one-process gloo group, as torchrun would start it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in dict(
        RANK=0, LOCAL_RANK=0, WORLD_SIZE=1, MASTER_ADDR="127.0.0.1", MASTER_PORT=port
    ).items():
        monkeypatch.setenv(name, str(value))
    run = services.launch_run(owner, tiny_config)
    claim = lease.claim(run.id)
    settings.RUN_TRAINER = f"{__name__}.raising_trainer"
    _RAISE[:] = [exc]
    args = argparse.Namespace(
        run_id=str(run.id),
        attempt=claim.attempt,
        checkpoint_dir=str(tmp_path / "ckpt"),
        reports=str(tmp_path / "reports"),
    )
    report = rank.train_rank(args, 0)
    assert report.status == status
    if status == "failed":
        assert report.message.startswith(type(exc).__name__)
        assert report.detail  # the traceback, for the attempt's admin view


def test_only_a_stop_is_taken_for_a_stop():
    assert rank.stopped_by_signal(KeyboardInterrupt())
    assert rank.stopped_by_signal(_gathered(RuntimeError("x"), KeyboardInterrupt()))
    assert not rank.stopped_by_signal(_gathered(RuntimeError("x")))
    assert not rank.stopped_by_signal(SystemExit(1))
