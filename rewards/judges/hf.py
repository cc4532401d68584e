"""A local transformers causal LM as a generative judge.

The model directory comes from the run config and is loaded with
``local_files_only=True`` and ``trust_remote_code=False`` (a run config must not be a
way to execute code or reach the network). Loading is lazy (first batch) and cached per
path for the life of the process. Generation is greedy so a judge is repeatable; its
answer is parsed by :mod:`rewards.judges.parse`, and anything unreadable is a recorded
failure with the raw text.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from rewards.config import JudgeConfig
from rewards.judges.base import (
    JudgeDeps,
    ModelLoader,
    build_prompt,
    failure,
    judgement_from_text,
)
from rewards.registry import JUDGE_BACKENDS
from rewards.types import Episode, Judgement

_CACHE: dict[str, tuple[Any, Any]] = {}
_LOCK = threading.Lock()


def load_local_model(path: str) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a local directory, cached per path."""
    with _LOCK:
        if path not in _CACHE:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            kw = {"local_files_only": True, "trust_remote_code": False}
            tok = AutoTokenizer.from_pretrained(path, **kw)
            model = AutoModelForCausalLM.from_pretrained(path, **kw)
            model.eval()
            _CACHE[path] = (model, tok)
        return _CACHE[path]


def generate(model: Any, tok: Any, prompt: str, max_new_tokens: int) -> str:
    """Greedy continuation of ``prompt`` (through the chat template when it has one)."""
    import torch

    if getattr(tok, "chat_template", None):
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": prompt}],
            tokenize=False,
            add_generation_prompt=True,
        )
    enc = tok(prompt, return_tensors="pt")
    ids, mask = enc["input_ids"], enc.get("attention_mask")
    # Keep the tail (rubric answer format and the end of the trajectory) if too long.
    room = int(getattr(model.config, "max_position_embeddings", 2048)) - max_new_tokens
    if room > 0 and ids.shape[1] > room:
        ids = ids[:, -room:]
        mask = mask[:, -room:] if mask is not None else None
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with torch.no_grad():
        out = model.generate(
            input_ids=ids.to(model.device),
            attention_mask=None if mask is None else mask.to(model.device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad,
        )
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


class HFJudge:
    backend = "hf"

    def __init__(self, cfg: JudgeConfig, loader: ModelLoader) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self._loader = loader

    def judge_one(self, model: Any, tok: Any, ep: Episode) -> Judgement:
        try:
            raw = generate(model, tok, build_prompt(self.cfg, ep), self.cfg.max_tokens)
        except Exception as exc:  # noqa: BLE001 - a judge never takes the run down
            return failure(self.cfg, f"generation failed: {type(exc).__name__}: {exc}")
        return judgement_from_text(self.cfg, raw, ep)

    def __call__(self, episodes: Sequence[Episode]) -> list[Judgement]:
        try:
            model, tok = self._loader(str(self.cfg.model_path))
        except Exception as exc:  # noqa: BLE001
            err = f"could not load {self.cfg.model_path!r}: {type(exc).__name__}: {exc}"
            return [failure(self.cfg, err) for _ in episodes]
        return [self.judge_one(model, tok, ep) for ep in episodes]


@JUDGE_BACKENDS.register("hf")
def make_hf_judge(cfg: JudgeConfig, deps: JudgeDeps) -> HFJudge:
    """local model"""
    return HFJudge(cfg, deps.model_loader or load_local_model)
