"""Ours vs TRL: one single-turn GRPO step on identical work, timed in the same process.

    python bench/trainer_bench.py --trl        # after the trainer bench
    python -c "from bench.trl_compare import compare; print(compare('tiny'))"

Both sides start from the same weights (the default policy of ``model.size``, built with
the ``calc`` vocabulary under the same seed) and do the same work per optimiser step:
P calc prompts x G sampled completions of at most N new tokens (temperature 1, stop at
the end-of-action token), a text reward (1 if the completion says ``answer``), group
advantages scaled by the group std, the clipped loss averaged per sequence then over
the batch, one AdamW step with the gradient norm clipped at 1. Ours runs
:func:`trainer.loop.train` with ``max_turns=1``; TRL runs ``GRPOTrainer.train()``
(``beta=0``, one iteration, no vLLM, CPU, float32). Each run does 1 + k steps and the
first is discarded as warm-up; runs alternate (ours, TRL, ours, TRL ...) so drift in a
shared machine's load hits both, and medians over runs are reported.

TRL is an optional extra (``requirements-bench.txt``); without it :func:`compare`
returns ``{"skipped": ...}``. This module must not be imported by the trainer.
"""

from __future__ import annotations

import copy
import importlib.util
import random
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from rewards.types import RewardBreakdown, RewardResult
from trainer.config import ModelConfig, TrainConfig
from trainer.envs.base import make_env
from trainer.events import NullSink
from trainer.loop import train
from trainer.policy import Policy
from trainer.tokenizer import EOA

ENV = "calc"
DIFFERENCES = [
    "TRL samples through model.generate (GenerationConfig, logits processors); ours "
    "through Policy.generate (a KV-cache loop of its own).",
    "with one epoch both take the old log-probs from the training forward itself "
    "(detached), without a separate scoring pass.",
    "ours reads each distinct prompt once per step, in sampling (prefill, KV cache "
    "gathered to the group's G rows) and in the update (the prompt's keys and values "
    "shared by its G rows, gradients flowing back through them); TRL runs every "
    "prompt G times in both. This is where ours saves work, not a change to the math.",
    "both stop at <eoa> (TRL's tokenizer copy has <eoa> as its eos), but sample with "
    "different random streams, so completion lengths differ a little.",
    "TRL's step includes the Trainer's dataloader, accelerate and callback machinery; "
    "ours includes the environment session (parsing the action) and step metrics.",
]


@dataclass(frozen=True)
class Work:
    """One comparison's shape; identical for both trainers."""

    size: str = "tiny"
    prompts: int = 8  # P: distinct tasks per step
    group_size: int = 8  # G: completions per task
    max_new_tokens: int = 16  # N
    temperature: float = 1.0
    steps: int = 3  # k timed steps per run, after one warm-up step
    repeats: int = 3  # R runs of each trainer, interleaved
    seed: int = 0
    lr: float = 1e-3


@dataclass
class RunTiming:
    """Per timed step: whole-step seconds, generation seconds, completion tokens."""

    step_s: list[float] = field(default_factory=list)
    gen_s: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)


def says_answer(text: str) -> float:
    return 1.0 if "answer" in text.split() else 0.0


