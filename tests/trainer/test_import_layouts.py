"""``python -m trainer import --from trl|tensorboard|prime-rl|miles|tinker DIR``:
each trainer's files, in the shapes its own code writes (tests/fixtures/layouts.py),
imported with groups, rewards, per-token arrays and metrics."""

from __future__ import annotations

import json
import math
import re

import pytest

from tests.fixtures import layouts
from trainer.cli import main
from trainer.event_schema import check_event


def run_import(dash, source, path, *extra):
    args = ["import", "--from", source, str(path), "--report-to", dash.url, *extra]
    return main(args)


def steps_of(events):
    """Every step event's metrics, merged per step (the server keys points by
    (step, name), so a step may arrive in several events)."""
    out: dict[int, dict] = {}
    for e in events:
        if e["type"] == "step":
            out.setdefault(e["step"], {}).update(e["metrics"])
    return out


def trajectories(events):
    return {
        (e["step"], e["group"], e["index"]): e
        for e in events
        if e["type"] == "trajectory"
    }


# -- TensorBoard -----------------------------------------------------------------


def test_tensorboard_scalars_import_per_step_in_both_encodings(dash, tmp_path):
    run = tmp_path / "runs" / "Jan01_host"
    layouts.write_tfevents(
        run / "events.out.tfevents.1.host",
        [
            layouts.text_event(0, "args", "{}"),
            layouts.scalar_event(1, {"loss": 0.5, "lr": 0.25}),
            layouts.scalar_event(2, {"loss": 0.25}, tensor=True),
            layouts.scalar_event(2, {"lr": 0.125}),
        ],
    )
    assert run_import(dash, "tensorboard", tmp_path, "--name", "tb") == 0
    steps = steps_of(dash.events())
    assert steps == {1: {"loss": 0.5, "lr": 0.25}, 2: {"loss": 0.25, "lr": 0.125}}
    assert dash.only_run()["framework"] == "tensorboard"
    assert dash.only_run()["status"] == "succeeded"


def test_a_record_cut_short_waits_and_a_bad_crc_names_the_file(dash, tmp_path):
    from trainer.importers.tensorboard import TensorBoardReader

    path = tmp_path / "events.out.tfevents.2.host"
    whole = layouts.tfrecord(layouts.scalar_event(3, {"x": 1.0}))
    path.write_bytes(whole[:-3])  # the writer is mid-record
    reader = TensorBoardReader(tmp_path)
    assert reader.poll() == []
    path.write_bytes(whole)
    assert reader.poll() == [{"type": "step", "step": 3, "metrics": {"x": 1.0}}]
    corrupt = bytearray(whole)
    corrupt[-1] ^= 0xFF
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "events.out.tfevents.3.host").write_bytes(bytes(corrupt))
    code = run_import(dash, "tensorboard", tmp_path / "bad")
    assert code == 2


def test_a_bad_crc_is_reported_with_the_file_and_offset(tmp_path, capsys, dash):
    whole = bytearray(layouts.tfrecord(layouts.scalar_event(3, {"x": 1.0})))
    whole[-1] ^= 0xFF
    (tmp_path / "events.out.tfevents.3.host").write_bytes(bytes(whole))
    assert run_import(dash, "tensorboard", tmp_path) == 2
    err = capsys.readouterr().err
    assert "events.out.tfevents.3.host: byte 0: bad record data CRC" in err


# -- TRL ---------------------------------------------------------------------------


