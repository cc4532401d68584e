"""The training loop end to end on the calc environment, with a local reward function."""

from __future__ import annotations

import math

import pytest

from trainer.algorithms import PRESETS
from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train

SKIP = ("timing_s/", "perf/")


def _config(**over):
    base = {
        "steps": 3,
        "env": {"name": "calc"},
        "rollout": {"tasks_per_step": 2, "group_size": 3, "max_turns": 3},
        "model": {"warmstart_steps": 2},
    }
    base.update(over)
    return TrainConfig.model_validate(base)


def _metrics(sink: ListSink) -> list[tuple[int, dict]]:
    return [
        (e["step"], {k: v for k, v in e["metrics"].items() if not k.startswith(SKIP)})
        for e in sink.of_type("step")
    ]


def _same(a, b) -> bool:
    if len(a) != len(b):
        return False
    for (sa, ma), (sb, mb) in zip(a, b, strict=True):
        if sa != sb or ma.keys() != mb.keys():
            return False
        for k in ma:
            if not (ma[k] == mb[k] or (math.isnan(ma[k]) and math.isnan(mb[k]))):
                return False
    return True


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_it_trains_every_preset_and_emits_the_events(preset, reward_fn):
    cfg = _config(algorithm={"preset": preset})
    sink = ListSink()
    result = train(cfg, make_env("calc", seed=0), reward_fn, sink)
    assert result.status == "succeeded" and result.last_step == 3
    kinds = [e["type"] for e in sink.events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    steps = [e for e in sink.of_type("step") if e["step"] > 0]
    assert [e["step"] for e in steps] == [1, 2, 3]
    if preset != "dapo":  # DAPO may drop every group of a step: then nothing updates
        assert "grad_norm" in steps[0]["metrics"]
    for key in (
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "entropy",
        "completions/mean_length",
        "num_turns",
        "timing_s/gen",
        "perf/tokens_per_s",
        "rewards/outcome/mean",
        "groups_dropped",
    ):
        assert key in steps[0]["metrics"], key
    assert steps[0]["metrics"]["timing_s/records"] >= 0.0  # a sink listened
    trajs = sink.of_type("trajectory")
    assert len(trajs) >= 3 * 2 * 3


def test_it_masks_everything_but_the_policys_own_actions(reward_fn):
    sink = ListSink()
    train(_config(steps=1), make_env("calc", seed=0), reward_fn, sink)
    for traj in sink.of_type("trajectory"):
        prompt, action = traj["segments"][:2]
        # The learner scores from the first action token on: the prompt's model
        # numbers do not exist (None, not NaN); its advantages are 0, except the
        # first token's, which nothing predicts.
        for name in ("logprob", "old_logprob", "ratio", "entropy"):
            assert prompt[name] == [None] * len(prompt["token_ids"])
            assert all(isinstance(v, float) for v in action[name])
        assert prompt["advantage"][0] is None
        assert set(prompt["advantage"][1:]) <= {0.0}
        kinds = {seg["kind"]: seg["mask"] for seg in traj["segments"]}
        assert kinds["prompt"] == "prompt"
        assert kinds["action"] is None
        if "tool" in kinds:
            assert kinds["tool"] == "tool"
        for seg in traj["segments"]:
            n = len(seg["token_ids"])
            assert all(
                len(seg[k]) == n
                for k in (
                    "tokens",
                    "logprob",
                    "old_logprob",
                    "ratio",
                    "entropy",
                    "advantage",
                )
            )
            if seg["mask"] is not None and not traj["dropped"]:
                assert all(a is None or a == 0.0 for a in seg["advantage"])


@pytest.mark.parametrize("preset", ["ppo", "grpo"])
def test_it_resumes_bit_for_bit_like_an_uninterrupted_run(tmp_path, reward_fn, preset):
    cfg = _config(
        steps=4, checkpoint={"every": 2}, algorithm={"preset": preset, "kl_beta": 0.1}
    )
    whole = ListSink()
    train(cfg, make_env("calc", seed=0), reward_fn, whole)
    first, second = ListSink(), ListSink()
    stopped = train(
        cfg,
        make_env("calc", seed=0),
        reward_fn,
        first,
        checkpoint_dir=tmp_path,
        should_stop=lambda: len(first.of_type("step")) >= 2,
    )
    assert (stopped.status, stopped.last_step) == ("cancelled", 2)
    resumed = train(
        cfg, make_env("calc", seed=0), reward_fn, second, checkpoint_dir=tmp_path
    )
    assert resumed.status == "succeeded"
    assert second.of_type("run_started")[0]["start_step"] == 3
    assert _same(_metrics(whole), _metrics(first) + _metrics(second))


def test_it_stops_before_the_next_step_when_cancelled(reward_fn):
    sink = ListSink()
    result = train(
        _config(steps=10),
        make_env("calc", seed=0),
        reward_fn,
        sink,
        should_stop=lambda: len(sink.of_type("step")) >= 2,
    )
    assert result.status == "cancelled" and result.last_step == 2
    assert sink.events[-1] == {
        "type": "run_finished",
        "status": "cancelled",
        "step": 2,
        "error": None,
    }


def test_a_cancel_during_the_warm_start_stops_it_at_its_next_step(reward_fn):
    asked = []

    def should_stop():  # asked before every warm-start step; yes on the third ask
        asked.append(1)
        return len(asked) >= 3

    sink = ListSink()
    result = train(
        _config(steps=10, model={"warmstart_steps": 500}),
        make_env("calc", seed=0),
        reward_fn,
        sink,
        should_stop=should_stop,
    )
    assert len(asked) == 3  # two warm-start steps, not 500
    assert result.status == "cancelled" and result.last_step == 0
    assert sink.of_type("step") == []
    assert sink.events[-1] == {
        "type": "run_finished",
        "status": "cancelled",
        "step": 0,
        "error": None,
    }


def test_it_drops_zero_variance_groups_and_resamples(reward_fn):
    def flat(episodes, step):  # every rollout scores the same: every group is dropped
        from rewards.types import RewardBreakdown, RewardResult

        n = [max(1, len(e.steps)) for e in episodes]
        outcome = [tuple([0.0] * (k - 1) + [1.0]) for k in n]
        return [
            RewardResult(RewardBreakdown(1.0, {"outcome": 1.0}, {"outcome": per}))
            for per in outcome
        ]

    sink = ListSink()
    cfg = _config(steps=1, algorithm={"preset": "dapo", "max_resample_rounds": 2})
    train(cfg, make_env("calc", seed=0), flat, sink)
    metrics = sink.of_type("step")[-1]["metrics"]
    # 2 tasks per round, 3 rounds (1 + 2 resamples), every group dropped.
    assert metrics["groups_dropped"] == 6
    trajs = sink.of_type("trajectory")
    assert len(trajs) == 6 * 3 and all(t["dropped"] for t in trajs)
    # Never scored by the learner: no per-token values at all.
    assert all(
        v is None
        for t in trajs
        for seg in t["segments"]
        for name in ("logprob", "ratio", "advantage")
        for v in seg[name]
    )
    assert "policy_loss" not in metrics  # nothing left to train on


def test_it_fails_loudly_and_reports_the_failure(reward_fn):
    def broken(episodes, step):
        raise RuntimeError("judge exploded")

    sink = ListSink()
    with pytest.raises(RuntimeError):
        train(_config(steps=2), make_env("calc", seed=0), broken, sink)
    last = sink.events[-1]
    assert last["type"] == "run_finished" and last["status"] == "failed"
    assert "judge exploded" in last["error"]


@pytest.mark.parametrize("credit", ["process", "gae"])
def test_it_trains_with_process_and_gae_credit(credit, reward_fn):
    algo = (
        {"preset": "ppo"}
        if credit == "gae"
        else {"preset": "grpo", "credit": "process"}
    )
    sink = ListSink()
    result = train(
        _config(steps=2, algorithm=algo), make_env("calc", seed=0), reward_fn, sink
    )
    assert result.status == "succeeded"
    if credit == "gae":
        assert "value_loss" in sink.of_type("step")[-1]["metrics"]


@pytest.mark.parametrize(
    ("preset", "optim"),
    [("grpo", {}), ("dr_grpo", {}), ("grpo", {"epochs": 2}), ("ppo", {})],
)
def test_the_first_update_sees_the_sampling_policy(preset, optim, reward_fn):
    """Old log-probs are the sampling policy's: on the first forward of a step the
    ratio is exactly 1 (PPO's r = pi/pi_old), whichever path computed them."""
    cfg = _config(steps=1, algorithm={"preset": preset}, optim=optim)
    sink = ListSink()
    train(cfg, make_env("calc", seed=0), reward_fn, sink)
    m = sink.of_type("step")[-1]["metrics"]
    for traj in sink.of_type("trajectory"):
        for seg in traj["segments"][1:]:
            for lp, old in zip(seg["logprob"], seg["old_logprob"], strict=True):
                assert not math.isnan(old) and old < 0
                if not optim:  # one epoch: the last forward is the first one
                    assert lp == old
    if not optim:
        assert m["ratio/mean"] == 1.0 and m["clip_ratio/region_mean"] == 0.0


def test_the_sampler_logprobs_match_the_learner_on_todays_sampler(reward_fn):
    # One process samples and learns with the same weights: the ratio is 1 up to
    # float rounding, and the metric says so every step (with the correction on).
    cfg = _config(algorithm={"rollout_correction": {"kind": "token", "cap": 2.0}})
    sink = ListSink()
    train(cfg, make_env("calc", seed=0), reward_fn, sink)
    for _, m in _metrics(sink):
        assert m["rollout/logprob_diff"] < 1e-4
        assert abs(m["rollout/ratio_mean"] - 1.0) < 1e-4
        assert m["rollout_correction/capped_frac"] == 0.0


def test_kl_in_the_reward_adapts_its_coefficient(reward_fn):
    cfg = _config(
        algorithm={
            "kl_beta": 0.1,
            "kl_kind": "k1",
            "kl_in_reward": True,
            "kl_target": 1.0,
            "kl_horizon": 1,
        },
    )
    sink = ListSink()
    train(cfg, make_env("calc", seed=0), reward_fn, sink)
    coefs = [m["kl/coef"] for s, m in _metrics(sink) if s > 0 and "kl/coef" in m]
    # KL far below its target: the coefficient shrinks by 20% a step (horizon 1).
    assert coefs and coefs[0] == pytest.approx(0.1)
    assert all(
        b == pytest.approx(a * 0.8) for a, b in zip(coefs, coefs[1:], strict=False)
    )
