"""Writes a W&B run the way TRL's GRPOTrainer reports to W&B, with the real ``wandb``
package in offline mode (no network): ``python wandb_writer.py WANDB_DIR``.

As transformers' ``WandbCallback`` does, ``train/global_step`` is the step metric of
every key (``define_metric("*", step_metric=..., step_sync=True)``); each step logs
TRL's ``train/`` metrics, then its completions table (``step``, ``prompt``,
``completion``, one column per reward function, ``advantage``: two prompts, two
completions each). Step ``s`` has rewards that a test can work out by hand:
``acc`` is 1 for the first completion of each prompt and 0 for the second, ``fmt``
is ``0.5``, the advantage is ``+s/10`` and ``-s/10``. At the end, as TRL's log call at
the end of training does, the run's summary metrics at the last step, then the last
step's table again.

``--rows N``: steps to log (20). ``--pause-at-block``: log steps until the first 32 KiB
block of the transaction log is on disk (wandb writes the log a block at a time), write
``paused`` beside the run directory, wait for a file ``go`` there, then log ``--rows``
steps more. ``--exit-code C``: end the run with that exit code.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def log_step(run, step: int, end: bool = False) -> None:
    """Step ``step``'s metrics and table; ``end``: TRL's log call at the end of
    training instead, at the last step: its summary metrics, then the same table."""
    if end:
        run.log(
            {
                "train/train_runtime": 12.5,
                "train/train_loss": 0.2,
                "train/global_step": step,
            }
        )
    else:
        run.log(
            {
                "train/reward": 0.1 * step,
                "train/reward_std": 0.5,
                "train/rewards/acc/mean": 0.5,
                "train/rewards/fmt/mean": 0.5,
                "train/kl": 0.01 * step,
                "train/loss": 0.2,
                "train/learning_rate": 1e-5,
                "train/completions/mean_length": 12.0,
                "train/global_step": step,
            }
        )
    import wandb

    rows = []
    for prompt in (f"What is {step}+1?", f"What is {step}*2?"):
        rows.append([step, prompt, f"{step + 1}", 1.0, 0.5, 0.1 * step])
        rows.append([step, prompt, "no idea", 0.0, 0.5, -0.1 * step])
    columns = ["step", "prompt", "completion", "acc", "fmt", "advantage"]
    run.log({"completions": wandb.Table(columns=columns, data=rows)})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--pause-at-block", action="store_true")
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()
    os.environ.update(WANDB_MODE="offline", WANDB_DIR=args.dir, WANDB_SILENT="true")
    for name in ("WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        os.environ[name] = str(Path(args.dir) / ".wandb-home")  # not ~/.cache
    import wandb

    run = wandb.init(
        project="wandb-import",
        name="trl-grpo",
        config={
            "learning_rate": 1e-5,
            "num_generations": 2,
            "beta": 0.0,
            "reward_weights": [1.0, 0.5],
        },
    )
    run.define_metric("train/global_step")
    run.define_metric("*", step_metric="train/global_step", step_sync=True)
    step = 0
    if args.pause_at_block:
        log = Path(run.dir).parent / f"run-{run.id}.wandb"
        while log.stat().st_size < 32768:
            step += 1
            log_step(run, step)
            time.sleep(0.02)
        (Path(args.dir) / "paused").write_text(str(step))
        while not (Path(args.dir) / "go").exists():
            time.sleep(0.05)
    for _ in range(args.rows):
        step += 1
        log_step(run, step)
    log_step(run, step, end=True)
    run.summary["best_reward"] = 0.1 * step
    run.finish(exit_code=args.exit_code)


if __name__ == "__main__":
    main()