def test_trl_completions_parquet_and_tensorboard_import_together(dash, tmp_path):
    import json

    args = {"num_generations": 2, "reward_weights": [1.0, 0.5]}
    layouts.write_tfevents(
        tmp_path / "runs" / "x" / "events.out.tfevents.1.h",
        [
            layouts.text_event(0, "args", json.dumps(args)),
            layouts.scalar_event(1, {"train/reward": 0.75, "train/kl": 0.0}),
            layouts.scalar_event(
                1, {"train/sampling/importance_sampling_ratio/mean": 0.98}
            ),
        ],
    )
    layouts.write_trl_completions(
        tmp_path,
        1,
        {
            "prompt": ["Q1", "Q1", "Q2", "Q2"],
            "completion": ["a", "b", "c", "d"],
            "says_answer": [1.0, 0.0, 1.0, float("nan")],
            "is_short": [1.0, 1.0, 0.0, 0.0],
            "advantage": [0.7, -0.7, 0.0, 0.0],
        },
    )
    assert run_import(dash, "trl", tmp_path, "--name", "t") == 0
    events = dash.events()
    run = dash.only_run()
    assert run["framework"] == "trl" and run["config"]["num_generations"] == 2
    trajs = trajectories(events)
    assert sorted(trajs) == [(1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    first = trajs[1, 0, 0]
    assert first["segments"][0]["text"] == "Q1"
    assert first["segments"][1]["text"] == "a"
    assert first["rewards"]["components"] == {"says_answer": 1.0, "is_short": 1.0}
    assert first["reward"] == 1.0 + 0.5 * 1.0  # weighted by reward_weights
    # the components stay the scores; what each weighs goes beside them
    assert first["rewards"]["weights"] == {"says_answer": 1.0, "is_short": 0.5}
    assert trajs[1, 1, 1]["reward"] == 0.0  # NaN (unscored) skipped, 0.5 * 0
    assert trajs[1, 0, 1]["advantage"] == -0.7
    m = steps_of(events)[1]
    assert m["reward"] == 0.75 and "train/reward" not in m
    assert m["mismatch/is_ratio_mean"] == pytest.approx(0.98)


def test_trls_log_extra_columns_are_facts_not_rewards(dash, tmp_path):
    # TRL writes the reward functions' columns, then log_extra's (numbers too): the
    # rewards are those TensorBoard logs as rewards/<name>/mean.
    layouts.write_tfevents(
        tmp_path / "runs" / "x" / "events.out.tfevents.1.h",
        [layouts.scalar_event(1, {"train/rewards/says_answer/mean": 0.5})],
    )
    layouts.write_trl_completions(
        tmp_path,
        1,
        {
            "prompt": ["Q1", "Q1"],
            "completion": ["a", "b"],
            "says_answer": [1.0, 0.0],
            "n_tool_calls": [3.0, 7.0],  # a log_extra column
            "advantage": [0.5, -0.5],
        },
    )
    assert run_import(dash, "trl", tmp_path, "--name", "t") == 0
    first = trajectories(dash.events())[1, 0, 0]
    assert first["rewards"]["components"] == {"says_answer": 1.0}
    assert first["reward"] == 1.0 and first["facts"]["n_tool_calls"] == 3.0


def test_without_metrics_the_reward_weights_say_how_many_columns_are_rewards():
    from trainer.importers.completions import reward_columns

    row = {"step": 1, "prompt": "q", "completion": "a", "r1": 1.0, "r2": 0.0}
    row |= {"extra": 5.0, "advantage": 0.0}
    columns = list(row)
    assert reward_columns(columns, [row], weights=[1.0, 1.0]) == ["r1", "r2"]
    assert reward_columns(columns, [row]) == ["r1", "r2", "extra"]  # nothing says
    logged = reward_columns(columns, [row], weights=[1.0, 1.0], logged=["r2"])
    assert logged == ["r2"]  # what the run logged as rewards/<name>/mean wins


def test_a_completions_file_without_prompts_is_a_clear_error(dash, tmp_path, capsys):
    (tmp_path / "completions").mkdir()
    layouts.write_parquet(
        tmp_path / "completions" / "completions_00001.parquet",
        {"step": [1], "text": ["x"]},
    )
    assert run_import(dash, "trl", tmp_path) == 2
    assert "step 1: rows need prompt and completion columns" in capsys.readouterr().err


# -- prime-rl ----------------------------------------------------------------------


def test_prime_rl_episodes_token_exports_and_both_writers_metrics(dash, tmp_path):
    layouts.prime_run(tmp_path)
    layouts.prime_metrics(
        tmp_path,
        [  # the trainer's and the orchestrator's lines, interleaved
            {"step": 1, "entropy/all/mean": 0.7, "mismatch_kl/all/mean": 0.01},
            {"step": 1, "off_policy/mean": 1.5, "off_policy/max": 3.0},
            {"step": 1, "optim/grad_norm": 2.0},
            {"step": 1, "train/agg/effective/agent/reward/mean": 0.5},
        ],
    )
    assert run_import(dash, "prime-rl", tmp_path, "--name", "p") == 0
    events = dash.events()
    trajs = trajectories(events)
    assert sorted(trajs) == [(1, 0, 0), (1, 0, 1), (1, 1, 0)]  # grouped by group.id
    won = trajs[1, 0, 0]
    assert won["reward"] == 1.0 and won["rewards"]["components"] == {"correct": 1.0}
    assert won["advantage"] == 0.5 and won["task_id"] == "task-g0"
    prompt, action = won["segments"]
    assert prompt["kind"] == "prompt" and prompt["mask"] == "prompt"
    assert prompt["text"] == "What is 6*7?" and prompt["token_ids"] == [1, 2, 3]
    assert action["kind"] == "action" and action["mask"] is None
    assert action["token_ids"] == [4, 5] and action["text"] == "42"
    assert action["old_logprob"] == [-0.5, -0.5]  # the sampler's
    assert action["logprob"] == [-0.25, -0.75]  # the trainer's, from the export
    assert action["ratio"] == [1.25, 0.75]
    assert action["entropy"] == [1.5, 0.5]
    assert action["advantage"] == [0.5, 0.5]
    # The export's arrays that have no column of ours, by prime-rl's names (flags
    # as 1/0; the weight streams it left None are not kept).
    assert action["series"] == {
        "mismatch_kl": [0.03, 0.02],
        "log_importance_ratio": [0.25, -0.25],
        "prob_delta": [0.1, -0.2],
        "is_masked": [0.0, 1.0],
        "is_masked_high": [0.0, 1.0],
        "is_masked_low": [0.0, 0.0],
    }
    assert action["masked"] == [[1, "trust_region"]]  # DPPO left it out
    assert "mismatch_kl" not in prompt["series"]  # None on the prompt's tokens
    for event in events:
        check_event(event)  # as the server checks what it is sent
    assert won["metrics"] == {"off_policy/staleness": 0.0}  # (1 - 1) - 0
    unexported = trajs[1, 1, 0]["segments"][1]
    assert unexported["logprob"] == [] and unexported["old_logprob"] == [-0.5, -0.5]
    assert trajs[1, 1, 0]["advantage"] == -1.0
    m = steps_of(events)[1]
    assert m["entropy"] == 0.7 and m["mismatch/kl"] == 0.01
    assert m["off_policy/staleness"] == 1.5 and m["off_policy/staleness_max"] == 3.0
    assert m["grad_norm"] == m["optim/grad_norm"] == 2.0
    assert m["reward"] == 0.5 and "time" not in m


def test_the_same_sample_at_two_steps_keeps_each_steps_trainer_arrays(dash, tmp_path):
    # An epoch later the same prompt and answer come back: its token export of step 2
    # must not replace step 1's (they are matched by step, then by token ids).
    layouts.prime_run(tmp_path, step=1)
    layouts.prime_run(tmp_path, step=2)
    export = tmp_path / "token_exports" / "step_2" / "rank_0.jsonl"
    record = json.loads(export.read_text())
    record["trainer_logprobs"] = [None] * 3 + [-9.0, -9.0]
    export.write_text(json.dumps(record) + "\n")
    assert run_import(dash, "prime-rl", tmp_path, "--name", "p") == 0
    trajs = trajectories(dash.events())
    assert trajs[1, 0, 0]["segments"][1]["logprob"] == [-0.25, -0.75]
    assert trajs[2, 0, 0]["segments"][1]["logprob"] == [-9.0, -9.0]


def test_a_branched_prime_rl_trace_is_one_trajectory_read_branch_by_branch(
    dash, tmp_path
):
    layouts.prime_branched_run(tmp_path, 1)
    assert run_import(dash, "prime-rl", tmp_path, "--name", "p") == 0
    events = dash.events()
    (only,) = trajectories(events).values()
    segs = only["segments"]
    got = [(s["kind"], s["turn"], s["branch"], s["text"]) for s in segs]
    assert got == [
        ("prompt", 0, 0, "Add 2 and 3"),
        ("action", 0, 0, "call add"),
        ("tool", 0, 0, "5"),
        ("action", 1, 0, "5"),
        ("action", 2, 1, "five"),  # the second branch: only what it adds
    ]
    assert only["num_turns"] == 3 and only["length"] == 5
    assert only["facts"]["branches"] == [
        {
            "branch": 0,
            "agent": "agent",
            "forks_from": None,
            "after_messages": 0,
            "messages": 4,
            "trainer_arrays": True,
        },
        {
            "branch": 1,
            "agent": "agent",
            "forks_from": 0,
            "after_messages": 3,
            "messages": 4,
            "trainer_arrays": True,
        },
    ]
    call, answer, other = segs[1], segs[3], segs[4]
    assert call["old_logprob"] == [None, -0.25, -0.5]  # over the sampled tokens
    assert call["logprob"] == [None, -0.3, -0.6]  # the first branch's sample
    assert call["masked"] == [[0, "not_sampled"]]  # the scaffold token
    assert answer["logprob"] == [-0.2] and other["logprob"] == [-1.5, -2.5]
    assert other["series"] == {"mismatch_kl": [0.01, 0.01]}
    assert segs[2]["mask"] == "tool" and segs[0]["mask"] == "prompt"
    for event in events:
        check_event(event)


def test_a_prime_rl_trace_whose_parents_loop_names_its_file_and_node(
    dash, tmp_path, capsys
):
    episode = layouts.prime_branched_episode()
    episode["traces"][0]["nodes"][0]["parent"] = 4
    path = layouts.prime_episodes(tmp_path, 1, [episode])
    assert run_import(dash, "prime-rl", tmp_path) == 2
    err = capsys.readouterr().err
    assert f"{path}: line 1: traces.0.nodes.3: its parents go round in a loop" in err


@pytest.mark.parametrize(
    "parents, expected",
    [
        ([None, 0, 1, 1], [[0, 1, 2], [0, 1, 3]]),  # a fork: one branch a leaf
        ([None, None, None], [[0, 1, 2]]),  # no parent at all: one flat list
        ([None, 0, None, 2], [[0, 1], [2, 3]]),  # two roots (a fresh context)
        ([None, 2, 1], "nodes.1: on no path from a root"),  # a loop off the root
        ([None, 7], "nodes.1.parent: 7 is not a node of its trace"),
    ],
)
def test_a_traces_branches_are_its_root_to_leaf_paths(parents, expected):
    from trainer.importers.primerl_traces import paths
    from trainer.importers.tailing import BadImportFile

    nodes = [{} if p is None else {"parent": p} for p in parents]
    if isinstance(expected, str):
        with pytest.raises(BadImportFile, match=re.escape(expected)):
            paths(nodes)
    else:
        assert paths(nodes) == expected


def test_a_tokenizer_reads_an_imports_token_ids_as_text(dash, tmp_path):
    from transformers import AutoTokenizer

    from tests.trainer.chatmodel import build_chat_model

    model = build_chat_model(tmp_path / "model")
    layouts.prime_branched_run(tmp_path / "run", step=1)
    args = ("--name", "p", "--tokenizer", str(model))
    assert run_import(dash, "prime-rl", tmp_path / "run", *args) == 0
    (only,) = trajectories(dash.events()).values()
    segs = only["segments"]
    ids = [t for s in segs for t in s["token_ids"]]
    for seg in segs:
        assert len(seg["tokens"]) == len(seg["token_ids"]) == len(seg["token_text"])
    decoded = AutoTokenizer.from_pretrained(model).decode(ids)
    assert "".join(t for s in segs for t in s["token_text"]) == decoded


def test_a_tokenizer_that_is_not_here_is_a_clear_error(dash, tmp_path, capsys):
    layouts.prime_run(tmp_path)
    missing = tmp_path / "no-such-model"
    assert run_import(dash, "prime-rl", tmp_path, "--tokenizer", str(missing)) == 2
    err = capsys.readouterr().err
    assert f"--tokenizer {missing}: no tokenizer there" in err
    assert "never downloads" in err


def test_a_local_prime_rl_run_brings_its_three_configs(dash, tmp_path):
    # Only the SLURM launcher writes configs/rl.json; a local run writes one per process.
    layouts.prime_run(tmp_path)
    (tmp_path / "configs").mkdir()
    for name in ("trainer", "orchestrator", "inference"):
        (tmp_path / "configs" / f"{name}.json").write_text(json.dumps({"who": name}))
    assert run_import(dash, "prime-rl", tmp_path, "--name", "p") == 0
    config = dash.only_run()["config"]
    assert config["trainer"] == {"who": "trainer"}
    assert config["orchestrator"] == {"who": "orchestrator"}
    assert config["inference"] == {"who": "inference"}


# -- miles -------------------------------------------------------------------------


def miles_dump(dump_dir):
    layouts.miles_meta(
        dump_dir,
        {"rollout_batch_size": 2, "n_samples_per_prompt": 2, "global_batch_size": 2},
    )
    prompt = [1, 2, 3]
    samples = [
        layouts.miles_sample(0, 0, prompt, [4, 5], reward=1.0, weight_versions=["3"]),
        layouts.miles_sample(1, 0, prompt, [6, 7], reward=0.0, response="41"),
        layouts.miles_sample(2, 1, prompt, [8], reward=0.5, prompt="2+2?"),
        layouts.miles_sample(3, 1, prompt, [9], reward=0.5, status="truncated"),
    ]
    layouts.miles_rollout(dump_dir, 4, samples)
    layouts.miles_train(
        dump_dir,
        4,
        0,
        [
            {
                "index": 0,
                "tokens": prompt + [4, 5],
                "reward": 1.0,
                "log_probs": [-0.25, -0.75],
                "rollout_log_probs": [-0.5, -0.5],
                "entropy": [1.0, 2.0],
                "advantages": [0.5, 0.5],
                "ref_log_probs": [-0.375, -0.625],
                "ref_entropy": [0.75, 1.25],
                "returns": [1.0, 1.0],
            }
        ],
    )
    layouts.miles_metrics(
        dump_dir,
        [
            ("rollout/step", 4, {"rollout/raw_reward": 0.5, "rollout/step": 4}),
            ("train/step", 8, {"train/pg_loss": 0.1, "train/step": 8}),
            ("train/step", 9, {"train/train_rollout_logprob_abs_diff": 0.02}),
        ],
    )


def test_miles_without_global_batch_size_or_reward_key_in_its_args(dash, tmp_path):
    # miles's dashboard args record neither --global-batch-size nor --reward-key:
    # train/step records go to the rollout logged before them, and a dict reward
    # with one number (or a "reward"/"score" entry) is the reward.
    layouts.miles_meta(tmp_path, {"rollout_batch_size": 1, "n_samples_per_prompt": 2})
    prompt = [1, 2, 3]
    samples = [
        layouts.miles_sample(0, 0, prompt, [4], reward={"score": 1.0, "fmt": 0.5}),
        layouts.miles_sample(1, 0, prompt, [5], reward={"acc": 0.0}),
    ]
    layouts.miles_rollout(tmp_path, 3, samples)
    layouts.miles_metrics(
        tmp_path,
        [
            ("rollout/step", 3, {"rollout/raw_reward": 0.5, "rollout/step": 3}),
            ("train/step", 9, {"train/pg_loss": 0.1, "train/step": 9}),
            ("train/step", 10, {"train/pg_loss": 0.2, "train/step": 10}),
            ("train/step", 11, {"train/pg_loss": 0.3, "train/step": 11}),
        ],
    )
    assert run_import(dash, "miles", tmp_path, "--name", "m") == 0
    events = dash.events()
    assert sorted(steps_of(events)) == [3]  # not steps 9, 10 and 11
    trajs = trajectories(events)
    assert trajs[3, 0, 0]["reward"] == 1.0 and trajs[3, 0, 1]["reward"] == 0.0
    assert trajs[3, 0, 0]["rewards"]["components"] == {"score": 1.0, "fmt": 0.5}


def test_miles_dumps_join_samples_and_train_shards(dash, tmp_path):
    miles_dump(tmp_path)
    assert run_import(dash, "miles", tmp_path, "--name", "m") == 0
    events = dash.events()
    assert dash.only_run()["config"]["run_name"] == "miles-run"
    trajs = trajectories(events)
    assert sorted(trajs) == [(4, 0, 0), (4, 0, 1), (4, 1, 0), (4, 1, 1)]
    first = trajs[4, 0, 0]
    assert first["reward"] == 1.0 and first["advantage"] == 0.5
    prompt, action = first["segments"]
    assert prompt["token_ids"] == [1, 2, 3] and prompt["mask"] == "prompt"
    assert action["token_ids"] == [4, 5] and action["text"] == "42"
    assert action["logprob"] == [-0.25, -0.75]
    assert action["old_logprob"] == [-0.5, -0.5]
    assert action["ratio"] == pytest.approx([math.exp(0.25), math.exp(-0.25)])
    assert action["entropy"] == [1.0, 2.0] and action["advantage"] == [0.5, 0.5]
    assert action["series"] == {  # the arrays that have no column of ours
        "ref_log_probs": [-0.375, -0.625],
        "returns": [1.0, 1.0],
        "ref_entropy": [0.75, 1.25],
    }
    assert "series" not in prompt
    assert first["metrics"] == {"off_policy/staleness": 0.0}  # the newest version
    # No train row: the sampler's log-probs only; GRPO advantage over the group.
    second = trajs[4, 0, 1]
    assert second["segments"][1]["logprob"] == []
    assert second["segments"][1]["old_logprob"] == [-0.5, -0.5]
    assert second["advantage"] == pytest.approx(-0.5 / (math.sqrt(0.5) + 1e-4))
    assert trajs[4, 1, 1]["truncated"] is True
    m = steps_of(events)
    # train/step 8 and 9 with 2 * 2 // 2 = 2 optimizer steps per rollout -> rollout 4
    assert sorted(m) == [4]
    assert m[4]["reward"] == 0.5 and m[4]["policy_loss"] == 0.1
    assert m[4]["mismatch/logprob_abs_diff_mean"] == 0.02
    # Staleness 3 - 3 for the first sample, 3 - 1 for the others (version "1").
    assert m[4]["off_policy/staleness"] == (0 + 2 + 2 + 2) / 4
    assert m[4]["off_policy/staleness_max"] == 2.0


@pytest.mark.parametrize(
    "rollout_id, versions, expected",
    [
        # On-policy (train.py): rollout 0 is sampled with version 1, the weights
        # pushed before it; rollout_id - oldest would say -1.
        (0, [["1"], ["1"]], [0.0, 0.0]),
        # A turn sampled before a push, the next after it: one version behind.
        (5, [["6"], ["5", "6"]], [0.0, 1.0]),
        # A resumed run: the counter starts at 1 again while rollout ids go on.
        (12, [["1"], ["1"]], [0.0, 0.0]),
        (3, [["x"], ["2"]], [None, 0.0]),  # a version that is not a number
    ],
)
def test_miles_staleness_is_behind_the_newest_weights_of_its_rollout(
    dash, tmp_path, rollout_id, versions, expected
):
    prompt = [1, 2, 3]
    samples = [
        layouts.miles_sample(i, 0, prompt, [4 + i], weight_versions=v)
        for i, v in enumerate(versions)
    ]
    layouts.miles_rollout(tmp_path, rollout_id, samples)
    assert run_import(dash, "miles", tmp_path, "--name", "m") == 0
    trajs = trajectories(dash.events())
    got = [
        trajs[rollout_id, 0, i]["metrics"].get("off_policy/staleness")
        for i in range(len(versions))
    ]
    assert got == expected


def test_a_miles_dump_with_moe_routing_replay_imports(dash, tmp_path):
    # --use-routing-replay keeps each sample's routed experts as a numpy array
    # [len(tokens) - 1, layers, top_k] in rollout_data/<id>.pt.
    import numpy as np

    experts = np.zeros((4, 2, 2), dtype=np.int32)
    samples = [layouts.miles_sample(0, 0, [1, 2, 3], [4, 5], routed_experts=experts)]
    layouts.miles_rollout(tmp_path, 1, samples)
    assert run_import(dash, "miles", tmp_path, "--name", "m") == 0
    (only,) = trajectories(dash.events()).values()
    assert only["segments"][1]["token_ids"] == [4, 5]


def test_a_miles_dump_holding_other_objects_is_refused_naming_it(
    dash, tmp_path, capsys
):
    import decimal

    sample = layouts.miles_sample(0, 0, [1, 2, 3], [4])
    sample["metadata"] = {"cost": decimal.Decimal("0.25")}
    path = layouts.miles_rollout(tmp_path, 1, [sample])
    assert run_import(dash, "miles", tmp_path) == 2
    err = capsys.readouterr().err
    assert f"{path}: holds a pickled decimal.Decimal, which only running code" in err


# -- Tinker ------------------------------------------------------------------------


def test_tinker_summaries_and_metrics(dash, tmp_path):
    layouts.tinker_metrics(
        tmp_path,
        [{"step": 0, "env/all/reward/total": 0.5, "optim/kl_sample_train_v1": 0.004}],
    )
    layouts.tinker_summaries(
        tmp_path,
        0,
        [
            layouts.tinker_summary(0, 0, 0, 1.0),
            layouts.tinker_summary(0, 0, 1, 0.0, sampled_at=-2),
            layouts.tinker_summary(0, 1, 0, 0.5),
        ],
    )
    (tmp_path / "config.json").write_text('{"learning_rate": 4e-05}')
    assert run_import(dash, "tinker", tmp_path, "--name", "k") == 0
    events = dash.events()
    assert dash.only_run()["config"]["tinker"] == {"learning_rate": 4e-05}
    trajs = trajectories(events)
    assert sorted(trajs) == [(0, 0, 0), (0, 0, 1), (0, 1, 0)]
    assert trajs[0, 0, 0]["advantage"] == 0.5  # 1.0 - mean(1.0, 0.0), no std
    assert trajs[0, 0, 1]["advantage"] == -0.5 and trajs[0, 1, 0]["advantage"] == 0.0
    assert trajs[0, 0, 0]["rewards"]["per_step"] == {"reward": [1.0]}
    assert trajs[0, 0, 0]["length"] == 5
    assert trajs[0, 0, 1]["metrics"]["off_policy/staleness"] == 2.0
    m = steps_of(events)[0]
    assert m["reward"] == 0.5 and m["mismatch/kl"] == 0.004
    assert m["off_policy/staleness"] == pytest.approx(2 / 3)
    assert m["off_policy/staleness_max"] == 2.0


def test_a_tinker_summary_without_its_indices_names_the_line(dash, tmp_path, capsys):
    record = layouts.tinker_summary(0, 0, 0, 1.0)
    del record["group_idx"]
    layouts.tinker_summaries(tmp_path, 0, [record])
    assert run_import(dash, "tinker", tmp_path) == 2
    assert "line 1: group_idx: must be an integer" in capsys.readouterr().err


@pytest.mark.parametrize("source", ["trl", "tensorboard", "prime-rl", "miles"])
def test_a_file_instead_of_a_directory_is_a_clear_error(dash, tmp_path, capsys, source):
    (tmp_path / "f").write_text("x")
    assert run_import(dash, source, tmp_path / "f") == 2
    assert f"--from {source} reads a directory" in capsys.readouterr().err


# -- --follow, with a second process still writing -------------------------------

WRITER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.fixtures import layouts
run = Path({run!r})
layouts.prime_metrics(run, [{{"step": 2, "entropy/all/mean": 0.6}}])
time.sleep(0.3)
layouts.prime_run(run, step=2, policy=0)  # episodes, then the trainer's export and STABLE
time.sleep(0.3)
layouts.prime_metrics(run, [{{"step": 2, "off_policy/mean": 1.0}}])
"""


def test_follow_tails_a_prime_rl_run_another_process_is_writing(dash, tmp_path):
    import subprocess
    import sys
    import threading
    import time
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    layouts.prime_run(tmp_path, step=1)
    layouts.prime_metrics(tmp_path, [{"step": 1, "entropy/all/mean": 0.7}])
    codes = []
    args = ["--follow", "--poll-s", "0.05", "--idle-exit", "10"]
    worker = threading.Thread(
        target=lambda: codes.append(run_import(dash, "prime-rl", tmp_path, *args))
    )
    worker.start()

    def arrived(step):
        if not dash.store.runs:
            return []
        return [e for e in dash.events() if e.get("step") == step]

    deadline = time.monotonic() + 60
    while len(arrived(1)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(arrived(1)) == 4  # three trajectories and the step
    script = WRITER.format(root=root, run=str(tmp_path))
    writer = subprocess.run([sys.executable, "-c", script], timeout=60, check=True)
    assert writer.returncode == 0
    worker.join(timeout=120)
    assert codes == [0]
    events = dash.events()
    late = trajectories(events)
    assert sorted(k for k in late if k[0] == 2) == [(2, 0, 0), (2, 0, 1), (2, 1, 0)]
    assert late[2, 0, 0]["segments"][1]["logprob"] == [-0.25, -0.75]
    assert late[2, 0, 0]["metrics"] == {"off_policy/staleness": 1.0}  # (2 - 1) - 0
    m = steps_of(events)[2]
    assert m["entropy"] == 0.6 and m["off_policy/staleness"] == 1.0
    assert dash.only_run()["status"] == "succeeded"


def test_a_rows_reward_with_infinities_of_both_signs_is_nan_not_an_error():
    import math

    from trainer.importers.completions import row_reward

    row = {"a": "Infinity", "b": "-Infinity", "c": 1.0}
    components, total = row_reward(row, ["a", "b", "c"], number=_number)
    assert components["a"] == math.inf and components["b"] == -math.inf
    assert math.isnan(total)
    assert (
        row_reward({"a": "Infinity", "c": 1.0}, ["a", "c"], number=_number)[1]
        == math.inf
    )


def _number(value):
    from trainer.importers.trackio import number

    return number(value)
