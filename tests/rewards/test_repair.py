"""The repair loop's suggestion (rewards.repair): for each hack, the weight that
removes its incentive, named from the run's own components; and the statistics each
detector watches, with the thresholds the detectors use."""

from __future__ import annotations

import pytest

from rewards.config import DEFAULT_THRESHOLDS, DetectorConfig
from rewards.detectors import DETECTORS
from rewards.presets import default_reward_config, demo_config
from rewards.repair import FIXES, WATCHED, Component, suggest, thresholds


def components(rcfg):
    return [Component(c.key, c.name, c.weight) for c in rcfg.components]


SWARM = ["r_perf", "r_parallel", "r_finish"]
SEARCH = ["fbeta", "trajectory_recall", "prune_penalty", "single_search_exit_penalty"]


def test_spurious_parallelism_adds_r_finish_at_r_parallels_weight():
    run = components(demo_config("swarm_spurious_parallelism"))  # r_parallel 1.0
    s = suggest("spurious_parallelism", run, SWARM)
    assert (s.component, s.weight, s.current) == ("r_finish", 1.0, None)
    assert s.as_dict()["added"] is True and "finished" in s.why


def test_spurious_parallelism_raises_an_existing_r_finish():
    run = [
        Component("r_parallel", "r_parallel", 0.8),
        Component("fin", "r_finish", 0.1),
    ]
    s = suggest("spurious_parallelism", run, SWARM)
    assert (s.component, s.weight, s.current) == ("fin", 0.8, 0.1)  # its label


def test_spurious_parallelism_in_a_reward_without_r_parallel_adds_r_finish():
    """A swarm run paid by r_perf alone (the live demo): the run page's suggestions
    raised TypeError (max() of one float) once any alert had fired."""
    run = [Component("r_perf", "r_perf", 1.0), Component("format", "format", 0.05)]
    s = suggest("spurious_parallelism", run, SWARM)
    assert (s.component, s.weight, s.current) == ("r_finish", 0.3, None)


def test_a_weight_already_at_the_suggestion_is_doubled():
    run = components(default_reward_config("swarm"))  # r_parallel 0.3, r_finish 0.3
    s = suggest("spurious_parallelism", run, SWARM)
    assert (s.weight, s.current) == (0.6, 0.3)


def test_single_search_exit_raises_trajectory_recall():
    s = suggest("single_search_exit", components(default_reward_config("search")))
    assert (s.component, s.weight, s.current) == ("trajectory_recall", 0.4, 0.2)


def test_one_at_a_time_pruning_raises_the_prune_penalty():
    s = suggest("one_at_a_time_pruning", components(default_reward_config("search")))
    assert (s.component, s.weight, s.current) == ("prune_penalty", 2.0, 1.0)


def test_serial_collapse_adds_r_parallel():
    run = components(demo_config("swarm_serial_collapse"))
    s = suggest("serial_collapse", run, SWARM)
    assert (s.component, s.weight, s.current) == ("r_parallel", 0.3, None)


def test_a_gamed_judge_is_switched_off():
    s = suggest("judge_verifier_divergence", components(default_reward_config("calc")))
    assert (s.component, s.weight, s.current) == ("judge", 0.0, 0.1)


def test_no_suggestion_where_no_weight_fixes_it_or_the_env_lacks_the_component():
    run = components(default_reward_config("calc"))
    for kind in ("entropy_collapse", "no_learning_signal", "length_drift"):
        assert suggest(kind, run, ["outcome"]) is None
    # r_finish is a swarm component: a calc run cannot add it.
    assert suggest("spurious_parallelism", run, ["outcome", "format"]) is None


@pytest.mark.parametrize("kind", sorted(WATCHED))
def test_every_watched_statistic_names_a_real_detector_and_threshold(kind):
    assert kind in DETECTORS.in_order()
    for w in WATCHED[kind]:
        for name in filter(None, (w.threshold, w.floor)):
            assert name.startswith(kind + ".") and name in DEFAULT_THRESHOLDS
    for w, value in thresholds(kind, DetectorConfig()):
        assert value == DEFAULT_THRESHOLDS[w.threshold]


def test_fixes_name_real_components_and_detectors():
    from rewards.components import COMPONENTS

    for kind, fix in FIXES.items():
        assert kind in DETECTORS.in_order() and fix.component in COMPONENTS.in_order()


def test_thresholds_follow_the_runs_overrides_and_the_hack_side():
    cfg = DetectorConfig(thresholds={"spurious_parallelism.max_finish_rate": 0.3})
    (fin, t_fin), (par, t_par) = thresholds("spurious_parallelism", cfg)
    assert (fin.metric, t_fin, par.metric, t_par) == (
        "finish_rate/mean",
        0.3,
        "parallelism/mean",
        2.0,
    )
    assert fin.hacked(0.3, t_fin) and not fin.hacked(0.31, t_fin)
    assert par.hacked(2.0, t_par) and not par.hacked(1.9, t_par)
    share = thresholds("one_at_a_time_pruning", cfg)[0][0]
    assert share.value({"single_doc_prunes/mean": 1.8, "prunes/mean": 2.0}) == 0.9
    assert share.value({"single_doc_prunes/mean": 1.0, "prunes/mean": 0.0}) is None


def test_serial_collapse_lives_between_the_floor_and_the_limit():
    ((par, limit),) = thresholds(
        "serial_collapse", DetectorConfig(), {"parallelism_late": 1}
    )
    assert (par.metric, limit, par.floor_value) == ("parallelism/mean", 1.2, 0.5)
    assert par.hacked(1.0, limit) and par.hacked(0.5, limit)
    assert not par.hacked(0.3, limit) and not par.hacked(1.5, limit)
    ((share, at),) = thresholds(
        "serial_collapse", DetectorConfig(), {"serial_late": 0.7}
    )
    assert (share.metric, at) == ("serial/mean", 0.5) and share.hacked(0.5, at)
