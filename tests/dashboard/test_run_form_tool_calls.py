"""The new-run form's advice on ``rollout.max_action_tokens`` with tools on: an action
cut before its tool call ends is no call, so a limit shorter than one call is named,
with the call's length under the chosen tokenizer and a value that fits (a warning:
the configuration stays valid)."""

from __future__ import annotations

import json

import pytest
from chatmodels import build_chat_model

from dashboard.pages import form_advice
from trainer.config import TrainConfig

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "1 + 13"}}</tool_call>'


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    return build_chat_model(tmp_path_factory.mktemp("models"))


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "what is 1 + 13 ?", "answer": "14"}) + "\n")
    return path


def config(rows, *, tools=("calculator",), path=None, max_action_tokens=12):
    return TrainConfig.model_validate(
        {
            "env": {
                "name": "dataset",
                "params": {"path": str(rows), "tools": list(tools), "holdout": 0},
            },
            "model": {"path": str(path) if path else None},
            "rollout": {"max_action_tokens": max_action_tokens},
        }
    )


def test_the_call_is_the_one_the_system_prompt_teaches():
    from trainer.envs.dataset import default_system_prompt
    from trainer.envs.tools import parse_action

    assert form_advice.call_text("calculator", chat=True) == CALL
    assert "<tool_call>" in default_system_prompt(["calculator"])
    parsed = parse_action(CALL, ["calculator"])
    assert (parsed.kind, parsed.name) == ("call", "calculator")
    word = form_advice.call_text("calculator", chat=False)
    assert parse_action(word, ["calculator"]).arguments == {"expression": "1 + 13"}


def test_a_chat_model_whose_call_does_not_fit_the_default_gets_a_warning(
    chat_model, rows
):
    from transformers import AutoTokenizer

    need = len(
        AutoTokenizer.from_pretrained(chat_model).encode(CALL, add_special_tokens=False)
    )
    assert need > 12
    out = form_advice.warnings(config(rows, path=chat_model))
    assert list(out) == ["rollout.max_action_tokens"]
    (message,) = out["rollout.max_action_tokens"]
    assert f"is {need} tokens with this model's tokenizer" in message
    assert "Max action tokens 12 cannot hold one tool call" in message
    assert f"at least {need};" in message
    # Enough room: no warning; one short of the call: the warning again.
    assert (
        form_advice.warnings(config(rows, path=chat_model, max_action_tokens=need))
        == {}
    )
    short = config(rows, path=chat_model, max_action_tokens=need - 1)
    assert "rollout.max_action_tokens" in form_advice.warnings(short)


def test_no_tools_no_warning_and_the_default_model_fits_its_word_form(chat_model, rows):
    assert form_advice.warnings(config(rows, tools=(), path=chat_model)) == {}
    # The default model writes "calculator 1 + 13": 5 words and digit pieces.
    assert form_advice.warnings(config(rows)) == {}
    out = form_advice.warnings(config(rows, max_action_tokens=4))
    assert (
        "is 5 tokens with the default model's vocabulary"
        in out["rollout.max_action_tokens"][0]
    )


def test_a_directory_s_tokenizer_is_loaded_once(chat_model, rows, monkeypatch):
    import transformers

    form_advice._load_tokenizer.cache_clear()
    loads = []
    real = transformers.AutoTokenizer.from_pretrained

    def counting(*args, **kwargs):
        loads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", counting)
    for _ in range(3):
        form_advice.warnings(config(rows, path=chat_model))
    assert loads == [str(chat_model)]


def test_a_directory_without_a_tokenizer_gives_no_advice_and_no_error(tmp_path, rows):
    (tmp_path / "empty").mkdir()
    assert form_advice.warnings(config(rows, path=tmp_path / "empty")) == {}
