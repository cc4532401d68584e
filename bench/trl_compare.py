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

``--shape realistic`` (issue 9) times the shape of a real fine-tune instead: the
``dataset`` environment on a JSONL of ~256-token prompts, 8 completions of up to 64
tokens each per prompt, and a small Hugging Face chat model directory (a byte-level BPE
tokenizer trained by ``tokenizers``, a ChatML template, a random Llama, written with
``save_pretrained`` by ``tests/trainer/chatmodel.py``'s builder) loaded by both sides;
TRL gets the same rows as conversational prompts and renders them with the same chat
template. The reward is the share of spaces in the completion: continuous, so every
group has a spread and neither side can skip one.

    python -m bench.trl_compare                       # the calc shape
    python -m bench.trl_compare --shape realistic --steps 2 --repeats 3

TRL is an optional extra (``requirements-bench.txt``); without it :func:`compare`
returns ``{"skipped": ...}``. This module must not be imported by the trainer.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import random
import shutil
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
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

REALISTIC_DIFFERENCES = [
    "both render the prompt with the model's chat template (a user turn and the "
    "assistant's opening) and stop at the model's own end tokens (<|im_end|>, "
    "<|endoftext|> from its generation_config), but sample with different random "
    "streams, so completion lengths differ a little: compare tokens/s too.",
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
    shape: str = "calc"  # or "realistic": dataset env, chat model directory
    model_path: str = ""  # realistic: the chat model directory
    data_path: str = ""  # realistic: the JSONL of prompts


# The realistic shape: P prompts of ~256 tokens, G = 8 completions of <= 64 tokens.
REALISTIC = {"prompts": 4, "group_size": 8, "max_new_tokens": 64}
PROMPT_TOKENS = 256


@dataclass
class RunTiming:
    """Per timed step: whole-step seconds, generation seconds, completion tokens."""

    step_s: list[float] = field(default_factory=list)
    gen_s: list[float] = field(default_factory=list)
    tokens: list[float] = field(default_factory=list)


def says_answer(text: str) -> float:
    return 1.0 if "answer" in text.split() else 0.0


def compare(
    size: str = "tiny",
    *,
    steps: int = 3,
    repeats: int = 3,
    shape: str = "calc",
    prompts: int | None = None,
) -> dict[str, Any]:
    """Interleaved timings of ours and TRL's GRPOTrainer; ``{"skipped": ...}`` when
    TRL is not installed. ``shape="realistic"``: see the module docstring."""
    if importlib.util.find_spec("trl") is None:
        return {"skipped": "TRL not installed (pip install -r requirements-bench.txt)"}
    work = Work(size=size, steps=steps, repeats=repeats)
    if shape == "realistic":
        with tempfile.TemporaryDirectory(prefix="trl-compare-") as tmp:
            work = replace(work, shape="realistic", **REALISTIC)
            if prompts:
                work = replace(work, prompts=prompts)
            return _compare(realistic_inputs(work, Path(tmp)))
    if shape != "calc":
        raise ValueError(f"shape: {shape!r} is not calc or realistic")
    return _compare(work)


def _compare(work: Work) -> dict[str, Any]:
    import transformers
    import trl

    ours: list[RunTiming] = []
    theirs: list[RunTiming] = []
    for _ in range(work.repeats):
        ours.append(run_ours(work))
        theirs.append(run_trl(work))
    completions = work.prompts * work.group_size
    o, t = _summary(ours, completions), _summary(theirs, completions)
    extra: dict[str, Any] = {}
    if work.shape == "realistic":
        extra = {
            "env": "dataset",
            "model": "chat model directory (tests/trainer/chatmodel.py), "
            f"{_param_count(work.model_path)} parameters",
            "prompt_tokens_mean": _prompt_tokens(work),
        }
    return {
        "benchmark": "single-turn GRPO step: ours (trainer.loop) vs TRL GRPOTrainer",
        "shape": work.shape,
        "versions": {
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
        "work": {
            "size": work.size,
            "env": ENV,
            **extra,
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
        "goal": "trl_over_ours_step_time >= "
        + ("1.5" if work.shape == "realistic" else "1 (ours at least as fast)"),
        "differences": (
            [*DIFFERENCES[:3], *REALISTIC_DIFFERENCES, DIFFERENCES[4]]
            if work.shape == "realistic"
            else DIFFERENCES
        ),
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
    env, rng = _env(work), random.Random(work.seed)
    return [
        [t.prompt for t in env.sample_tasks(work.prompts, rng)]
        for _ in range(1 + work.steps)
    ]


def _env_config(work: Work) -> dict[str, Any]:
    if work.shape != "realistic":
        return {"name": ENV}
    # Single turn (no tools: the first action is the answer), every row trained on.
    params = {"path": work.data_path, "holdout": 0.0, "max_turns": 1}
    return {"name": "dataset", "params": params}


def _env(work: Work):
    cfg = _env_config(work)
    return make_env(cfg["name"], cfg.get("params"), seed=work.seed)


# ----- the realistic shape's inputs ------------------------------------------------------
def _chat_model_builder():
    """``tests/trainer/chatmodel.py``'s ``build_chat_model`` (loaded by path: the bench
    builds the very directory the tests build)."""
    path = Path(__file__).resolve().parents[1] / "tests" / "trainer" / "chatmodel.py"
    spec = importlib.util.spec_from_file_location("bench_chatmodel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_chat_model


def realistic_inputs(work: Work, tmp: Path, rows: int = 64) -> Work:
    """Build the chat model directory and a JSONL of ``rows`` word problems padded with
    story sentences to ~PROMPT_TOKENS tokens once rendered by the chat template."""
    from transformers import AutoTokenizer

    model = _chat_model_builder()(tmp / "models", seed=work.seed)
    tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    rng = random.Random(work.seed)
    names = ["tom", "ann", "bob", "eve", "sam", "kim"]
    things = ["apples", "pears", "books", "coins", "stones", "cards"]
    lines = []
    for i in range(rows):
        story: list[str] = []
        while True:
            who, what = rng.choice(names), rng.choice(things)
            a, b = rng.randint(1, 50), rng.randint(1, 50)
            story.append(f"{who} has {a} {what} and gets {b} more .")
            question = f"how many {what} has {who} now ?"
            text = " ".join([*story, question])
            if _chat_tokens(tok, text) >= PROMPT_TOKENS:
                break
        lines.append(json.dumps({"prompt": text, "answer": str(a + b), "id": i}))
    data = tmp / "prompts.jsonl"
    data.write_text("\n".join(lines) + "\n")
    return replace(work, model_path=str(model), data_path=str(data))


def _chat_tokens(tok, text: str) -> int:
    """Tokens of ``text`` as a user turn rendered by the chat template, with the
    assistant's opening (what both sides feed the model)."""
    ids = tok.apply_chat_template(
        [{"role": "user", "content": text}],
        tokenize=True,
        add_generation_prompt=True,
        return_dict=False,  # transformers 5 returns a BatchEncoding by default
    )
    return len(ids)


def _prompt_tokens(work: Work) -> float:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(work.model_path, local_files_only=True)
    counts = [_chat_tokens(tok, p) for step in prompts_per_step(work) for p in step]
    return round(statistics.fmean(counts), 1)


def _param_count(path: str) -> int:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    return sum(p.numel() for p in model.parameters())


def space_share(text: str) -> float:
    """The realistic shape's reward: continuous, so no group has zero spread."""
    return text.count(" ") / max(1, len(text))


def _reward_of(work: Work):
    return space_share if work.shape == "realistic" else says_answer


# ----- ours ---------------------------------------------------------------------------
def _our_reward_fn(score):
    def reward(episodes, step):
        out = []
        for ep in episodes:
            r = score(ep.steps[-1].action if ep.steps else "")
            per_step = (0.0,) * (max(1, len(ep.steps)) - 1) + (r,)
            out.append(
                RewardResult(RewardBreakdown(r, {"answer": r}, {"answer": per_step}))
            )
        return out

    return reward


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
            "env": _env_config(work),
            "model": (
                {"path": work.model_path, "device": "cpu"}
                if work.shape == "realistic"
                else {"size": work.size, "device": "cpu", "warmstart_steps": 0}
            ),
            "rollout": {
                "tasks_per_step": work.prompts,
                "group_size": work.group_size,
                "max_turns": 1,
                "max_action_tokens": work.max_new_tokens,
                # the realistic prompt (~256) and its completion fit; calc: default
                **({"max_total_tokens": 1024} if work.shape == "realistic" else {}),
                "temperature": work.temperature,
            },
            "algorithm": {"preset": "grpo"},
            "optim": {"lr": work.lr, "grad_clip": 1.0},
        }
    )
    sink = _StepTimes(work)
    train(cfg, _env(work), _our_reward_fn(_reward_of(work)), sink)
    return sink.run


# ----- TRL ----------------------------------------------------------------------------
def _trl_reward_fn(score):
    def reward(completions, **_):
        # Conversational prompts get completions as [{"role": "assistant", ...}].
        return [
            score(c if isinstance(c, str) else c[-1]["content"]) for c in completions
        ]

    return reward


def _trl_model_and_rows(work: Work):
    """The model, tokenizer and prompt rows TRL trains on: the same weights, prompts and
    stopping rule as our side."""
    torch.manual_seed(work.seed)  # as trainer.loop.train does before building
    if work.shape == "realistic":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        # The same directory; both sides stop at the model's own end tokens
        # (generation_config: <|im_end|> and <|endoftext|>).
        model = AutoModelForCausalLM.from_pretrained(
            work.model_path, local_files_only=True
        )
        tok = AutoTokenizer.from_pretrained(work.model_path, local_files_only=True)
        rows = [
            [{"role": "user", "content": p}]
            for step in prompts_per_step(work)
            for p in step
        ]
    else:
        env = make_env(ENV, seed=0)
        policy = Policy.build(
            ModelConfig(size=work.size, device="cpu"), env.vocabulary()
        )
        model, tok = policy.model, copy.deepcopy(policy.tokenizer)
        # TRL always stops on the tokenizer's <eos>; ours stops on <eoa> only: make
        # <eoa> the end token on this side so both sample under the same stopping rule.
        tok.eos_token = EOA
        model.config.eos_token_id = model.generation_config.eos_token_id = policy.eoa_id
        # Our prompts start with <bos>; the word tokenizer adds no special tokens.
        rows = [f"{tok.bos_token} {p}" for step in prompts_per_step(work) for p in step]
    return model, tok, rows


def _grpo_config(work: Work):
    """TRL's settings matched to our grpo preset, one optimiser step per step."""
    from trl import GRPOConfig

    batch = work.prompts * work.group_size
    return GRPOConfig(
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


def run_trl(work: Work) -> RunTiming:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

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

    model, tok, rows = _trl_model_and_rows(work)
    args = _grpo_config(work)
    trainer = Timed(
        model=model,
        reward_funcs=_trl_reward_fn(_reward_of(work)),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": rows}),
        processing_class=tok,
        callbacks=[Clock()],
    )
    trainer.remove_callback(PrinterCallback)  # it prints the end-of-train summary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # TRL calls deprecated aliases
        trainer.train()
    shutil.rmtree(args.output_dir, ignore_errors=True)  # saves nothing; leave no dir
    for gen_s, tokens in gen_log[1:]:  # the first generation belongs to the warm-up
        run.gen_s.append(gen_s)
        run.tokens.append(float(tokens))
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("calc", "realistic"), default="calc")
    ap.add_argument("--size", default="tiny", help="calc shape: the built-in size")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per run")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each, interleaved")
    ap.add_argument("--prompts", type=int, default=None, help="distinct prompts a step")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads for both sides (1 on a shared machine: small ops under "
        "oversubscribed OpenMP threads run several times slower)",
    )
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = compare(
        args.size,
        steps=args.steps,
        repeats=args.repeats,
        shape=args.shape,
        prompts=args.prompts,
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
