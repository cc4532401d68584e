"""``python -m trainer import``: a saved events.jsonl, verl's files, and ``--follow``."""

from __future__ import annotations

import json
import math
import threading

import pytest
from fake_dashboard import wait_until

from trainer.cli import main
from trainer.events import JsonlSink

ADV = 0.5 / (math.sqrt(0.5) + 1e-4)  # GRPO: (1 - 0.5) / (unbiased std of {1, 0} + eps)


def test_it_replays_a_saved_events_jsonl_in_order(dash, tmp_path, capsys):
    events = [{"type": "run_started", "config": {"name": "saved"}, "start_step": 0}]
    events += [
        {"type": "step", "step": s, "metrics": {"reward": 0.1 * s, "kl": math.nan}}
        for s in range(1, 1201)
    ]
    events.append({"type": "run_finished", "status": "succeeded", "step": 1200})
    sink = JsonlSink(tmp_path / "events.jsonl")
    for event in events:
        sink.emit(event)
    sink.close()
    saved = [
        json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()
    ]
    args = ["import", str(tmp_path / "events.jsonl"), "--report-to", dash.url]
    assert main([*args, "--spool", str(tmp_path / "spool")]) == 0
    assert dash.events() == saved and saved[1]["metrics"]["kl"] == "NaN"
    run = dash.only_run()
    assert run["name"] == "saved" and run["framework"] == "import"
    assert run["status"] == "succeeded"
    assert len([p for p, n, s in dash.store.requests if p.endswith("/events")]) >= 2
    assert "1202 events accepted, 0 duplicates" in capsys.readouterr().out


def test_a_missing_events_file_is_a_clear_error(dash, tmp_path, capsys):
    args = ["import", str(tmp_path / "nope.jsonl"), "--report-to", dash.url]
    assert main(args) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err