def compare(size: str = "tiny", *, steps: int = 3, repeats: int = 3) -> dict[str, Any]:
    """Interleaved timings of ours and TRL's GRPOTrainer; ``{"skipped": ...}`` when
    TRL is not installed."""
    if importlib.util.find_spec("trl") is None:
        return {"skipped": "TRL not installed (pip install -r requirements-bench.txt)"}
    import transformers
    import trl

    work = Work(size=size, steps=steps, repeats=repeats)
    ours: list[RunTiming] = []
    theirs: list[RunTiming] = []
    for _ in range(work.repeats):
        ours.append(run_ours(work))
        theirs.append(run_trl(work))
    completions = work.prompts * work.group_size
    o, t = _summary(ours, completions), _summary(theirs, completions)
    return {
        "benchmark": "single-turn GRPO step: ours (trainer.loop) vs TRL GRPOTrainer",
        "versions": {
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
        "work": {
            "size": work.size,
            "env": ENV,
            "completions_per_step": work.prompts * work.group_size,
            "prompts": work.prompts,
            "group_size": work.group_size,
            "max_new_tokens": work.max_new_tokens,
            "temperature": work.temperature,
            "timed_steps_per_run": work.steps,
            "warmup_steps_per_run": 1,
            "runs_each": work.repeats,
            "device": "cpu",
            "torch_threads": torch.get_num_threads(),
        },
        "ours": o,
        "trl": t,
        "trl_over_ours_step_time": round(t["step_s_median"] / o["step_s_median"], 3),
        "goal": "trl_over_ours_step_time >= 1 (ours at least as fast)",
        "differences": DIFFERENCES,
    }


def _summary(runs: list[RunTiming], completions: int) -> dict[str, Any]:
    """Per run: mean seconds per step and completion tokens per second of whole step;
    then the median over runs."""
    step = [statistics.fmean(r.step_s) for r in runs]
    gen = [statistics.fmean(r.gen_s) for r in runs]
    tps = [sum(r.tokens) / sum(r.step_s) for r in runs]
    gen_tps = [sum(r.tokens) / sum(r.gen_s) for r in runs]
    return {
        "step_s_median": round(statistics.median(step), 4),
        # Less swayed by one slow run on a shared machine.
        "step_s_median_of_all_steps": round(
            statistics.median(x for r in runs for x in r.step_s), 4
        ),
        "gen_s_median": round(statistics.median(gen), 4),
        # Everything but sampling: reward, scoring, loss, backward, optimiser step.
        "rest_s_median": round(
            statistics.median(
                statistics.fmean(s - g for s, g in zip(r.step_s, r.gen_s, strict=True))
                for r in runs
            ),
            4,
        ),
        "completion_tokens_per_s_median": round(statistics.median(tps), 1),
        "gen_tokens_per_s_median": round(statistics.median(gen_tps), 1),
        "mean_completion_tokens": round(
            statistics.fmean(x for r in runs for x in r.tokens) / completions, 2
        ),
        "step_s_runs": [round(x, 4) for x in step],
    }


def prompts_per_step(work: Work) -> list[list[str]]:
    """The prompts ``trainer.loop`` samples at each step (same env, same task rng)."""
    env, rng = make_env(ENV, seed=0), random.Random(work.seed)
    return [
        [t.prompt for t in env.sample_tasks(work.prompts, rng)]
        for _ in range(1 + work.steps)
    ]


# ----- ours ---------------------------------------------------------------------------
def _our_reward(episodes, step):
    out = []
    for ep in episodes:
        r = says_answer(ep.steps[-1].action if ep.steps else "")
        per_step = (0.0,) * (max(1, len(ep.steps)) - 1) + (r,)
        out.append(
            RewardResult(RewardBreakdown(r, {"answer": r}, {"answer": per_step}))
        )
    return out


class _StepTimes(NullSink):
    """Still a NullSink (the loop builds no records for it); keeps the step timings."""

    def __init__(self, work: Work) -> None:
        self.run = RunTiming()
        self.completions = work.prompts * work.group_size

    def emit(self, event: dict[str, Any]) -> None:
        if event["type"] == "step" and event["step"] > 1:  # step 1 is the warm-up
            m = event["metrics"]
            self.run.step_s.append(m["timing_s/step"])
            self.run.gen_s.append(m["timing_s/gen"])
            self.run.tokens.append(m["completions/mean_length"] * self.completions)


def run_ours(work: Work) -> RunTiming:
    cfg = TrainConfig.model_validate(
        {
            "steps": 1 + work.steps,
            "seed": work.seed,
            "env": {"name": ENV},
            "model": {"size": work.size, "device": "cpu", "warmstart_steps": 0},
            "rollout": {
                "tasks_per_step": work.prompts,
                "group_size": work.group_size,
                "max_turns": 1,
                "max_action_tokens": work.max_new_tokens,
                "temperature": work.temperature,
            },
            "algorithm": {"preset": "grpo"},
            "optim": {"lr": work.lr, "grad_clip": 1.0},
        }
    )
    sink = _StepTimes(work)
    train(cfg, make_env(ENV, seed=0), _our_reward, sink)
    return sink.run


# ----- TRL ----------------------------------------------------------------------------
def _trl_reward(completions, **_):
    return [says_answer(c) for c in completions]


def run_trl(work: Work) -> RunTiming:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    run = RunTiming()
    gen_log: list[tuple[float, int]] = []

    class Timed(GRPOTrainer):
        # Private in TRL; pinned in requirements-bench.txt. Times sampling only.
        def _generate_single_turn(self, *args, **kwargs):
            t0 = time.perf_counter()
            ids, logprobs = super()._generate_single_turn(*args, **kwargs)
            gen_log.append((time.perf_counter() - t0, sum(len(c) for c in ids)))
            return ids, logprobs

    class Clock(TrainerCallback):
        # on_step_begin..on_step_end spans generation, reward, loss, backward, step.
        def on_step_begin(self, args, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step > 1:
                run.step_s.append(time.perf_counter() - self.t0)

    torch.manual_seed(work.seed)  # as trainer.loop.train does before building
    env = make_env(ENV, seed=0)
    policy = Policy.build(ModelConfig(size=work.size, device="cpu"), env.vocabulary())
    model, tok = policy.model, copy.deepcopy(policy.tokenizer)
    # TRL always stops on the tokenizer's <eos>; ours stops on <eoa> only: make <eoa>
    # the end token on this side so both sample under the same stopping rule.
    tok.eos_token = EOA
    model.config.eos_token_id = model.generation_config.eos_token_id = policy.eoa_id
    # Our prompts start with <bos>; the word tokenizer adds no special tokens itself.
    rows = [f"{tok.bos_token} {p}" for step in prompts_per_step(work) for p in step]
    batch = work.prompts * work.group_size
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"),
        per_device_train_batch_size=batch,  # one optimiser step = P * G completions
        gradient_accumulation_steps=1,
        num_generations=work.group_size,
        max_completion_length=work.max_new_tokens,
        temperature=work.temperature,
        top_p=1.0,
        num_iterations=1,
        beta=0.0,
        loss_type="grpo",  # per-sequence token mean, like our grpo preset
        scale_rewards="group",
        epsilon=0.2,
        learning_rate=work.lr,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        max_steps=1 + work.steps,
        shuffle_dataset=False,  # the same prompts in the same order as ours
        activation_checkpointing=False,  # GRPOConfig defaults it on; ours has none
        use_vllm=False,
        use_cpu=True,
        bf16=False,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=work.seed,
    )
    trainer = Timed(
        model=model,
        reward_funcs=_trl_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": rows}),
        processing_class=tok,
        callbacks=[Clock()],
    )
    trainer.remove_callback(PrinterCallback)  # it prints the end-of-train summary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # TRL calls deprecated aliases
        trainer.train()
    for gen_s, tokens in gen_log[1:]:  # the first generation belongs to the warm-up
        run.gen_s.append(gen_s)
        run.tokens.append(float(tokens))
    return run
