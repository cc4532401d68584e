"""Rollout throughput: the reference loop vs the eager and continuous engines, interleaved.

    python bench/rollout_bench.py [--shape single|swarm|dataset|dataset_chat|all]
                                  [--repeats 5] [--size small] [--threads 2]

Each repeat rolls out the same seeded batch once through each engine
(``trainer.engines``: ``reference``, the KV-cache loop the eager engine replaced,
``eager``, and ``continuous``: whole episodes in one decode batch, each keeping
its KV cache across turns), alternating the order (A B C, C B A, ...) so that the
load of a shared machine hits all; the medians of rollout tokens/s (action tokens
sampled over wall seconds of ``trainer.rollout.play``) and their ratios to the
reference loop are printed, with the load average before and after and the
machine (CPU, cores, threads, whether MKL and oneDNN are built in).

Shapes: ``single``: P = 4 prompts of ~256 tokens x G = 8 completions of up to 64
tokens, one turn; ``swarm`` and ``dataset`` (a JSONL of word problems with the
calculator tool): multi-turn episodes of the environment. The model is the default
Llama of ``--size`` with random weights, whose end-of-action token would almost
never come; a bias on the stop tokens' logits (the same for every engine) makes a
completion stop with probability ~1/24 per token, so lengths spread over 1..64 as a
trained policy's do. Random weights would almost never call the calculator either
(the ``dataset`` episodes were single-turn): a bias on its name makes it about half
of the sampling mass, so an action begins with a call about half the time and an
episode plays 1-4 turns (``turns_per_episode`` in the output). The reference and eager engines sample the same tokens
(tests/trainer/test_engines.py), so they do the same work; the continuous engine
draws from per-episode random streams, so its episodes are other samples of the
same distribution (its token counts are printed beside theirs).

``--tool-ms MS``: every environment step that returns an observation (a tool
call's result) waits MS milliseconds first, as a sandbox or a search API does;
``continuous:threads`` steps the environments on ``--env-workers`` threads
(``rollout.env_workers``), so the waits overlap each other and the decoding; the
other engines step them on the decode thread.

``dataset_chat``: the ``dataset``-with-calculator shape as a new user meets it,
with a chat model directory (byte-level BPE, ChatML template, ``<tool_call>`` a
special token; ``tests/trainer/chatmodel.py``, 134k parameters) and
``bench.trl_compare``'s ~256-token word problems: ~370-token contexts with the
system prompt. ``<tool_call>`` is lifted to ~1/CALL_EVERY a token, so about half
the actions write one (random weights never close it: the environment answers
with an error, another turn). ``--size`` does not apply to it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from trainer.config import ModelConfig, RolloutConfig  # noqa: E402
from trainer.engines.continuous import SHARED_PREFIX  # noqa: E402
from trainer.envs.base import Environment, make_env  # noqa: E402
from trainer.policy import Policy  # noqa: E402
from trainer.rollout import play  # noqa: E402

ENGINES = ("reference", "eager", "continuous")
STOP_EVERY = 24  # a completion stops with probability ~1/STOP_EVERY per token


def _dataset_env(tmp: Path) -> Environment:
    rng = random.Random(0)
    rows = []
    for i in range(64):
        a, b = rng.randint(10, 999), rng.randint(10, 99)
        rows.append({"prompt": f"use the calculator: what is {a} * {b} ?", "id": i})
        rows[-1]["answer"] = str(a * b)
    path = tmp / "mul.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return make_env("dataset", {"path": str(path), "tools": ["calculator"]})


def _single_env(tmp: Path) -> Environment:
    """One turn on ~256-token prompts: the dataset env without tools."""
    rng = random.Random(0)
    words = ["tom", "has", "apples", "and", "gets", "more", ".", "how", "many"]
    rows = [
        {"prompt": " ".join(rng.choice(words) for _ in range(250)), "answer": "1"}
        for _ in range(16)
    ]
    path = tmp / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return make_env("dataset", {"path": str(path), "tools": []})


def _dataset_chat_env(tmp: Path) -> tuple[Environment, str]:
    """The ``dataset`` environment with the calculator as a new user meets it: a
    chat model directory (byte-level BPE, ChatML template, the tool tags as
    special tokens) and ~256-token word problems (``bench.trl_compare``'s
    realistic shape), under the default system prompt that describes the tool."""
    from bench.trl_compare import Work, realistic_inputs

    work = realistic_inputs(Work(shape="realistic"), tmp / "chat")
    env = make_env("dataset", {"path": work.data_path, "tools": ["calculator"]})
    return env, work.model_path


SHAPES = {
    "single": (
        _single_env,
        {"tasks_per_step": 4, "group_size": 8, "max_turns": 1},
        {"max_action_tokens": 64, "max_total_tokens": 1024},
        None,
    ),
    "swarm": (
        lambda tmp: make_env("swarm", seed=0),
        {"tasks_per_step": 4, "group_size": 8, "max_turns": 6},
        {"max_action_tokens": 32, "max_total_tokens": 1024},
        None,
    ),
    "dataset": (
        _dataset_env,
        {"tasks_per_step": 4, "group_size": 8, "max_turns": 4},
        {"max_action_tokens": 32, "max_total_tokens": 1024},
        "calculator",  # the word whose logit is lifted: tool calls, hence turns
    ),
    "dataset_chat": (
        _dataset_chat_env,
        {"tasks_per_step": 4, "group_size": 8, "max_turns": 4},
        {"max_action_tokens": 32, "max_total_tokens": 2048},
        "<tool_call>",  # lifted to ~1/CALL_EVERY a token: about half the actions
    ),
}
CALL_EVERY = 35  # dataset_chat: P(an action of ~24 tokens writes no call) ~ 1/2


def _stop_bias(policy: Policy, tool: str | None = None) -> None:
    """Raise the stop tokens' logits so that a completion ends with probability
    ~1/STOP_EVERY per token (random weights give every token ~1/V), and ``tool``'s
    (a word) so that it is about half of the rest."""
    vocab = policy.model.config.vocab_size
    stops = list(policy.stop_ids)
    bias = torch.zeros(vocab)
    bias[stops] = math.log(vocab / ((STOP_EVERY - 1) * len(stops)))
    if tool is not None and tool.startswith("<"):  # a special token: its id
        bias[policy.tokenizer.convert_tokens_to_ids(tool)] = math.log(
            vocab / (CALL_EVERY - 1)
        )
    elif tool is not None:
        bias[policy.encode(tool)[0]] = math.log(vocab)
    head = policy.model.get_output_embeddings()
    head.register_forward_hook(
        lambda mod, args, out: out + bias.to(out.device, out.dtype)
    )


class _Waiting:
    """An environment session whose tool calls take ``seconds`` (a sandbox, a
    search API): a step that returns an observation (the episode goes on) waits
    that long first; the final step does not."""

    def __init__(self, session, seconds: float) -> None:
        self.session, self.seconds = session, seconds

    def step(self, action):
        out = self.session.step(action)
        if not out.done:
            time.sleep(self.seconds)
        return out

    def __getattr__(self, name):
        return getattr(self.session, name)


def _with_tool_latency(env: Environment, ms: float) -> Environment:
    if ms > 0:
        start = env.start
        env.start = lambda task: _Waiting(start(task), ms / 1000)
    return env


def _once(policy, env, tasks, cfg, engine: str, seed: int, workers: int = 0):
    """Seconds, action tokens sampled, mean turns an episode, mean prompt tokens,
    the key/value buffers' MiB (slot rows only). ``continuous:copied``: the
    continuous engine copying a group's prompt to each of its rows
    (``shared_prefix`` None); ``continuous:shared``: keeping it once (from
    ``SHARED_PREFIX`` tokens; the CPU's default is to copy);
    ``continuous:threads``: stepping the environments on ``workers`` threads
    (``rollout.env_workers``; the others step them on the decode thread)."""
    name, _, variant = engine.partition(":")
    eng = policy.use_engine(name)
    if name == "continuous":
        eng.shared_prefix = {"copied": None, "shared": SHARED_PREFIX}.get(
            variant, type(eng).shared_prefix
        )
        eng.workers = workers if variant == "threads" else 0
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    rollouts = play(policy, env, tasks, cfg, generator=gen)
    seconds = time.perf_counter() - t0
    turns = statistics.mean(ro.num_turns for ro in rollouts)
    prompt = statistics.mean(len(ro.segments[0].token_ids) for ro in rollouts)
    held = getattr(eng, "cache_bytes", None) if name == "continuous" else None
    mib = None if held is None else held / 2**20
    return seconds, sum(ro.action_tokens for ro in rollouts), turns, prompt, mib


def bench_shape(shape: str, args: argparse.Namespace, tmp: Path) -> dict:
    make, sizes, lengths, tool = SHAPES[shape]
    env = make(tmp)
    model = ModelConfig(size=args.size, device=args.device, dtype=args.dtype)
    if isinstance(env, tuple):  # an environment and its chat model directory
        env, path = env
        model = ModelConfig(path=path, device=args.device, dtype=args.dtype)
    env = _with_tool_latency(env, args.tool_ms)
    torch.manual_seed(0)
    policy = Policy.build(model, env.vocabulary())
    _stop_bias(policy, tool)
    cfg = RolloutConfig(**sizes, **lengths)
    engines = args.engines
    tokens_per_s: dict[str, list[float]] = {e: [] for e in engines}
    tokens: dict[str, list[int]] = {e: [] for e in engines}
    turns: list[float] = []
    prompt: list[float] = []
    cache_mib: dict[str, list[float]] = {}
    for r in range(args.repeats + 1):  # the first round warms up
        tasks = env.sample_tasks(cfg.tasks_per_step, random.Random(r))
        order = engines if r % 2 == 0 else engines[::-1]
        for engine in order:
            seconds, n, t, p, mib = _once(
                policy, env, tasks, cfg, engine, seed=r, workers=args.env_workers
            )
            if r and mib is not None:
                cache_mib.setdefault(engine, []).append(mib)
            if r:
                tokens_per_s[engine].append(n / seconds)
                tokens[engine].append(n)
                turns.append(t)
                prompt.append(p)
    med = {e: statistics.median(v) for e, v in tokens_per_s.items()}
    out = {
        "shape": shape,
        "rows": cfg.tasks_per_step * cfg.group_size,
        "tool_ms": args.tool_ms,
        "model": "chat model directory" if model.path else model.size,
        "prompt_tokens": round(statistics.mean(prompt), 1),
        "turns_per_episode": round(statistics.mean(turns), 2),
        "tokens_per_rollout": tokens,
        "tokens_per_s": {e: round(v, 1) for e, v in med.items()},
        "kv_buffers_mib": {
            e: round(statistics.median(v), 2) for e, v in cache_mib.items()
        },
    }
    if "eager" in tokens and "reference" in tokens:
        out["same_tokens"] = tokens["eager"] == tokens["reference"]
    first = engines[0]
    out[f"ratio_to_{first}"] = {e: round(med[e] / med[first], 2) for e in engines[1:]}
    return out


def _machine() -> dict:
    """What the numbers were measured on: they move with the CPU and its BLAS
    (the lean forward's products go through oneDNN where they are big enough)."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (
                    ln.split(":", 1)[1].strip()
                    for ln in f
                    if ln.startswith("model name")
                ),
                cpu,
            )
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "mkl": torch.backends.mkl.is_available(),
        "onednn": torch.backends.mkldnn.is_available(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=(*SHAPES, "all"), default="all")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--size", default="small")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (a GPU session)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help="comma-separated, the first the baseline of the ratios; "
        "continuous:copied copies a group's prompt to each row; "
        "continuous:threads steps the environments on --env-workers threads",
    )
    ap.add_argument(
        "--tool-ms",
        type=float,
        default=0.0,
        help="each environment step that returns an observation waits this long "
        "first, as a tool call to a sandbox or a search API does",
    )
    ap.add_argument("--env-workers", type=int, default=8)
    args = ap.parse_args()
    args.engines = tuple(args.engines.split(","))
    torch.set_num_threads(args.threads)
    shapes = list(SHAPES) if args.shape == "all" else [args.shape]
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            load = os.getloadavg()[0]
            out = bench_shape(shape, args, Path(tmp))
            out["load_avg_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
            out["machine"] = _machine()
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
