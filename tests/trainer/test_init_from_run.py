"""``model.init_from_run``: a run starts from another run's weights, not its
optimizer or step."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from trainer.config import TrainConfig
from trainer.events import ListSink
from trainer.runner import run_from_config

BASE = {
    "seed": 1,
    "model": {"size": "tiny", "device": "cpu"},
    "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
    "checkpoint": {"every": 1, "keep": 5},
}


def _weights(path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "policy.safetensors"))


def test_a_run_starts_from_the_given_checkpoints_weights_at_step_one(tmp_path):
    first = TrainConfig.model_validate({**BASE, "steps": 2})
    assert run_from_config(first, checkpoint_dir=tmp_path / "a").status == "succeeded"
    source = tmp_path / "a" / "step-000002"

    # Another seed (so another initialisation), and lr at its floor: step 1 of the
    # new run barely moves the loaded weights.
    cfg = {**BASE, "seed": 2, "steps": 1, "optim": {"lr": 1e-12}}
    second = TrainConfig.model_validate(
        {**cfg, "model": {**BASE["model"], "init_from_run": "run-a"}}
    )
    sink = ListSink()
    result = run_from_config(
        second, sink, checkpoint_dir=tmp_path / "b", init_checkpoint=source
    )
    assert result.status == "succeeded" and result.last_step == 1
    assert sink.of_type("run_started")[0]["start_step"] == 1  # not the source's step
    fresh = tmp_path / "c"
    run_from_config(TrainConfig.model_validate(cfg), checkpoint_dir=fresh)
    want, got = _weights(source), _weights(tmp_path / "b" / "step-000001")
    other = _weights(fresh / "step-000001")
    for name, w in want.items():
        assert torch.allclose(got[name], w, atol=1e-6), name
    assert any(not torch.allclose(other[n], w, atol=1e-3) for n, w in want.items())
    # The optimizer starts afresh: one Adam step, not the source's two.
    state = torch.load(tmp_path / "b" / "step-000001" / "state.pt", weights_only=True)
    assert state["optimizer"]["state"][0]["step"] == 1


def test_without_the_checkpoint_directory_the_run_id_is_a_clear_error():
    cfg = TrainConfig.model_validate(
        {**BASE, "model": {**BASE["model"], "init_from_run": "some-run"}}
    )
    with pytest.raises(ValueError, match="model.init_from_run"):
        run_from_config(cfg)
