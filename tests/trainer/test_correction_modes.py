"""Each correction option of issue 23 (item 3) through the real loop
(``trainer.loop.train``, a tiny calc config, a few steps): what it changes in what is
trained or recorded. The math itself is pinned in ``test_correction_math.py``.

The sampler's log-probs of our own engine agree with the learner's to float noise,
so the importance-sampling tests shift chosen sampler log-probs (by 2 nats: a ratio
of e^2 = 7.4, above any cap used here) after the batch is built, as a vLLM sampler
out of step with the learner would.
"""

from __future__ import annotations

import pytest
import torch
from option_registry import covers

import trainer.step
import trainer.update
from rewards.types import RewardBreakdown, RewardResult
from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train

SHIFT = 2.0


def _config(**algorithm):
    return TrainConfig.model_validate(
        {
            "steps": 2,
            "env": {"name": "calc"},
            "rollout": {"tasks_per_step": 2, "group_size": 3, "max_turns": 2},
            "model": {"warmstart_steps": 2},
            "algorithm": algorithm,
        }
    )


def _spread(episodes, step):
    """Rewards 0, 1, 2 within every group of three: advantages are never all 0, so
    every step has a gradient to keep or mask (a barely warmed-up policy solves
    nothing, and equal rewards would train nothing in any mode)."""
    return [
        RewardResult(RewardBreakdown(total=float(i % 3), components={}, per_step={}))
        for i, _ in enumerate(episodes)
    ]


def _run(cfg, reward_fn=None) -> ListSink:
    sink = ListSink()
    result = train(cfg, make_env("calc", seed=0), _spread, sink)
    assert result.status == "succeeded"
    return sink


def _shift_sampler(monkeypatch, pick) -> None:
    """Every batch the loop builds gets its sampler log-probs lowered by SHIFT where
    ``pick(loss_mask)`` (B, T-1) is True."""
    real = trainer.step.collate

    def collate(rows, pad_id, device):
        batch = real(rows, pad_id, device)
        if batch.sampler_logprobs is not None:
            where = pick(batch.loss_mask) & (batch.loss_mask > 0)
            batch.sampler_logprobs = batch.sampler_logprobs - SHIFT * where
        return batch

    monkeypatch.setattr(trainer.step, "collate", collate)


def _even_columns(mask: torch.Tensor) -> torch.Tensor:
    return (torch.arange(mask.shape[1]) % 2 == 0).expand_as(mask)


def _targets(traj: dict) -> tuple[dict[int, str | None], set[int]]:
    """(target index -> its ``masked`` reason or None for every trained token of
    the trajectory, the trained targets). Target t-1 scores token t."""
    reasons: dict[int, str | None] = {}
    pos = 0
    for seg in traj["segments"]:
        n = len(seg["token_ids"])
        if seg["mask"] is None:
            for k in range(n):
                reasons[pos + k - 1] = None
            for k, why in seg.get("masked", []):
                reasons[pos + k - 1] = why
        pos += n
    return reasons, set(reasons)


def _steps(sink):
    return [e["metrics"] for e in sink.of_type("step") if e["step"] > 0]


# ----- algorithm.rollout_correction.mode = mask, kind = token ----------------------
@covers("algorithm.rollout_correction.mode")
def test_token_mask_masks_exactly_the_tokens_out_of_bounds(monkeypatch, reward_fn):
    _shift_sampler(monkeypatch, _even_columns)
    cfg = _config(rollout_correction={"kind": "token", "mode": "mask", "cap": 2.0})
    sink = _run(cfg, reward_fn)
    trajs = sink.of_type("trajectory")
    assert trajs
    masked = kept = 0
    for t in trajs:
        reasons, trained = _targets(t)
        for target in trained:
            if target % 2 == 0:  # shifted: ratio e^2 > cap 2
                assert reasons[target] == "is_ratio", (t["index"], target)
                masked += 1
            else:
                assert reasons[target] is None
                kept += 1
    assert masked and kept
    for m in _steps(sink):
        assert 0 < m["rollout_correction/masked_frac"] < 1


def test_every_token_masked_trains_nothing_truncated_still_does(monkeypatch, reward_fn):
    _shift_sampler(monkeypatch, lambda mask: torch.ones_like(mask, dtype=torch.bool))
    masked = _run(
        _config(rollout_correction={"kind": "token", "mode": "mask"}), reward_fn
    )
    for m in _steps(masked):
        assert m["rollout_correction/masked_frac"] == 1.0
        assert m["grad_norm"] == 0.0  # no token carries a gradient
    truncated = _run(_config(rollout_correction={"kind": "token"}), reward_fn)
    assert any(m["grad_norm"] > 0 for m in _steps(truncated))
    assert all(
        "masked" not in s
        for t in truncated.of_type("trajectory")
        for s in t["segments"]
    )


