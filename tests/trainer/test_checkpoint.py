"""Checkpoints are atomic, pruned, and restore weights, optimiser and RNGs exactly."""

from __future__ import annotations

import random

import torch

from trainer.checkpoint import (
    TrainState,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from trainer.config import ModelConfig
from trainer.policy import Policy

WORDS = ["a", "b", "c"]


def _setup():
    torch.manual_seed(0)
    p = Policy.build(ModelConfig(), WORDS)
    opt = torch.optim.AdamW(p.parameters(), lr=1e-2)
    loss = p.token_stats(
        torch.tensor([[2, 6, 7]]), torch.ones(1, 3, dtype=torch.long)
    ).logprobs.sum()
    loss.backward()
    opt.step()
    return p, opt


def test_it_restores_weights_optimizer_and_every_rng(tmp_path):
    p, opt = _setup()
    rng = random.Random(5)
    rng.random()
    gen = torch.Generator().manual_seed(9)
    torch.rand(3, generator=gen)
    save_checkpoint(
        tmp_path, policy=p, optimizer=opt, state=TrainState(7, rng, gen), meta={}
    )
    expected = (rng.random(), torch.rand(2, generator=gen), torch.rand(2))

    q, opt2 = _setup()
    torch.manual_seed(123)
    state = load_checkpoint(latest_checkpoint(tmp_path), policy=q, optimizer=opt2)
    assert state.step == 7
    for a, b in zip(p.state_dict().values(), q.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    assert state.task_rng.random() == expected[0]
    assert torch.equal(torch.rand(2, generator=state.sample_gen), expected[1])
    assert torch.equal(torch.rand(2), expected[2])


def test_it_keeps_only_the_newest_checkpoints_and_ignores_partial_ones(tmp_path):
    p, opt = _setup()
    for step in (1, 2, 3):
        save_checkpoint(
            tmp_path,
            policy=p,
            optimizer=opt,
            keep=2,
            state=TrainState(step, random.Random(0), torch.Generator()),
            meta={},
        )
    (tmp_path / ".tmp-step-000004-99").mkdir()  # what a crash mid-write leaves
    assert [c.name for c in list_checkpoints(tmp_path)] == [
        "step-000002",
        "step-000003",
    ]
    assert latest_checkpoint(tmp_path).name == "step-000003"
    assert latest_checkpoint(tmp_path / "missing") is None
