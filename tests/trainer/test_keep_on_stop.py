"""A run stopped to resume (a demo yielding to a user's run, a server shutting down:
``save_on_stop``) keeps its state at the stop, and the next attempt goes on from there
to the weights an unbroken run ends with: inside the warm start, between steps, and
inside a step's generation (that step's tasks and samples drawn again). A cancel
(``save_on_stop`` False) keeps nothing more."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from trainer.checkpoint import list_checkpoints
from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train
from trainer.stopping import Every
from trainer.warmstart import WARM_FILE

CFG = {
    "steps": 5,
    "seed": 4,
    "env": {"name": "calc"},
    "model": {"warmstart_steps": 6, "warmstart_batch": 2},
    "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
    "checkpoint": {"every": 0},  # the last step's only
}


def _train(reward_fn, root, sink=None, should_stop=None, save_on_stop=None):
    cfg = TrainConfig.model_validate(CFG)
    return train(
        cfg,
        make_env("calc", seed=cfg.seed),
        reward_fn,
        sink or ListSink(),
        should_stop=should_stop,
        checkpoint_dir=root,
        save_on_stop=save_on_stop,
    )


def _weights(root) -> dict[str, torch.Tensor]:
    (last,) = [p for p in list_checkpoints(root) if p.name.endswith("-000005")]
    return {
        k: v
        for f in sorted(last.glob("*.safetensors"))
        for k, v in load_file(f).items()
    }


def _same(a, b) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory, reward_fn_module):
    root = tmp_path_factory.mktemp("unbroken")
    assert _train(reward_fn_module, root).status == "succeeded"
    return _weights(root)


@pytest.fixture(scope="module")
def reward_fn_module():
    from tests.trainer.conftest import outcome_and_format

    return outcome_and_format


class StopAfter:
    """``should_stop``: True from its ``n``-th question on (the warm start asks
    before each of its steps, and nothing else asks during it)."""

    def __init__(self, n: int) -> None:
        self.n, self.asked = n, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked >= self.n


def after_step(sink: ListSink, step: int):
    """``should_stop``: True once step ``step`` (0: the warm start) has ended: at
    the question before the next step."""

    def ended() -> bool:
        if step == 0:
            return any(e["done"] == e["of"] for e in sink.of_type("warmstart"))
        return any(e["step"] == step for e in sink.of_type("step"))

    return ended


def test_a_warm_start_stopped_to_resume_goes_on_from_its_step(
    tmp_path, reward_fn, unbroken
):
    sink = ListSink()
    tmp_path = tmp_path / "not-yet"  # made by the first thing kept in it
    # Asked before every warm-start step: True before the 4th, 3 of 6 done.
    result = _train(reward_fn, tmp_path, sink, StopAfter(4), lambda: True)
    assert (result.status, result.last_step) == ("cancelled", 0)
    assert (tmp_path / WARM_FILE).exists() and not list_checkpoints(tmp_path)
    sink = ListSink()
    assert _train(reward_fn, tmp_path, sink).status == "succeeded"
    warm = sink.of_type("warmstart")
    assert warm[0]["done"] == 4  # steps 1-3 not done again
    _same(_weights(tmp_path), unbroken)


def test_a_cancelled_warm_start_keeps_nothing_and_starts_over(tmp_path, reward_fn):
    _train(reward_fn, tmp_path, None, StopAfter(4), lambda: False)
    assert not (tmp_path / WARM_FILE).exists()
    _train(reward_fn, tmp_path, None, StopAfter(4))  # no save_on_stop at all
    assert not (tmp_path / WARM_FILE).exists()


def test_a_stop_between_steps_keeps_the_last_step_and_resumes_after_it(
    tmp_path, reward_fn, unbroken
):
    sink = ListSink()
    result = _train(reward_fn, tmp_path, sink, after_step(sink, 2), lambda: True)
    assert (result.status, result.last_step) == ("cancelled", 2)
    assert [e["step"] for e in sink.of_type("checkpoint")] == [2]
    sink = ListSink()
    assert _train(reward_fn, tmp_path, sink).status == "succeeded"
    assert sink.of_type("run_started")[0]["start_step"] == 3
    assert sink.of_type("warmstart") == []
    _same(_weights(tmp_path), unbroken)


def test_a_stop_before_step_1_keeps_the_finished_warm_start(
    tmp_path, reward_fn, unbroken
):
    sink = ListSink()
    result = _train(reward_fn, tmp_path, sink, after_step(sink, 0), lambda: True)
    assert (result.status, result.last_step) == ("cancelled", 0)
    assert not list_checkpoints(tmp_path) and (tmp_path / WARM_FILE).exists()
    sink = ListSink()
    assert _train(reward_fn, tmp_path, sink).status == "succeeded"
    assert sink.of_type("warmstart") == []  # nothing of it done again
    _same(_weights(tmp_path), unbroken)


def test_a_stop_inside_a_steps_generation_resumes_with_that_step_redrawn(
    tmp_path, reward_fn, unbroken, monkeypatch
):
    # The policy asks at every token (not at most every 0.2 s).
    monkeypatch.setattr("trainer.loop.Every", lambda f: Every(f, seconds=0.0))
    sink = ListSink()
    armed = []

    def should_stop() -> bool:
        # False until step 2 has ended, and at the question before step 3;
        # True from the first question inside step 3's generation.
        if any(e["step"] == 2 for e in sink.of_type("step")):
            armed.append(1)
        return len(armed) > 1

    result = _train(reward_fn, tmp_path, sink, should_stop, lambda: True)
    assert (result.status, result.last_step) == ("cancelled", 2)
    assert [e["step"] for e in sink.of_type("step")] == [1, 2]  # 3 was dropped
    assert [e["step"] for e in sink.of_type("checkpoint")] == [2]
    assert _train(reward_fn, tmp_path).status == "succeeded"
    _same(_weights(tmp_path), unbroken)


def test_a_cancel_between_steps_keeps_no_checkpoint_of_its_own(tmp_path, reward_fn):
    sink = ListSink()
    _train(reward_fn, tmp_path, sink, after_step(sink, 2), lambda: False)
    assert sink.of_type("checkpoint") == [] and not list_checkpoints(tmp_path)
