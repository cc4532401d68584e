"""Evaluation on held-out tasks: pass@k and mean reward, every ``eval.every`` steps,
on tasks of their own that leave training's random streams alone."""

from __future__ import annotations

import json
import random

import pytest

import trainer.evaluate as ev
from rewards.synthetic import episode
from trainer.config import TrainConfig
from trainer.envs.base import Task, make_env
from trainer.events import ListSink
from trainer.loop import train
from trainer.rollout import Rollout

SKIP = ("timing_s/", "perf/", "eval/")


def _config(**over):
    base = {
        "steps": 3,
        "env": {"name": "calc"},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
        "model": {"warmstart_steps": 1},
    }
    base.update(over)
    return TrainConfig.model_validate(base)


def test_pass_at_k_counts_a_task_once_any_of_its_k_samples_succeeds(
    monkeypatch, reward_fn
):
    # 2 tasks x 3 samples: task 0 succeeds once, task 1 never.
    wins = [False, True, False, False, False, False]

    def fake_play(policy, env, tasks, cfg, *, generator):
        assert cfg.group_size == 3 and cfg.temperature == 0.0  # greedy
        return [
            Rollout(
                Task(t.id, ""),
                g,
                i,
                episode=episode("calc", [{}], success=wins[g * 3 + i]),
            )
            for g, t in enumerate(tasks)
            for i in range(3)
        ]

    monkeypatch.setattr(ev, "play", fake_play)
    cfg = _config(eval={"every": 1, "tasks": 2, "samples": 3, "greedy": True})
    out = ev.evaluate(None, make_env("calc"), reward_fn, cfg, step=1)
    # pass@3 = 1 of 2 tasks; success = 1 of 6 rollouts; reward: 1.0 once, plus the
    # format bonus 0.1 on each of the 6 one-step episodes (every step is ok).
    assert out["eval/pass@k"] == 0.5
    assert out["eval/success"] == pytest.approx(1 / 6)
    assert out["eval/reward"] == pytest.approx((1.0 + 6 * 0.1) / 6)
    assert out["eval/k"] == 3.0


def test_it_evaluates_every_n_steps_and_after_the_last_without_touching_training(
    reward_fn,
):
    plain, evald = ListSink(), ListSink()
    train(_config(), make_env("calc", seed=0), reward_fn, plain)
    cfg = _config(eval={"every": 2, "tasks": 3, "samples": 2, "greedy": True})
    train(cfg, make_env("calc", seed=0), reward_fn, evald)
    steps = {e["step"]: e["metrics"] for e in evald.of_type("step")}
    assert [s for s in sorted(steps) if "eval/pass@k" in steps[s]] == [2, 3]
    for s in (2, 3):
        m = steps[s]
        assert 0.0 <= m["eval/pass@k"] <= 1.0 and m["eval/k"] == 2.0
        # Greedy: a task's k rollouts are identical, so pass@k equals the success rate.
        assert m["eval/pass@k"] == m["eval/success"]
    # Training's own numbers are the same as without evaluation (separate streams).
    strip = lambda sink: [  # noqa: E731
        {k: v for k, v in e["metrics"].items() if not k.startswith(SKIP)}
        for e in sink.of_type("step")
    ]
    assert json.dumps(strip(plain)) == json.dumps(strip(evald))


def test_generated_envs_draw_the_same_held_out_tasks_each_time():
    env = make_env("calc")
    a = env.held_out_tasks(5, random.Random(7))
    b = env.held_out_tasks(5, random.Random(7))
    assert [t.prompt for t in a] == [t.prompt for t in b]


def test_the_dataset_env_evaluates_on_its_held_out_split(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [
        {"id": f"r{i}", "prompt": f"what is {i}", "answer": str(i)} for i in range(20)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    env = make_env("dataset", {"path": str(path), "holdout": 0.25}, seed=1)
    test_ids = {env.rows[i].id for i in env.splits["test"]}
    assert len(test_ids) == 5
    held = env.held_out_tasks(30, random.Random(0))
    assert {t.id for t in held} <= test_ids
    trained = env.sample_tasks(30, random.Random(0))
    assert not {t.id for t in trained} & test_ids


def test_eval_config_is_bounded_and_named():
    with pytest.raises(ValueError, match="eval.samples"):
        TrainConfig.model_validate({"eval": {"samples": 0}})
