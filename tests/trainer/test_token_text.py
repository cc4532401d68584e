"""Tokens as people read them (issue 22.7): each token's text, not the tokenizer's
pieces (``Ġ``, ``Ċ``, ``##``), a character split over tokens on the token completing
it, special tokens and chat turns named, and all of it in a chat run's events."""

from __future__ import annotations

import json

import pytest
from chatmodel import build_chat_model
from transformers import AutoTokenizer

from trainer.config import ModelConfig, TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.policy import Policy
from trainer.runner import run_from_config
from trainer.token_text import TokenTexts

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "café 中文 😀 what is 7 + 5 ?\n\tthanks"},
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_chat_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def tok(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def _chat_ids(tok):
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


def test_byte_level_tokens_read_as_their_text(tok):
    ids = _chat_ids(tok)
    pieces = tok.convert_ids_to_tokens(ids)
    assert any("Ġ" in p or "Ċ" in p for p in pieces)  # the tokenizer's internals
    texts = TokenTexts(tok).texts(ids)
    assert len(texts) == len(ids)
    assert "".join(texts) == tok.decode(ids, skip_special_tokens=False)
    assert not any(c in t for t in texts for c in "ĠĊĉ")
    assert "\n" in texts and any(t.startswith(" ") for t in texts)


def test_a_character_split_over_tokens_shows_on_the_token_completing_it(tok):
    for char in ("é", "中", "😀"):
        ids = tok.encode(char, add_special_tokens=False)
        assert len(ids) > 1, f"{char} is one token in this vocabulary"
        texts = TokenTexts(tok).texts(ids)
        assert texts == [""] * (len(ids) - 1) + [char]


def test_bytes_that_never_form_a_character_read_as_the_replacement(tok):
    first_of_e_acute = tok.encode("é", add_special_tokens=False)[:-1]
    space = tok.encode(" ", add_special_tokens=False)
    texts = TokenTexts(tok).texts([*first_of_e_acute, *space])
    assert "".join(texts) == "\ufffd "


def test_special_tokens_and_the_turns_they_open(tok):
    ids = _chat_ids(tok)
    tt = TokenTexts(tok)
    texts = tt.texts(ids)
    special = tt.special_positions(ids)
    assert {texts[k] for k in special} == {"<|im_start|>", "<|im_end|>"}
    turns = tt.turns(ids, texts)
    assert [role for _, role in turns] == ["system", "user", "assistant"]
    assert all(texts[k] == "<|im_start|>" for k, _ in turns)


def test_the_built_in_word_pieces_read_as_words_and_digits_join():
    env = make_env("dataset", {"path": _arith(), "holdout": 0.0})
    policy = Policy.build(ModelConfig(size="tiny", device="cpu"), env.vocabulary())
    ids = policy.encode("what is 17 + 5 ?")
    assert "##7" in policy.tokens(ids)
    texts = policy.token_view(ids).texts
    assert "".join(texts) == "what is 17 + 5 ?"
    assert "7" in texts and not any("##" in t for t in texts)


def _arith(tmp=[]):  # noqa: B006 (one file for the module)
    import tempfile
    from pathlib import Path

    if not tmp:
        p = Path(tempfile.mkdtemp()) / "arith.jsonl"
        p.write_text(json.dumps({"prompt": "what is 17 + 5 ?", "answer": "22"}) + "\n")
        tmp.append(str(p))
    return tmp[0]


def test_a_chat_runs_events_carry_readable_tokens_special_tokens_and_turns(
    model_dir, tmp_path
):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "what is 7 + 5 ?", "answer": "12"}) + "\n")
    cfg = TrainConfig.model_validate(
        {
            "steps": 1,
            "model": {"path": str(model_dir)},
            "env": {
                "name": "dataset",
                "params": {"path": str(data), "tools": ["calculator"], "holdout": 0.0},
            },
            "rollout": {"tasks_per_step": 1, "group_size": 2, "max_action_tokens": 6},
            "reward": {"components": [{"name": "numeric_match", "weight": 1.0}]},
        }
    )
    sink = ListSink()
    assert run_from_config(cfg, sink).status == "succeeded"
    (ev, *_) = sink.of_type("trajectory")
    prompt = ev["segments"][0]
    assert len(prompt["token_text"]) == len(prompt["tokens"])
    assert "".join(prompt["token_text"]) == prompt["text"]
    assert not any("Ġ" in t or "Ċ" in t for t in prompt["token_text"])
    assert [r for _, r in prompt["turns"]] == ["system", "user", "assistant"]
    assert prompt["token_text"][prompt["special"][0]] == "<|im_start|>"
    for seg in ev["segments"][1:]:  # positions are the segment's own
        assert all(0 <= k < len(seg["tokens"]) for k in seg["special"])
