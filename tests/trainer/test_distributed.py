"""Two gloo processes train like one process over the same global batch.

One spawn of two ranks (``torch.multiprocessing``, a free TCP port) runs every
scenario in turn; the tests read what it wrote. Token sampling draws from one generator
across the whole batch, so a rank's tokens differ from those one process samples for
the same tasks: for the exact comparisons the ranks *replay* the one-process run's
rollouts of the tasks they drew (``_Replay``), which makes the global batch the same;
everything after generation (rewards, advantages, the loss and its normalisers, DDP,
metrics, records) is the code under test. The partition of tasks and the sink's
"every trajectory once" are checked with the ranks sampling for real.
"""

from __future__ import annotations

import contextlib
import copy
import math
import pickle
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

import trainer.loop as loop
import trainer.sampling as sampling
from rewards.types import RewardBreakdown, RewardResult
from trainer.config import ModelConfig, TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink, NullSink

pytestmark = pytest.mark.slow

WORLD = 2
# Three tasks over two ranks: shares of 2 and 1 groups, so the ranks' token counts
# differ and a per-rank normaliser would weigh them wrongly.
BASE = {
    "steps": 2,
    "env": {"name": "calc"},
    "rollout": {"tasks_per_step": 3, "group_size": 3, "max_turns": 3},
    "model": {"warmstart_steps": 2},
}
# One scenario per loss aggregation (each has its own global normaliser), one of them
# with a KL term; then the batch-wide advantage scalings. (Several minibatches are not compared: one process cuts the global batch at
# random, each rank cuts its share, so the minibatches differ.)
SCENARIOS = {
    "token_mean": {"algorithm": {"agg": "token_mean"}},
    "seq_mean_token_mean": {"algorithm": {"agg": "seq_mean_token_mean"}},
    "seq_mean_token_sum_norm": {
        "algorithm": {"agg": "seq_mean_token_sum_norm", "kl_beta": 0.1}
    },
    # What spans the batch is taken over every rank: the "batch" std, GAE's whitening.
    "batch_std": {"algorithm": {"std_scaling": "batch"}},
    "ppo": {"algorithm": {"preset": "ppo"}},
    # Micro-batches of 2: 3 on the rank of 6 rows, 2 (and a blank) on the rank of 3;
    # gradients synced at the last only, the top-entropy threshold over every rank's
    # every micro-batch.
    "micro_batches": {
        "algorithm": {"agg": "token_mean", "top_entropy_quantile": 0.5},
        "optim": {"micro_batch_size": 2},
        # Token arrays: the masked tokens' reasons, which a blank part (one row,
        # nothing trained) must not overwrite.
        "record": {"every": 1, "groups": None, "token_arrays": True},
    },
    # A token budget: each rank splits its share by its own rows' lengths, so the
    # ranks' micro-batch counts differ (blanks fill in).
    "micro_batch_tokens": {
        "algorithm": {"agg": "seq_mean_token_mean"},
        "optim": {"micro_batch_tokens": 96},
    },
    # optim.compile under DDP: the ranks agree to compile (each probes its parts,
    # one gather), then train through them as one process does.
    "compiled": {"algorithm": {"agg": "token_mean"}, "optim": {"compile": True}},
}
SKIP = ("timing_s/", "perf/")


def reward(episodes, step):
    """Success on the last step, a bonus per well-formed call, and a little per action
    token (so that a group's rollouts score differently: advantages are not 0)."""
    out = []
    for ep in episodes:
        n = max(1, len(ep.steps))
        win = 1.0 if ep.facts.get("success") else 0.0
        fmt = [0.1 / n if s.ok else 0.0 for s in ep.steps] or [0.0]
        fmt[-1] += 0.01 * sum(ep.facts.get("action_tokens", ()))
        out.append(
            RewardResult(
                RewardBreakdown(
                    total=win + sum(fmt),
                    components={"outcome": win, "format": sum(fmt)},
                    per_step={
                        "outcome": (0.0,) * (n - 1) + (win,),
                        "format": tuple(fmt),
                    },
                )
            )
        )
    return out


def _config(name: str, processes: int) -> TrainConfig:
    data = copy.deepcopy(BASE)
    for key, value in SCENARIOS.get(name, {}).items():
        data[key] = {**data.get(key, {}), **value}
    data["resources"] = {"processes": processes}
    return TrainConfig.model_validate(data)


def _params(policy_state: dict) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy_state.items()}


class _Recorder:
    """Wraps ``trainer.sampling.play``: keeps every call's rollouts (one call a step)."""

    def __init__(self, play):
        self.play, self.calls = play, []

    def __call__(self, policy, env, tasks, cfg, **kw):
        out = self.play(policy, env, tasks, cfg, **kw)
        self.calls.append(copy.deepcopy(out))
        return out