# ----- algorithm.rollout_correction.mode = mask, kind = sequence -------------------
@covers("algorithm.rollout_correction.kind")
def test_sequence_mask_drops_whole_trajectories(monkeypatch, reward_fn):
    # One shifted token in even rows: their sequence ratio is e^2 > cap 2.
    def first_trained_of_even_rows(mask):
        first = torch.zeros_like(mask, dtype=torch.bool)
        for b in range(0, mask.shape[0], 2):
            cols = (mask[b] > 0).nonzero()
            if len(cols):
                first[b, cols[0]] = True
        return first

    _shift_sampler(monkeypatch, first_trained_of_even_rows)
    cfg = _config(rollout_correction={"kind": "sequence", "mode": "mask"})
    sink = _run(cfg, reward_fn)
    for step in (1, 2):
        trajs = [t for t in sink.of_type("trajectory") if t["step"] == step]
        assert len(trajs) == 6
        for row, t in enumerate(trajs):  # recorded in batch order
            reasons, trained = _targets(t)
            whole = {reasons[x] for x in trained}
            assert whole == ({"is_ratio"} if row % 2 == 0 else {None}), (step, row)


# ----- algorithm.rollout_correction.lower -----------------------------------------
@covers("algorithm.rollout_correction.lower")
def test_a_lower_bound_masks_tokens_below_it(monkeypatch, reward_fn):
    # Raised sampler log-probs: ratio e^-2 = .135 < lower .5 (the cap is not hit).
    real = trainer.step.collate

    def collate(rows, pad_id, device):
        batch = real(rows, pad_id, device)
        if batch.sampler_logprobs is not None:
            odd = ~_even_columns(batch.loss_mask) & (batch.loss_mask > 0)
            batch.sampler_logprobs = batch.sampler_logprobs + SHIFT * odd
        return batch

    monkeypatch.setattr(trainer.step, "collate", collate)
    cfg = _config(
        rollout_correction={"kind": "token", "mode": "mask", "lower": 0.5, "cap": 3}
    )
    sink = _run(cfg, reward_fn)
    for t in sink.of_type("trajectory"):
        reasons, trained = _targets(t)
        for target in trained:
            assert reasons[target] == ("is_ratio" if target % 2 else None)
    for m in _steps(sink):
        assert m["rollout_correction/low_frac"] > 0
        assert m["rollout_correction/capped_frac"] == 0


# ----- algorithm.kl_kind = abs ----------------------------------------------------
@covers("algorithm.kl_kind")
def test_kl_abs_is_the_estimator_the_loop_adds(monkeypatch, reward_fn):
    seen = []
    real = trainer.update.kl_penalty

    def spy(logprobs, ref_logprobs, *, kind, clamp=10.0):
        out = real(logprobs, ref_logprobs, kind=kind, clamp=clamp)
        seen.append((kind, (logprobs - ref_logprobs).detach().abs(), out.detach()))
        return out

    monkeypatch.setattr(trainer.update, "kl_penalty", spy)
    cfg = _config(kl_beta=0.1, kl_kind="abs", kl_clamp=None)
    cfg = cfg.model_copy(update={"steps": 3})
    sink = _run(cfg, reward_fn)
    assert seen and all(kind == "abs" for kind, _, _ in seen)
    for _, absd, out in seen:
        torch.testing.assert_close(out, absd)  # |log pi - log pi_ref|, unclamped
    kls = [m["kl"] for m in _steps(sink)]
    # Step 1: the policy is the reference (to float noise); then it moves away.
    assert kls[0] < 1e-6 < kls[-1]


# ----- algorithm.delta --------------------------------------------------------------
@covers("algorithm.delta")
def test_delta_reaches_the_loss_and_caps_ratios(monkeypatch, reward_fn):
    calls = []
    real = trainer.update.policy_loss

    def spy(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        calls.append((kwargs.get("delta"), metrics))
        return loss, metrics

    monkeypatch.setattr(trainer.update, "policy_loss", spy)
    # Four epochs at a high rate: the ratio moves past 1.05 within the step.
    cfg = _config(delta=1.05, clip_low=0.01, clip_high=0.01)
    cfg = cfg.model_copy(
        update={"optim": cfg.optim.model_copy(update={"epochs": 4, "lr": 0.05})}
    )
    sink = _run(cfg, reward_fn)
    assert calls and all(d == 1.05 for d, _ in calls)
    steps = _steps(sink)
    assert all("clip_ratio/delta_mean" in m for m in steps)
    assert max(m["clip_ratio/delta_mean"] for m in steps) > 0


# ----- algorithm.top_entropy_quantile ---------------------------------------------
@covers("algorithm.top_entropy_quantile")
def test_top_entropy_quantile_masks_the_low_entropy_tokens(reward_fn):
    sink = _run(_config(top_entropy_quantile=0.25), reward_fn)
    for step in (1, 2):
        trajs = [t for t in sink.of_type("trajectory") if t["step"] == step]
        low, high, total = [], [], 0
        for t in trajs:
            reasons, trained = _targets(t)
            ent = _entropies(t)
            for target in trained:
                total += 1
                (low if reasons[target] == "low_entropy" else high).append(ent[target])
        # One minibatch: the top quarter kept (ties at the threshold stay).
        assert len(high) == pytest.approx(0.25 * total, abs=1.0)
        assert max(low) <= min(high)
    for m in _steps(sink):
        assert m["top_entropy/masked_frac"] == pytest.approx(0.75, abs=0.05)


def _entropies(traj: dict) -> dict[int, float]:
    """target -> the recorded entropy of the token it scores (the policy's, from
    the update's forward: one epoch, one minibatch)."""
    out, pos = {}, 0
    for seg in traj["segments"]:
        for k, e in enumerate(seg["entropy"]):
            out[pos + k - 1] = e
        pos += len(seg["token_ids"])
    return out
