"""The CUDA path: bf16 policy, sampling and updates on the GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]


def test_it_trains_in_bf16_on_the_gpu(reward_fn):
    cfg = TrainConfig.model_validate(
        {
            "steps": 2,
            "env": {"name": "calc"},
            "model": {"device": "cuda"},
            "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
        }
    )
    sink = ListSink()
    result = train(cfg, make_env("calc", seed=0), reward_fn, sink)
    assert result.status == "succeeded"
    assert sink.of_type("run_started")[0]["device"].startswith("cuda")
