"""``export-model``: a checkpoint -> a plain Hugging Face model directory.

    python -m trainer export-model CHECKPOINT_OR_RUN_DIR OUT_DIR

The source is a checkpoint (``step-NNNNNN``), a checkpoints directory or a run's
``--out`` directory (its newest checkpoint is used). A LoRA checkpoint's adapter is
merged into the base model named by the run's ``model.path``; a full checkpoint's
weights are loaded into the model the run built. The result (weights, config,
tokenizer) loads with ``AutoModelForCausalLM.from_pretrained`` and carries no adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainer.checkpoint import latest_checkpoint
from trainer.config import TrainConfig


class ExportError(ValueError):
    pass


def find_checkpoint(src: str | Path) -> Path:
    """The checkpoint ``src`` names, or the newest one under it."""
    src = Path(src)
    if (src / "meta.json").is_file():
        return src
    for root in (src / "checkpoints", src):
        found = latest_checkpoint(root)
        if found is not None:
            return found
    raise ExportError(f"{src}: no checkpoint (step-NNNNNN with meta.json) found")


def export_model(src: str | Path, out: str | Path) -> Path:
    from safetensors.torch import load_model

    from trainer.models import load_local
    from trainer.policy import Policy

    ckpt = find_checkpoint(src)
    meta = json.loads((ckpt / "meta.json").read_text(encoding="utf-8"))
    cfg = TrainConfig.model_validate(meta["config"])
    if cfg.model.lora is not None:
        from peft import PeftModel

        base, tokenizer = load_local(str(cfg.model.path))
        model = PeftModel.from_pretrained(base, ckpt / "adapter").merge_and_unload()
    else:
        vocab: list[str] = []
        if not cfg.model.path:
            from trainer.envs.base import make_env

            env = make_env(cfg.env.name, cfg.env.params, seed=cfg.seed)
            vocab = env.vocabulary()
        model_cfg = cfg.model.model_copy(update={"device": "cpu", "dtype": "float32"})
        policy = Policy.build(
            model_cfg,
            vocab,
            max_positions=max(2048, cfg.rollout.max_total_tokens + 8),
        )
        load_model(policy, str(ckpt / "policy.safetensors"), strict=False)
        model, tokenizer = policy.model, policy.tokenizer
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