class _Replay:
    """``play`` for a rank: the one-process run's rollouts of the tasks it drew."""

    def __init__(self, calls, rank: int, world: int):
        self.calls, self.rank, self.world, self.n = calls, rank, world, 0

    def __call__(self, policy, env, tasks, cfg, *, generator, first_group=0):
        recorded = self.calls[self.n]
        self.n += 1
        G = cfg.group_size
        need = len(recorded) // G
        counts = [
            need // self.world + (r < need % self.world) for r in range(self.world)
        ]
        lo = sum(counts[: self.rank])
        mine = copy.deepcopy(recorded[lo * G : (lo + len(tasks)) * G])
        # The rank drew exactly the one-process run's tasks of its slice.
        assert [ro.task.id for ro in mine[::G]] == [t.id for t in tasks]
        for ro in mine:
            ro.group = first_group + (ro.group - lo)
        return mine


@contextlib.contextmanager
def _patched(play=None):
    """Yields the list of policies ``train`` builds; ``play`` replaces rollouts."""
    built: list = []
    real_build, real_play = loop.Policy.build, sampling.play

    def build(*a, **kw):
        built.append(real_build(*a, **kw))
        return built[-1]

    loop.Policy.build = build
    sampling.play = play or real_play
    try:
        yield built
    finally:
        loop.Policy.build, sampling.play = real_build, real_play


def _rank_main(rank: int, port: int, out: str) -> None:
    from trainer.distributed import start

    out_dir = Path(out)
    torch.set_num_threads(1)  # two ranks on two cores (torchrun sets the same)
    par = start(
        "cpu",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world=WORLD,
        timeout_s=120,
    )
    try:
        calls = pickle.loads((out_dir / "calls.pkl").read_bytes())
        results = {}
        for name in SCENARIOS:
            sink = ListSink() if rank == 0 else NullSink()
            policy_out: dict = {}
            _train(name, sink, par, policy_out, play=_Replay(calls[name], rank, WORLD))
            results[name] = {"events": getattr(sink, "events", None), **policy_out}
        # For real: the ranks sample their own tokens. With checkpoints: two steps
        # at once, or one step, stop, and resume for the second.
        sink = ListSink() if rank == 0 else NullSink()
        whole, resumed = {}, {}
        _train("token_mean", sink, par, whole, ckpt=out_dir / "ck-whole")
        results["sampled"] = {"events": getattr(sink, "events", None)}
        _train("token_mean", NullSink(), par, {}, ckpt=out_dir / "ck-cut", steps=1)
        _train("token_mean", NullSink(), par, resumed, ckpt=out_dir / "ck-cut")
        results["resume"] = {"whole": whole["params"], "resumed": resumed["params"]}
        torch.save(results, out_dir / f"rank{rank}.pt")
    finally:
        par.close()


def _train(name, sink, par, policy_out, *, ckpt=None, steps=None, play=None):
    cfg = _config(name, WORLD)
    if ckpt is not None:
        cfg = cfg.model_copy(
            update={"checkpoint": cfg.checkpoint.model_copy(update={"every": 1})}
        )
    if steps is not None:
        cfg = cfg.model_copy(update={"steps": steps})
    with _patched(play) as built:
        result = loop.train(
            cfg,
            make_env("calc", seed=0),
            reward,
            sink,
            parallel=par,
            checkpoint_dir=ckpt,
        )
    assert result.status == "succeeded"
    policy_out["params"] = _params(built[0].state_dict())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The one-process references, then the two ranks' runs."""
    out = tmp_path_factory.mktemp("dist")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _runs(out)
    finally:
        torch.set_num_threads(threads)


