"""The warm start reports its progress (issue 22, item 6): ``warmstart`` events to the
sink, valid by the event schema, and a line per report from the CLI."""

from __future__ import annotations

import json

from trainer import TrainConfig, run_from_config
from trainer.cli import main
from trainer.envs.base import make_env
from trainer.event_schema import check_event
from trainer.events import ListSink
from trainer.policy import Policy
from trainer.warmstart import PROGRESS_EVERY_S, warmstart

CFG = {
    "steps": 1,
    "env": {"name": "calc"},
    "model": {"warmstart_steps": 3, "warmstart_batch": 2},
    "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
}


def test_the_warm_start_sends_its_progress_before_step_1():
    cfg = TrainConfig.model_validate(CFG)
    sink = ListSink()
    result = run_from_config(cfg, sink)
    assert result.status == "succeeded"
    kinds = [e["type"] for e in sink.events]
    warm = sink.of_type("warmstart")
    # The first step at once, then every PROGRESS_EVERY_S, then the last one.
    assert [(e["done"], e["of"]) for e in warm][0] == (1, 3)
    assert (warm[-1]["done"], warm[-1]["of"]) == (3, 3)
    assert all(e["loss"] > 0 for e in warm)
    assert kinds.index("run_started") < kinds.index("warmstart")
    assert max(i for i, k in enumerate(kinds) if k == "warmstart") < kinds.index("step")
    for e in warm:
        check_event(json.loads(json.dumps(e)))  # what the dashboard accepts


def test_a_long_warm_start_reports_every_few_seconds():
    cfg = TrainConfig.model_validate({**CFG, "model": {"warmstart_steps": 7}})
    env = make_env(cfg.env.name, cfg.env.params, seed=0)
    policy = Policy.build(cfg.model, env.vocabulary(), max_positions=2048)
    now = [0.0]

    def clock() -> float:  # each warm-start step "takes" 2 s
        now[0] += 2.0
        return now[0]

    seen: list[int] = []
    warmstart(policy, env, cfg, None, lambda done, loss: seen.append(done), clock)
    assert PROGRESS_EVERY_S == 5.0
    # 1 at once; then at least 5 s later: 4 (t=8 vs 2), 7 is the last one.
    assert seen == [1, 4, 7]


def test_the_cli_prints_the_warm_starts_progress(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(CFG))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "warm start: 1 of 3 steps" in out and "warm start: 3 of 3 steps" in out
    first_step = next(i for i, ln in enumerate(lines) if ln.startswith("step "))
    assert all(
        i < first_step for i, ln in enumerate(lines) if ln.startswith("warm start")
    )
