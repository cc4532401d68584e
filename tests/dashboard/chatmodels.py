"""Chat model directories for the platform tests, built inside the test.

:func:`build_chat_model` is ``tests/trainer/chatmodel.py``'s (loaded by file path, so
any test package can use it). :func:`build_tool_caller` then teaches that random model
one habit by a few dozen supervised steps: answer a user's question with a calculator
call, so that a 2-step run in a browser test shows a real tool call and its result.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "7 + 5"}}</tool_call>'


def _chatmodel():
    mod = sys.modules.get("chatmodel")
    if mod is None:
        path = Path(__file__).resolve().parents[1] / "trainer" / "chatmodel.py"
        spec = importlib.util.spec_from_file_location("chatmodel", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["chatmodel"] = mod
        spec.loader.exec_module(mod)
    return mod


def build_chat_model(root: Path, *, seed: int = 0) -> Path:
    return _chatmodel().build_chat_model(root, seed=seed)


def build_tool_caller(root: Path, questions: list[str], *, steps: int = 30) -> Path:
    """A chat model under ``root`` that answers each of ``questions`` (as the
    ``dataset`` environment renders them, with the calculator's system prompt) with
    :data:`CALL` and the end of its turn."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.envs.dataset import default_system_prompt

    path = build_chat_model(root)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    system = default_system_prompt(["calculator"])
    batch = []
    for q in questions:
        prompt = tok.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": q}],
            tokenize=False,
            add_generation_prompt=True,
        )
        p = tok.encode(prompt, add_special_tokens=False)
        t = tok.encode(CALL + "<|im_end|>", add_special_tokens=False)
        batch.append((p, t))
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        for p, t in batch:
            ids = torch.tensor([p + t])
            labels = torch.tensor([[-100] * len(p) + t])
            loss = model(input_ids=ids, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.save_pretrained(path)
    return path