def _runs(out: Path):
    reference, calls = {}, {}
    for name in SCENARIOS:
        recorder = _Recorder(sampling.play)
        sink = ListSink()
        with _patched(recorder) as built:
            loop.train(_config(name, 1), make_env("calc", seed=0), reward, sink)
        calls[name] = recorder.calls
        reference[name] = {
            "events": sink.events,
            "params": _params(built[0].state_dict()),
        }
    (out / "calls.pkl").write_bytes(pickle.dumps(calls))
    mp.spawn(_rank_main, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    return reference, ranks


def _steps(events):
    return {
        e["step"]: {k: v for k, v in e["metrics"].items() if not k.startswith(SKIP)}
        for e in events
        if e["type"] == "step"
    }


def _close(a: float, b: float, tol: float = 1e-5) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_two_processes_end_with_the_parameters_of_one(runs, name):
    reference, ranks = runs
    want = reference[name]["params"]
    moved = max(
        float((want[k] - v).abs().max()) for k, v in _initial_params(name).items()
    )
    assert moved > 5e-4  # the steps did train: equality below is not trivial
    # Compiled kernels round by their shapes (each rank's batch is another): 3e-5.
    tol = 3e-5 if name == "compiled" else 1e-5
    for rank in ranks:
        got = rank[name]["params"]
        assert got.keys() == want.keys()
        for k in want:
            diff = float((got[k] - want[k]).abs().max())
            assert diff <= tol, (k, diff)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_two_processes_report_the_step_metrics_of_one(runs, name):
    reference, ranks = runs
    want = _steps(reference[name]["events"])
    got = _steps(ranks[0][name]["events"])
    assert got.keys() == want.keys() == {1, 2}
    for step in want:
        assert got[step].keys() == want[step].keys()
        bad = {
            k: (got[step][k], want[step][k])
            for k in want[step]
            if not _close(got[step][k], want[step][k])
        }
        assert not bad, bad
    assert ranks[1][name]["events"] is None  # rank 1 has no sink of its own


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_two_processes_record_every_trajectory_of_one_once(runs, name):
    reference, ranks = runs

    def trajs(events):
        return {
            (e["step"], e["group"], e["index"]): e
            for e in events
            if e["type"] == "trajectory"
        }

    want = trajs(reference[name]["events"])
    events = ranks[0][name]["events"]
    got = trajs(events)
    assert len(got) == len([e for e in events if e["type"] == "trajectory"])
    assert got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        assert (g["task_id"], g["reward"]) == (w["task_id"], w["reward"])
        assert _close(g["advantage"], w["advantage"])
        assert [s["token_ids"] for s in g["segments"]] == [
            s["token_ids"] for s in w["segments"]
        ]
        assert [s.get("masked") for s in g["segments"]] == [
            s.get("masked") for s in w["segments"]
        ]


def test_sampling_ranks_draw_a_partition_of_the_tasks_and_record_each_once(runs):
    reference, ranks = runs
    events = ranks[0]["sampled"]["events"]
    trajs = [e for e in events if e["type"] == "trajectory"]
    keys = [(e["step"], e["group"], e["index"]) for e in trajs]
    cfg = _config("token_mean", 1)
    per_step = cfg.rollout.tasks_per_step * cfg.rollout.group_size
    assert len(keys) == len(set(keys)) == cfg.steps * per_step
    ref = [e for e in reference["token_mean"]["events"] if e["type"] == "trajectory"]
    # Step 1 draws from the same task stream: the same tasks, group by group.
    assert [(e["group"], e["task_id"]) for e in trajs if e["step"] == 1] == [
        (e["group"], e["task_id"]) for e in ref if e["step"] == 1
    ]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("step") == cfg.steps


def test_a_resumed_two_process_run_ends_like_an_uninterrupted_one(runs):
    _, ranks = runs
    for rank in ranks:
        whole, resumed = rank["resume"]["whole"], rank["resume"]["resumed"]
        for k in whole:
            assert torch.equal(whole[k], resumed[k]), k


_INITIAL: dict[str, dict[str, torch.Tensor]] = {}


def _initial_params(name: str) -> dict[str, torch.Tensor]:
    """The policy as training starts (after the warm start), for ``moved``."""
    if name not in _INITIAL:
        from trainer.envs.base import make_env as mk
        from trainer.policy import Policy
        from trainer.warmstart import warmstart

        cfg = _config(name, 1)
        env = mk("calc", seed=0)
        torch.manual_seed(cfg.seed)
        policy = Policy.build(
            cfg.model,
            env.vocabulary(),
            max_positions=max(2048, cfg.rollout.max_total_tokens + 8),
            temperature=cfg.rollout.temperature,
        )
        warmstart(policy, env, cfg)
        _INITIAL[name] = _params(policy.state_dict())
    return _INITIAL[name]


def test_a_single_process_refuses_a_config_that_asks_for_two():
    with pytest.raises(ValueError, match="resources.processes"):
        loop.train(_config("token_mean", 2), make_env("calc", seed=0), reward)


def test_closing_frees_the_ddp_wrapper_before_the_process_group():
    """A reducer that outlives ``destroy_process_group`` holds the group's last
    reference and destroys it later with the interpreter lock held, which can
    deadlock against gloo's workers (a rank that never exits): ``close`` frees
    the wrapper first."""
    import weakref

    import torch.distributed as dist

    from trainer.distributed import start
    from trainer.policy import Policy

    par = start("cpu", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world=1)
    try:
        policy = Policy.build(ModelConfig(size="tiny"), ["a", "b"])
        par.wrap(policy.model)
        wrapper = weakref.ref(par._scorer)
        reducer = weakref.ref(par._scorer.reducer)
    finally:
        par.close()
    assert wrapper() is None and reducer() is None
    assert not dist.is_initialized()
