"""Log-probs, ratios, KL and entropy are taken at the sampling temperature."""

from __future__ import annotations

import pytest
import torch

from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train
from trainer.policy import Policy


def _config(temperature: float, **over) -> TrainConfig:
    base = {
        "steps": 1,
        "env": {"name": "calc"},
        "rollout": {
            "tasks_per_step": 2,
            "group_size": 2,
            "max_turns": 2,
            "temperature": temperature,
        },
        "algorithm": {"preset": "grpo"},
    }
    base.update(over)
    return TrainConfig.model_validate(base)


def _initial_policy(cfg: TrainConfig, env) -> Policy:
    """The model ``train`` starts from: the same seed, the same build."""
    torch.manual_seed(cfg.seed)
    return Policy.build(
        cfg.model,
        env.vocabulary(),
        max_positions=max(2048, cfg.rollout.max_total_tokens + 8),
    )


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_stored_old_logprobs_are_log_softmax_of_logits_over_temperature(
    temperature, reward_fn
):
    cfg = _config(temperature)
    env = make_env("calc", seed=0)
    sink = ListSink()
    train(cfg, env, reward_fn, sink)
    initial = _initial_policy(cfg, env)
    checked = 0
    for ev in sink.of_type("trajectory"):
        ids = [t for seg in ev["segments"] for t in seg["token_ids"]]
        old = [x for seg in ev["segments"] for x in seg["old_logprob"]]
        ent = [x for seg in ev["segments"] for x in seg["entropy"]]
        with torch.no_grad():
            logits = initial.model(input_ids=torch.tensor([ids])).logits[0].float()
        at_t = torch.log_softmax(logits / temperature, -1)
        at_1 = torch.log_softmax(logits, -1)
        for k in range(1, len(ids)):
            if old[k] is None:
                continue
            want = float(at_t[k - 1, ids[k]])
            assert old[k] == pytest.approx(want, abs=1e-4)
            assert abs(float(at_1[k - 1, ids[k]]) - want) > 1e-3  # T matters here
            p = at_t[k - 1].exp()
            assert ent[k] == pytest.approx(float(-(p * at_t[k - 1]).sum()), abs=1e-4)
            checked += 1
    assert checked > 0


def test_the_kl_reference_scores_at_the_sampling_temperature_too():
    torch.manual_seed(0)
    policy = Policy.build(
        TrainConfig().model, ["a", "b", "c"], temperature=0.5
    ).frozen_copy()
    ids = torch.tensor([[policy.bos_id, 6, 7, 8]])
    st = policy.token_stats(ids, torch.ones_like(ids))
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0, :-1].float()
    want = torch.log_softmax(logits / 0.5, -1).gather(-1, ids[0, 1:, None])[:, 0]
    assert torch.allclose(st.logprobs[0], want, atol=1e-5)