def test_a_gzipped_events_file_replays_and_a_binary_one_says_what_it_is_not(
    dash, tmp_path, capsys
):
    import gzip

    events = [
        {"type": "run_started", "config": {"name": "zipped"}, "start_step": 0},
        {"type": "step", "step": 1, "metrics": {"reward": 0.5}},
    ]
    text = "".join(json.dumps(e) + "\n" for e in events)
    (tmp_path / "events.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    args = ["import", str(tmp_path / "events.jsonl.gz"), "--report-to", dash.url]
    assert main([*args, "--spool", str(tmp_path / "spool")]) == 0
    assert dash.events() == events
    (tmp_path / "noise.jsonl").write_bytes(b"\x8b\xff\x00 not text")
    args = ["import", str(tmp_path / "noise.jsonl"), "--report-to", dash.url]
    assert main([*args, "--spool", str(tmp_path / "spool2")]) == 2
    assert (
        "noise.jsonl: not UTF-8 JSON lines, nor gzip of them" in capsys.readouterr().err
    )


def verl_record(step, prompt, output, score, acc):
    return {
        "input": prompt,
        "output": output,
        "gts": "42",
        "score": score,
        "step": step,
        "acc": acc,
        "request_id": f"r-{step}-{output}",
    }


def write_step(directory, step, scores):
    """Two prompts x two samples, interleaved as verl's balance_batch may leave them."""
    a1, b1, a2, b2 = scores
    rows = [
        verl_record(step, "What is 6*7?", "42", a1, 1),
        verl_record(step, "What is 2+2?", "4", b1, 1),
        verl_record(step, "What is 6*7?", "41", a2, 0),
        verl_record(step, "What is 2+2?", "four", b2, 0),
    ]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    (directory / f"{step}.jsonl").write_text(text)


def write_metrics(path, steps):
    with path.open("a") as fh:
        for step in steps:
            data = {
                "critic/score/mean": 0.5 * step,
                "actor/entropy": 1.5,
                "actor/pg_clipfrac": 0.1,
                "actor/ppo_kl": 0.002,
                "actor/kl_loss": 0.03,
                "response_length/mean": 12.0,
                "actor/grad_norm": None,  # orjson writes NaN as null
                "training/global_step": step,
            }
            fh.write(json.dumps({"step": step, "data": data}) + "\n")


def test_verl_dumps_and_metrics_import_with_groups_scores_and_metrics(dash, tmp_path):
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    write_step(rollouts, 1, [1.0, 0.5, 0.0, 0.5])
    write_step(rollouts, 2, [1.0, 1.0, 1.0, 0.0])
    write_metrics(tmp_path / "exp.jsonl", [1, 2])
    args = ["import", "--from", "verl", str(rollouts), "--report-to", dash.url]
    assert main([*args, "--metrics", str(tmp_path / "exp.jsonl"), "--name", "v"]) == 0

    events = dash.events()
    run = dash.only_run()
    assert run["name"] == "v" and run["framework"] == "verl"
    assert run["status"] == "succeeded"
    trajs = [e for e in events if e["type"] == "trajectory"]
    assert len(trajs) == 8
    step1 = {(e["group"], e["index"]): e for e in trajs if e["step"] == 1}
    assert [step1[g, i]["segments"][1]["text"] for g in (0, 1) for i in (0, 1)] == [
        "42",
        "41",
        "4",
        "four",
    ]
    assert step1[0, 0]["segments"][0]["text"] == "What is 6*7?"
    assert step1[0, 0]["segments"][0]["mask"] == "prompt"
    assert step1[0, 0]["segments"][1]["mask"] is None
    assert step1[0, 0]["segments"][1]["token_ids"] == []
    assert step1[0, 0]["task_id"] == step1[0, 1]["task_id"] != step1[1, 0]["task_id"]
    assert [step1[0, i]["reward"] for i in (0, 1)] == [1.0, 0.0]
    assert step1[0, 0]["advantage"] == pytest.approx(ADV)
    assert step1[0, 1]["advantage"] == pytest.approx(-ADV)
    assert step1[1, 0]["advantage"] == step1[1, 1]["advantage"] == 0.0
    assert step1[0, 0]["rewards"]["components"] == {"acc": 1.0}
    assert step1[0, 0]["facts"] == {"request_id": "r-1-42", "ground_truth": "42"}

    steps = {e["step"]: e["metrics"] for e in events if e["type"] == "step"}
    assert sorted(steps) == [1, 2]
    m = steps[2]
    assert m["reward"] == m["critic/score/mean"] == 1.0
    assert m["entropy"] == m["actor/entropy"] == 1.5
    assert m["clip_ratio/region_mean"] == 0.1
    assert m["kl"] == m["actor/kl_loss"] == 0.03 and m["actor/ppo_kl"] == 0.002
    assert m["completions/mean_length"] == 12.0
    assert m["grad_norm"] == m["actor/grad_norm"] == "NaN"
    assert m["rewards/acc/mean"] == 0.5
    # Step 2: group A {1, 1} has no spread, group B {1, 0} does (std 0.7071).
    assert m["frac_reward_zero_std"] == 0.5
    assert m["reward_std"] == pytest.approx(math.sqrt(0.5) / 2)
    assert events[-1] == {
        "type": "run_finished",
        "status": "succeeded",
        "step": 2,
        "error": None,
    }


def test_follow_picks_up_a_step_file_written_after_it_started(dash, tmp_path):
    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    write_step(rollouts, 1, [1.0, 0.5, 0.0, 0.5])
    args = ["import", "--from", "verl", str(rollouts), "--report-to", dash.url]
    args += ["--follow", "--poll-s", "0.05", "--idle-exit", "4"]
    codes = []
    worker = threading.Thread(target=lambda: codes.append(main(args)))
    worker.start()

    def trajectories(step):
        if not dash.store.runs:
            return []
        return [
            e
            for e in dash.events()
            if e.get("step") == step and e["type"] == "trajectory"
        ]

    wait_until(lambda: len(trajectories(1)) == 4, "step 1")
    write_step(rollouts, 2, [1.0, 1.0, 1.0, 0.0])
    wait_until(lambda: len(trajectories(2)) == 4, "step 2, written after the start")
    worker.join(timeout=120)
    assert codes == [0]
    assert dash.only_run()["status"] == "succeeded"


def test_a_spool_kept_after_a_refused_token_imports_later_in_order(dash, tmp_path):
    from trainer.httpsink import HttpSink

    refused = HttpSink(dash.url, "revoked", spool_dir=tmp_path / "kept")
    events = [
        {"type": "step", "step": s, "metrics": {"reward": 1.0}} for s in (1, 2, 3)
    ]
    for event in events:
        refused.emit(event)
    refused.close(timeout=30)
    assert refused.error is not None and dash.store.runs == {}
    args = ["import", str(tmp_path / "kept"), "--report-to", dash.url, "--name", "k"]
    assert main([*args, "--spool", str(tmp_path / "spool")]) == 0
    assert dash.events() == events and dash.only_run()["name"] == "k"
