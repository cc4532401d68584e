"""Advice for the new-run form's live check: settings that validate but would make a run
fail at what it is for. A warning names the field it is about and never refuses the
run (``{"rollout.max_action_tokens": ["..."]}``; the form shows it beside the field
and in the side panel under "Valid configuration").

With the built-in model from scratch, fewer than :data:`FEW_STEPS` steps are said to
show the machinery rather than learning, and on the ``dataset`` environment, answers
it cannot reach from their prompts are said so (:func:`_unreachable_answers`). With tools on, ``rollout.max_action_tokens``
must hold one tool call.
An action is cut at that many tokens, and a call cut before its end is no call ("error:
unterminated tool call"), so every tool-using episode fails the same way. The call
counted is the shortest a model writes for each chosen tool, in the form it is taught:
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the ``dataset``
environment's system prompt, :func:`trainer.envs.dataset.default_system_prompt`)
under the tokenizer of ``model.path``, or ``<tool> <text>`` (:func:`trainer.envs.tools.
parse_action`'s word form) under the default model's word-level vocabulary.

A model directory's tokenizer is loaded once per directory (and again only when its
tokenizer files change), never its weights; ``model.path`` must already be the
authorised path (``services.check_platform``'s config), and nothing of a model's code
is run (``trust_remote_code=False``).
"""

from __future__ import annotations

import json
import logging
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FIELD = "rollout.max_action_tokens"
# The shortest argument a model would pass each built-in tool; another tool: one word.
EXAMPLES = {"calculator": "1 + 13", "search": "capital of France"}
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def warnings(cfg: Any) -> dict[str, list[str]]:
    """``{field: [message]}`` for a validated ``TrainConfig``; empty when all is well.
    Never raises: advice that cannot be worked out is left out."""
    try:
        answers = _unreachable_answers(cfg)
        # "Steps 200 or more to watch it learn" is no advice for answers it cannot learn
        short = {} if FREE_FIELD in answers else _short_from_scratch(cfg)
        return {**_tool_call_room(cfg), **short, **answers}
    except Exception:  # advice only; the check's own answer stands
        log.warning("form advice failed", exc_info=True)
        return {}


# Fewer RL steps than this, with the built-in model from scratch, show the machinery,
# not learning: the learning demos move their reward over 100-200 steps (README,
# ``bench/learning.py``: dataset_arith 0.175 -> 0.899 over 2,000 steps; a newcomer's
# 15-step dataset run scored 0.05 at every step and read "No learning signal").
FEW_STEPS = 50


def _short_from_scratch(cfg: Any) -> dict[str, list[str]]:
    if cfg.model.path or cfg.model.init_from_run or cfg.steps >= FEW_STEPS:
        return {}
    return {
        "steps": [
            f"{cfg.steps} steps is short for the built-in model trained from scratch: "
            "the learning demos move their reward over 100-200 steps, so a run this "
            "short shows the machinery (rollouts, charts, alerts) rather than "
            "learning. Steps 200 or more to watch it learn."
        ]
    }


# The ``dataset`` environment's inputs the answers' advice stands beside.
FREE_FIELD = "envp.dataset.path"
CALC_FIELD = "envp.dataset.tools"


def _unreachable_answers(cfg: Any) -> dict[str, list[str]]:
    """With the built-in model from scratch on the ``dataset`` environment: answers
    it cannot reach from its prompts (free text, or a number it would have to
    compute with the calculator off), from the file's first rows
    (:mod:`dashboard.library.answer_shapes`). Said when most of them are; never with
    the search tool on (an answer may be in its documents)."""
    from dashboard.library.answer_shapes import shapes

    if cfg.env.name != "dataset" or cfg.model.path or cfg.model.init_from_run:
        return {}
    p, tools = cfg.env.params, _tools(cfg)
    if "search" in tools:
        return {}
    found = shapes(p.path, p.format, p.prompt_key, p.answer_key, "calculator" in tools)
    if found is None:
        return {}
    if found.share("free") > 0.5:
        line, prompt, answer = found.first["free"]
        return {
            FREE_FIELD: [
                "No number of steps teaches the built-in model these answers: "
                f"{_many(found, 'free')} are free text, not numbers or words from "
                f"their prompts (line {line}: “{answer}” for “{prompt}”). Set Model "
                "path to a pretrained model, or Init from run to a run that already "
                "answers them; to watch the built-in model learn, try the calc "
                "environment."
            ]
        }
    if found.counts.get("needs_calc") and found.share("free", "needs_calc") > 0.5:
        line, prompt, answer = found.first["needs_calc"]
        return {
            CALC_FIELD: [
                f"Add the calculator tool: {_many(found, 'needs_calc')} are a sum, "
                "difference or product of two numbers in the prompt "
                f"(line {line}: “{answer}” for “{prompt}”), which the built-in model "
                "cannot work out in its head; with the calculator it learns to call "
                "it and answer its result, as bench dataset_arith does."
            ]
        }
    return {}


