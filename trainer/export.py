"""``export-model``: a checkpoint -> a plain Hugging Face model directory.

    python -m trainer export-model CHECKPOINT_OR_RUN_DIR OUT_DIR [--adapter]

The source is a checkpoint (``step-NNNNNN``), a checkpoints directory or a run's
``--out`` directory (its newest checkpoint is used). A LoRA checkpoint's adapter is
merged into the base model named by the run's ``model.path``; a full checkpoint's
weights are loaded into the model the run built. The result (weights as safetensors,
config, tokenizer with its chat template) loads with
``AutoModelForCausalLM.from_pretrained`` and carries no adapter; the trainer loads it
back as ``model.path``. A built-in model (no ``model.path``: a small Llama with the
project's word-level tokenizer) exports the same way. ``--adapter`` (LoRA only) writes
the adapter alone, as peft saves it, with the base model's tokenizer: it loads with
``PeftModel.from_pretrained(base, OUT_DIR)``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

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
    save_tokenizer(tokenizer, out)
    return out


# How this process loaded the tokenizer, which transformers writes into the saved
# tokenizer_config.json: a user loading the download from the Hub or elsewhere
# would inherit "local_files_only": true.
LOADER_KEYS = ("is_local", "local_files_only")


def save_tokenizer(tokenizer: Any, out: Path) -> None:
    """``tokenizer.save_pretrained(out)`` without :data:`LOADER_KEYS` in its config."""
    tokenizer.save_pretrained(out)
    path = out / "tokenizer_config.json"
    if path.exists():
        config = json.loads(path.read_text(encoding="utf-8"))
        if any(k in config for k in LOADER_KEYS):
            for k in LOADER_KEYS:
                config.pop(k, None)
            path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                            encoding="utf-8")  # fmt: skip


def checkpoint_config(ckpt: str | Path) -> TrainConfig:
    """The config the run that wrote checkpoint ``ckpt`` trained with."""
    meta = json.loads((Path(ckpt) / "meta.json").read_text(encoding="utf-8"))
    return TrainConfig.model_validate(meta["config"])


def export_kinds(ckpt: str | Path) -> list[str]:
    """What :func:`export` can write from ``ckpt``: ``model`` always (merged when the
    run trained LoRA adapters), ``adapter`` for a LoRA run."""
    cfg = checkpoint_config(ckpt)
    return ["model", "adapter"] if cfg.model.lora is not None else ["model"]


def export(src: str | Path, out: str | Path, kind: str = "model") -> Path:
    """``kind`` ``model``: :func:`export_model`; ``adapter``: :func:`export_adapter`."""
    if kind == "adapter":
        return export_adapter(src, out)
    if kind == "model":
        return export_model(src, out)
    raise ExportError(f"kind: {kind!r} is not one of model, adapter")


def export_adapter(src: str | Path, out: str | Path) -> Path:
    """A LoRA checkpoint's adapter (``adapter_config.json``,
    ``adapter_model.safetensors``) with the base model's tokenizer and chat template."""
    ckpt = find_checkpoint(src)
    cfg = checkpoint_config(ckpt)
    if cfg.model.lora is None:
        raise ExportError(f"{ckpt}: the run trained all weights, no LoRA adapter")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for f in (ckpt / "adapter").iterdir():
        if f.is_file():
            shutil.copyfile(f, out / f.name)
    save_tokenizer(_base_tokenizer(str(cfg.model.path)), out)
    return out


def _base_tokenizer(path: str) -> Any:
    """The tokenizer the run trained with: the base's, plus the action and
    observation tokens :func:`trainer.models.load_local` adds without a chat template
    (the model loads no weights here)."""
    from transformers import AutoTokenizer

    from trainer.tokenizer import EOA, OBS

    tok = AutoTokenizer.from_pretrained(
        path, local_files_only=True, trust_remote_code=False
    )
    if tok.chat_template:
        return tok
    added = [t for t in (EOA, OBS) if t not in tok.get_vocab()]
    if added:
        tok.add_special_tokens({"additional_special_tokens": added})
    return tok
