"""POST /api/runs/{id}/whatif: own weights change nothing on every preset; a weight set
to 0 flips what an independent recomputation from the stored rewards says it flips,
telling an advantage that goes to or leaves exactly 0 apart from one that reverses;
the examples say how many there were of each kind, and more can be asked for."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pytest

from rewards.schedule import weight_at
from trainer.algorithms import PRESETS

pytestmark = pytest.mark.django_db

G = 4
# r_parallel pays much more than the rest, so that setting it to 0 changes things.
CHOICES = {"r_parallel": (0.0, 1.0, 2.0)}


def launch(owner, preset: str, env: str = "swarm", credit: str | None = None):
    from dashboard.runs import services

    algo = {"preset": preset} | ({"credit": credit} if credit else {})
    return services.launch_run(
        owner,
        {
            "name": f"whatif-{preset}",
            "env": {"name": env},
            "algorithm": algo,
            "model": {"size": "tiny", "device": "cpu"},
            "rollout": {"tasks_per_step": 3, "group_size": G, "max_turns": 2},
        },
    )


def make_run(owner, preset: str, env: str = "swarm", credit: str | None = None):
    from dashboard.ingest import writer
    from dashboard.reads.whatif import run_setup

    run = launch(owner, preset, env, credit)
    _, resolved, rcfg, _ = run_setup(run)
    rng = random.Random(preset + env + str(credit))
    batch = writer.Batch()
    for step in range(1, 5):
        for group in range(3):
            raws = [
                {
                    c.key: [rng.choice(CHOICES.get(c.key, (0.0, 0.25))) for _ in "ab"]
                    for c in rcfg.components
                }
                for _ in range(G)
            ]
            if group == 2:  # every rollout the same: a zero-variance group
                raws = [raws[0]] * G
            for index, raw in enumerate(raws):
                per_step = {
                    c.key: [
                        weight_at(c.weight, c.schedule, step) * v for v in raw[c.key]
                    ]
                    for c in rcfg.components
                }
                comps = {k: sum(v) for k, v in per_step.items()}
                batch.add(
                    run.id,
                    {
                        "type": "trajectory",
                        "step": step,
                        "group": group,
                        "index": index,
                        "task_id": f"task-{step}-{group}",
                        "dropped": group == 2
                        and resolved.group_filter == "drop_zero_variance",
                        "reward": sum(comps.values()),
                        "advantage": 0.0,
                        "rewards": {
                            "total": sum(comps.values()),
                            "components": comps,
                            "per_step": per_step,
                        },
                        "num_turns": 2,
                        "length": 3 + index,
                        "facts": {"action_tokens": [1 + index, 2]},
                        "segments": [],
                    },
                )
    writer.write(run.id, batch)
    return run


def post(client, run, body):
    return client.post(
        f"/api/runs/{run.pk}/whatif",
        data=json.dumps(body),
        content_type="application/json",
    )


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_runs_own_weights_change_nothing(owner, owner_client, enqueued, preset):
    run = make_run(owner, preset)
    own = {c["key"]: c["weight"] for c in _components(run)}
    for weights in ({}, own):
        r = post(owner_client, run, {"weights": weights, "steps": None})
        assert r.status_code == 200, r.content
        t = r.json()["total"]
        assert t["groups"] == 12 and r.json()["rollouts"] == 48
        assert t["best_changes"] == 0 and t["rank_changes"] == 0
        assert t["signal_lost"] == 0 and t["signal_gained"] == 0
        if preset != "ppo":
            assert t["sign_flips"] == 0 and t["token_flips"] == 0
            assert t["tokens"] > 0
        assert all(not v for v in r.json()["examples"].values())


def _components(run):
    from dashboard.reads.whatif import component_weights

    return component_weights(run)


def _independent(run, drop: str, std: str, dropped_filter: bool):
    """Flips (by kind: reversed, to 0, from 0) and best changes recomputed here, with
    numpy, from the stored rewards."""
    from dashboard.models import Trajectory

    flips: Counter = Counter()
    best = 0
    rows = Trajectory.objects.filter(run=run).order_by("step", "group", "index")
    by_group: dict = {}
    for t in rows:
        by_group.setdefault((t.step, t.group), []).append(t)
    for members in by_group.values():
        old = np.array([t.rewards["total"] for t in members])
        new = old - np.array([t.rewards["components"][drop] for t in members])
        if np.argmax(old) != np.argmax(new):
            best += 1
        if dropped_filter and members[0].dropped:
            continue

        def adv(x):
            if np.ptp(x) <= 1e-6:
                return np.zeros_like(x)
            c = x - x.mean()
            return c / (x.std(ddof=1) + 1e-4) if std == "group" else c

        a_old, a_new = adv(old), adv(new)
        sgn = lambda a: np.where(np.abs(a) <= 1e-6, 0, np.sign(a))  # noqa: E731
        for o, n in zip(sgn(a_old), sgn(a_new), strict=True):
            if o != n:
                flips[
                    "to_zero" if n == 0 else "from_zero" if o == 0 else "reversed"
                ] += 1
    return flips, best


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "dapo"])
def test_a_weight_set_to_zero_flips_what_an_independent_recomputation_flips(
    owner, owner_client, enqueued, preset
):
    run = make_run(owner, preset)
    r = post(owner_client, run, {"weights": {"r_parallel": 0}})
    assert r.status_code == 200, r.content
    body = r.json()
    std = PRESETS[preset].std_scaling
    flips, best = _independent(run, "r_parallel", std, preset == "dapo")
    assert flips.total() > 0 and best > 0  # the data set makes the test able to fail
    assert body["total"]["sign_flips"] == flips.total()
    for kind in ("reversed", "to_zero", "from_zero"):
        assert body["total"][f"sign_{kind}"] == flips[kind], kind
    assert body["total"]["best_changes"] == best
    assert sum(s["sign_flips"] for s in body["steps"]) == flips.total()
    ex = body["examples"]["sign_flip"][0]
    assert ex["url"] == (
        f"/runs/{run.pk}/trajectories/{ex['step']}/{ex['group']}/{ex['index']}/"
    )
    if preset == "dapo":  # dropped groups are untrained: 3 of 4 groups a step count
        assert body["total"]["trajectories"] == 4 * 2 * G
    over = body["clone_overrides"]["reward"]["components"]
    assert {c["name"]: c["weight"] for c in over}["r_parallel"] == 0


def store(run, groups: list[list[dict[str, float]]]) -> None:
    """Step 1 of ``run``: these groups of rollouts, each its stored components (the
    weighted values; the run's other components 0), one agent step each."""
    from dashboard.ingest import writer
    from dashboard.reads.whatif import run_setup

    keys = [c.key for c in run_setup(run)[2].components]
    batch = writer.Batch()
    for group, rollouts in enumerate(groups):
        for index, given in enumerate(rollouts):
            comps = {k: float(given.get(k, 0.0)) for k in keys}
            batch.add(
                run.id,
                {
                    "type": "trajectory", "step": 1, "group": group, "index": index,
                    "task_id": f"task-{group}", "reward": sum(comps.values()),
                    "advantage": 0.0,
                    "rewards": {"total": sum(comps.values()), "components": comps,
                                "per_step": {k: [v] for k, v in comps.items()}},
                    "num_turns": 1, "length": 3, "facts": {"action_tokens": [2]},
                    "segments": [],
                },
            )  # fmt: skip
    writer.write(run.id, batch)


def test_an_advantage_going_to_or_from_zero_is_not_called_a_reversal(
    owner, owner_client, enqueued
):
    """An advantage of exactly 0 pushes the policy neither way: one that goes to 0
    (its push is gone) or leaves 0 (a push appears) is still flagged, counted apart
    from one whose sign reverses, and each example says which it is."""
    run = launch(owner, "grpo")
    store(
        run,
        [
            # Without r_parallel every total is 0.5: every advantage goes to 0.
            [{"r_perf": 0.5, "r_parallel": p} for p in (0.0, 0.2, 0.0, 0.2)],
            # Totals 0, 0.25, 0.5, 0.25: rollouts 1 and 3 sit at the mean (advantage
            # 0); without r_parallel (0, 0.25, 0, 0) they leave 0 and 2 reverses.
            [
                {"r_perf": perf, "r_parallel": par}
                for perf, par in ((0, 0), (0.25, 0), (0, 0.5), (0, 0.25))
            ],
        ],
    )
    body = post(owner_client, run, {"weights": {"r_parallel": 0}, "examples": 10})
    assert body.status_code == 200, body.content
    t = body.json()["total"]
    assert t["sign_flips"] == 7
    assert (t["sign_reversed"], t["sign_to_zero"], t["sign_from_zero"]) == (1, 4, 2)
    flips = body.json()["examples"]["sign_flip"]
    assert body.json()["example_counts"]["sign_flip"] == len(flips) == 7
    assert sorted((ex["group"], ex["index"], ex["flip"]) for ex in flips) == [
        (0, 0, "to_zero"), (0, 1, "to_zero"), (0, 2, "to_zero"), (0, 3, "to_zero"),
        (1, 1, "from_zero"), (1, 2, "reversed"), (1, 3, "from_zero"),
    ]  # fmt: skip
    step = body.json()["steps"][0]  # the step's counts split the same way
    kinds = ("reversed", "to_zero", "from_zero")
    assert [step[f"sign_{k}"] for k in kinds] == [1, 4, 2]


def test_the_examples_say_how_many_there_were_and_more_can_be_asked_for(
    owner, owner_client, enqueued
):
    """The table lists the largest few of each kind: the report says how many there
    were of each, so the page can say what it cut, and lists more when asked."""
    run = make_run(owner, "grpo")
    body = post(owner_client, run, {"weights": {"r_parallel": 0}}).json()
    t, counts = body["total"], body["example_counts"]
    assert counts["sign_flip"] == t["sign_flips"]
    assert counts["best_change"] == t["best_changes"]
    assert counts["rank_change"] == t["rank_changes"]
    assert counts["signal_change"] == t["signal_lost"] + t["signal_gained"]
    assert body["examples_limit"] == 5
    assert max(counts.values()) > 5  # the data set makes the cut happen
    for kind, n in counts.items():
        assert len(body["examples"][kind]) == min(n, 5), kind
    every = post(owner_client, run, {"weights": {"r_parallel": 0}, "examples": 100})
    every = every.json()
    assert every["examples_limit"] == 100 and every["example_counts"] == counts
    for kind, n in counts.items():
        assert len(every["examples"][kind]) == n, kind

    def size(ex):
        return abs(ex["new_advantage"] - ex["old_advantage"])

    # The largest changes first, so the few listed are the largest of all.
    sizes = [size(ex) for ex in every["examples"]["sign_flip"]]
    assert sizes == sorted(sizes, reverse=True)
    assert [size(ex) for ex in body["examples"]["sign_flip"]] == sizes[:5]


def test_process_credit_counts_token_flips_per_step(owner, owner_client, enqueued):
    run = make_run(owner, "grpo", credit="process")
    same = post(owner_client, run, {"weights": {}}).json()["total"]
    assert same["sign_flips"] == 0 and same["token_flips"] == 0
    body = post(owner_client, run, {"weights": {"r_finish": 0, "r_perf": 0}}).json()
    t = body["total"]
    assert body["credit"] == "process"
    assert 0 < t["token_flips"] <= t["tokens"]
    assert t["token_flip_share"] == pytest.approx(t["token_flips"] / t["tokens"])


def test_only_the_asked_steps_are_recomputed(owner, owner_client, enqueued):
    run = make_run(owner, "grpo")
    body = post(owner_client, run, {"weights": {"r_parallel": 0}, "steps": [2, 3]})
    assert [s["step"] for s in body.json()["steps"]] == [2, 3]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"weights": {"nope": 1}}, "weights.nope: unknown component"),
        ({"weights": {"r_parallel": "x"}}, "weights.r_parallel: must be a number"),
        ({"weights": {"r_parallel": 1e9}}, "weights.r_parallel: must be a number"),
        ({"weights": [1]}, "weights: must be an object"),
        ({"steps": "all"}, "steps: must be a list"),
        ({"steps": [1.5]}, "steps: every step must be an integer"),
        ({"wieghts": {}}, "wieghts"),
        ({"examples": 0}, "examples: must be an integer from 1 to 100"),
        ({"examples": 101}, "examples: must be an integer from 1 to 100"),
        ({"examples": "all"}, "examples: must be an integer from 1 to 100"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    owner, owner_client, enqueued, body, field
):
    run = make_run(owner, "grpo")
    r = post(owner_client, run, body)
    assert r.status_code == 400
    assert any(e.startswith(field) for e in r.json()["errors"]), r.json()