def _many(found: Any, kind: str) -> str:
    """ "12 of the first 20 answers", "all of the first 20 answers", "its one answer"."""
    n, rows = found.counts.get(kind, 0), found.rows
    if rows == 1:
        return "its one answer"
    return f"{'all' if n == rows else n} of the first {rows} answers"


def _tools(cfg: Any) -> list[str]:
    tools = getattr(cfg.env.params, "tools", None)
    return [str(t) for t in tools] if isinstance(tools, list | tuple) else []


def call_text(tool: str, chat: bool) -> str:
    """The shortest call of ``tool`` a model writes: JSON for a model directory's
    tokenizer, the word form for the default model's."""
    from trainer.envs.tools import TOOLS

    arg = EXAMPLES.get(tool, "x")
    if not chat:
        return f"{tool} {arg}"
    main = TOOLS.get(tool).main_arg if tool in TOOLS else "input"
    body = json.dumps({"name": tool, "arguments": {main: arg}})
    return f"<tool_call>{body}</tool_call>"


def _tool_call_room(cfg: Any) -> dict[str, list[str]]:
    tools = _tools(cfg)
    if not tools:
        return {}
    path = cfg.model.path
    tokenizer = _model_tokenizer(path) if path else _word_tokenizer(tuple(tools))
    if tokenizer is None:
        return {}
    lengths = {
        t: len(tokenizer.encode(call_text(t, bool(path)), add_special_tokens=False))
        for t in tools
    }
    tool, need = max(lengths.items(), key=lambda kv: kv[1])
    have = cfg.rollout.max_action_tokens
    if have >= need:
        return {}
    which = "this model's tokenizer" if path else "the default model's vocabulary"
    suggest = 16 * math.ceil(need * 1.5 / 16)
    return {
        FIELD: [
            f"Max action tokens {have} cannot hold one tool call: the shortest "
            f"{tool} call, {call_text(tool, bool(path))}, is {need} tokens with "
            f"{which}, and an action cut short is no call (“unterminated tool "
            f"call”). Set it to at least {need}; {suggest} leaves room for longer "
            "arguments."
        ]
    }


def _word_tokenizer(tools: tuple[str, ...]) -> Any:
    """The default model's tokenizer as far as a call needs it: the tool names, digit
    pieces and the calculator's operators (all in the ``dataset`` environment's
    vocabulary); the argument's other words count one token each, as there."""
    return _word_tokenizer_for(tools + tuple(EXAMPLES.get(t, "x") for t in tools))


@lru_cache(maxsize=32)
def _word_tokenizer_for(words: tuple[str, ...]) -> Any:
    from trainer.tokenizer import DIGIT_PIECES, build_word_tokenizer

    # Numbers are no words there: read digit by digit (DIGIT_PIECES).
    vocab = {w for text in words for w in text.split() if not _NUMBER.fullmatch(w)}
    return build_word_tokenizer([*vocab, *DIGIT_PIECES, "+", "-", "*", "/"])


def _model_tokenizer(path: str) -> Any:
    root = Path(path)
    stamp = tuple(
        (root / name).stat().st_mtime_ns if (root / name).is_file() else 0
        for name in _TOKENIZER_FILES
    )
    return _load_tokenizer(str(root), stamp)


@lru_cache(maxsize=8)
def _load_tokenizer(path: str, stamp: tuple[int, ...]) -> Any:
    """A model directory's tokenizer (one load per directory and file times), or None
    when it has none this can read; ``stamp`` is only the cache's key."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(
            path, local_files_only=True, trust_remote_code=False
        )
    except Exception:  # not a tokenizer this can load: the run's load says why
        log.info("form advice: no tokenizer at %s", path, exc_info=True)
        return None