def test_another_users_run_is_not_found(owner, other, enqueued):
    from dashtest import client_for

    run = make_run(owner, "grpo")
    assert post(client_for(other), run, {"weights": {}}).status_code == 404


@pytest.mark.parametrize("credit", ["outcome", "process"])
def test_the_recomputation_reproduces_the_trainers_stored_advantages(
    owner, enqueued, credit
):
    """A real (tiny) training run: with its own weights the what-if math gives the
    advantages the trainer stored, so the comparison starts from what was trained."""
    from itertools import groupby

    from dashboard.ingest import writer
    from dashboard.reads.whatif import load_rollouts, run_setup
    from dashboard.runs import services
    from trainer.runner import run_from_config
    from trainer.whatif import reweigh, step_advantages, weighting_from_components

    config = {
        "name": "real",
        "seed": 5,
        "steps": 2,
        "env": {"name": "calc"},
        # DAPO's overlong penalty varies even under a random tiny policy.
        "algorithm": {"preset": "grpo", "credit": credit, "overlong_shaping": True},
        "model": {"size": "tiny", "device": "cpu"},
        "rollout": {"tasks_per_step": 3, "group_size": 3, "max_turns": 2},
    }
    run = services.launch_run(owner, config)
    cfg, algo, rcfg, G = run_setup(run)

    class Sink:
        batch = writer.Batch()

        def emit(self, event):
            self.batch.add(run.id, event)

        def close(self):
            pass

    sink = Sink()
    run_from_config(cfg, sink)
    writer.write(run.id, sink.batch)
    w = weighting_from_components(rcfg.components)
    stored = {(t.step, t.group, t.index): t.advantage for t in run.trajectory_set.all()}
    rows = sorted(load_rollouts(run, None), key=lambda r: (r.step, r.group, r.index))
    checked = 0
    for _, in_step in groupby(rows, key=lambda r: r.step):
        in_step = list(in_step)
        same = dict.fromkeys(w.weights, 1.0)
        scored = [reweigh(r, same, {}, set()) for r in in_step]
        adv = step_advantages(in_step, scored, algo, G)
        for g, zero in enumerate(adv.zero_variance):
            members = in_step[g * G : (g + 1) * G]
            for r, a in zip(members, adv.per_traj[g * G : (g + 1) * G], strict=True):
                want = stored[(r.step, r.group, r.index)]
                assert a == pytest.approx(want, abs=2e-4 if zero else 1e-5)
                checked += not zero
    assert checked > 0
