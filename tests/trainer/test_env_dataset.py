"""The dataset environment: reading files, the held-out split, tools and tool calls."""

from __future__ import annotations

import json
import random

import pytest

from trainer.config import TrainConfig, format_errors
from trainer.envs.base import make_env
from trainer.envs.dataset_files import DatasetError, read_rows
from trainer.envs.tools import ToolError, calculate, parse_action

CALL = (
    '<tool_call>{"name": "calculator", "arguments": {"expression": "%s"}}</tool_call>'
)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def arith(tmp_path):
    rows = [{"prompt": f"what is {i} + 3 ?", "answer": str(i + 3)} for i in range(20)]
    return _jsonl(tmp_path / "arith.jsonl", rows)


def test_the_first_bad_jsonl_line_is_reported_with_its_number(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(
        '{"prompt": "a", "answer": "1"}\n\n{"prompt": "b", "answer": 2}\n{oops\n'
    )
    with pytest.raises(DatasetError, match=r"^path: line 4 is not valid JSON"):
        read_rows(str(p))
    p.write_text('{"prompt": "a", "answer": "1"}\n{"question": "b", "answer": "2"}\n')
    with pytest.raises(
        DatasetError,
        match=r"^prompt_key: line 2 has no 'prompt' field \(its fields: question, answer\)$",
    ):
        read_rows(str(p))
    # Text Python cannot hold as a number or as text: refused with the line.
    p.write_text(
        '{"prompt": "a", "answer": 1}\n{"prompt": "b", "answer": ' + "9" * 5000 + "}\n"
    )
    with pytest.raises(
        DatasetError, match=r"^path: line 2 is not valid JSON \(Exceeds"
    ):
        read_rows(str(p))
    p.write_text(
        '{"prompt": "a", "answer": "1"}\n{"prompt": "\\ud800", "answer": "x"}\n'
    )
    with pytest.raises(
        DatasetError, match=r"^path: line 2 has a lone surrogate escape"
    ):
        read_rows(str(p))
    p.write_text(
        '{"prompt": "\\ud83d\\ude00 \\\\ud800", "answer": "x"}\n'
    )  # a pair; "\\ud800" as text
    assert read_rows(str(p))[0].prompt == "\U0001f600 \\ud800"


def test_it_reads_csv_with_configured_field_names_and_chat_message_prompts(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text('q,a\nhow many ?,4\n"two, words",5\n', encoding="utf-8")
    rows = read_rows(str(p), prompt_key="q", answer_key="a")
    assert [(r.line, r.prompt, r.answer) for r in rows] == [
        (2, "how many ?", "4"),
        (3, "two, words", "5"),
    ]
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    rows = read_rows(str(_jsonl(tmp_path / "m.jsonl", [{"prompt": msgs, "answer": 1}])))
    assert rows[0].prompt == "hi" and rows[0].messages == tuple(msgs)
    bad = [{"prompt": [{"role": "robot", "content": "x"}], "answer": "1"}]
    with pytest.raises(DatasetError, match="line 1: message 0 needs a role"):
        read_rows(str(_jsonl(tmp_path / "b.jsonl", bad)))


def test_parquet_without_pyarrow_is_a_clear_error_naming_the_field(tmp_path):
    pytest.importorskip  # noqa: B018  (documented: pyarrow is optional)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        p = tmp_path / "d.parquet"
        p.write_bytes(b"PAR1")
        with pytest.raises(DatasetError, match="^format: reading Parquet needs"):
            read_rows(str(p))
    else:
        pytest.skip("pyarrow is installed")


def test_the_held_out_split_is_deterministic_by_seed_and_disjoint(arith):
    train = make_env("dataset", {"path": str(arith), "holdout": 0.25}, seed=3)
    again = make_env("dataset", {"path": str(arith), "holdout": 0.25}, seed=3)
    other = make_env("dataset", {"path": str(arith), "holdout": 0.25}, seed=4)
    test_ids = {r.id for r in train.split_rows("test")}
    assert len(test_ids) == 5 and len(train.split_rows("train")) == 15
    assert test_ids.isdisjoint(r.id for r in train.split_rows("train"))
    assert test_ids == {r.id for r in again.split_rows("test")}
    assert test_ids != {r.id for r in other.split_rows("test")}
    held = make_env(
        "dataset", {"path": str(arith), "holdout": 0.25, "split": "test"}, seed=3
    )
    drawn = held.sample_tasks(30, random.Random(0))
    assert {t.id for t in drawn} <= test_ids


def test_a_steps_tasks_are_distinct_rows_while_the_split_has_rows_left(arith):
    """Drawn with replacement, a step of 4 groups on a 60-row dataset held one
    row twice in about one step in 10 (a newcomer's step 5: groups 0 and 2 both
    jsonl-9); 30 draws on 15 rows are two shuffled passes."""
    env = make_env("dataset", {"path": str(arith), "holdout": 0.25}, seed=3)
    rng = random.Random(0)
    for _ in range(200):
        ids = [t.id for t in env.sample_tasks(8, rng)]
        assert len(set(ids)) == 8
    ids = [t.id for t in env.sample_tasks(30, rng)]
    assert len(set(ids[:15])) == 15 and len(set(ids[15:])) == 15
    assert set(ids[:15]) == {r.id for r in env.split_rows("train")}


def test_the_config_names_the_dataset_fields():
    with pytest.raises(Exception) as exc:
        TrainConfig.model_validate({"env": {"name": "dataset", "params": {}}})
    assert format_errors(exc.value) == ["env.dataset.params.path: Field required"]
    with pytest.raises(Exception) as exc:
        TrainConfig.model_validate(
            {"env": {"name": "dataset", "params": {"path": "x", "tools": ["search"]}}}
        )
    assert "corpus_path: the search tool needs a corpus file" in str(exc.value)


def test_a_tool_call_runs_and_the_first_plain_action_is_the_answer(arith):
    env = make_env("dataset", {"path": str(arith), "tools": ["calculator"]})
    task = env.sample_tasks(1, random.Random(0))[0]
    assert task.messages[0]["role"] == "system"
    assert "<tool_call>" in task.messages[0]["content"]
    sess = env.start(task)
    r = sess.step(CALL % "12 * 3")
    assert (r.observation, r.done, r.facts.ok, r.facts.tool) == (
        "36",
        False,
        True,
        "calculator",
    )
    assert r.facts.facts["call"] == {
        "name": "calculator",
        "arguments": {"expression": "12 * 3"},
    }
    r = sess.step("calculator 2 + 2")  # the word form of a word-level model
    assert r.observation == "4" and r.facts.ok
    r = sess.step(f"it is {task.payload['answer']}")
    assert r.done and r.facts.tool == "answer"
    ep = sess.episode(truncated=False)
    assert ep.facts["answer"] == f"it is {task.payload['answer']}"
    assert (
        ep.facts["reference"] == task.payload["answer"] and ep.facts["tool_calls"] == 2
    )


@pytest.mark.parametrize(
    ("action", "error"),
    [
        ("<tool_call>{not json</tool_call>", "tool call is not valid JSON"),
        ('<tool_call>{"name": "calculator"', "unterminated tool call"),
        ('<tool_call>["calculator"]</tool_call>', 'needs {"name"'),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown tool 'rm'"),
        ('<tool_call>{"name": "calculator", "arguments": 3}</tool_call>', "object"),
        (CALL % "__import__(1)", "only numbers"),
        (CALL % "1 / 0", "division by zero"),
        (CALL % "10 ** 16", "result too large"),
        (CALL % "9 ** 9 ** 9", "exponent must be a whole number"),
    ],
)
def test_malformed_calls_get_a_clear_observation_and_the_episode_goes_on(
    arith, action, error
):
    env = make_env("dataset", {"path": str(arith), "tools": ["calculator"]})
    sess = env.start(env.sample_tasks(1, random.Random(0))[0])
    r = sess.step(action)
    assert not r.done and not r.facts.ok
    assert r.observation.startswith("error: ") and error in r.observation


def test_the_episode_ends_after_max_turns_without_an_answer(arith):
    env = make_env(
        "dataset", {"path": str(arith), "tools": ["calculator"], "max_turns": 2}
    )
    sess = env.start(env.sample_tasks(1, random.Random(0))[0])
    assert not sess.step(CALL % "1 + 1").done
    assert sess.step(CALL % "1 + 2").done
    assert sess.episode(truncated=False).facts["answer"] is None


def test_calculator_is_exact_and_refuses_everything_but_arithmetic():
    assert calculate("(2 + 3) * 4 - 1") == "19"
    assert calculate("7 / 2") == "3.5" and calculate("-3 ^ 2") == "-9"
    for bad in ("a + 1", "open('x')", "1 +", "2 ** 0.5"):
        with pytest.raises(ToolError):
            calculate(bad)
    assert parse_action("12", ["calculator"]).kind == "answer"


def test_search_tool_answers_from_the_corpus_file(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("paris is the capital of france\nberlin is in germany\n")
    data = _jsonl(
        tmp_path / "q.jsonl", [{"prompt": "capital of france?", "answer": "paris"}]
    )
    env = make_env(
        "dataset",
        {
            "path": str(data),
            "tools": ["search"],
            "corpus_path": str(corpus),
            "top_k": 1,
        },
    )
    sess = env.start(env.sample_tasks(1, random.Random(0))[0])
    r = sess.step(
        '<tool_call>{"name": "search", "arguments": {"query": "France capital"}}</tool_call>'
    )
    assert r.facts.ok and r.observation == "[d1] paris is the capital of france"


def test_a_word_level_model_reads_and_writes_any_number_digit_by_digit(arith):
    from trainer.tokenizer import build_word_tokenizer

    env = make_env("dataset", {"path": str(arith), "tools": ["calculator"]})
    assert not any(w.isdigit() and len(w) > 1 for w in env.vocabulary())
    tok = build_word_tokenizer(env.vocabulary())
    for text in ["what is 17 + 3 ?", "calculator 98765 * -4", "-395060", "0.5"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.unk_token_id not in ids and tok.decode(ids) == text


def test_numbers_stuck_to_punctuation_are_read_digit_by_digit_too(tmp_path):
    # GSM8K-style text: "19?" was one opaque word of the vocabulary.
    from trainer.tokenizer import build_word_tokenizer

    rows = [
        {"prompt": "What is 10 plus 19? Tom paid $5, then 3.5% more.", "answer": "29."},
        {"prompt": "Is H2O (water) 2x heavier?", "answer": "-7?"},
    ]
    env = make_env("dataset", {"path": str(_jsonl(tmp_path / "d.jsonl", rows))})
    assert not any(any(c.isdigit() for c in w) for w in env.vocabulary() if len(w) > 1
                   and not w.startswith("##"))  # fmt: skip
    tok = build_word_tokenizer(env.vocabulary())
    for row in rows:
        for text in (row["prompt"], row["answer"]):
            ids = tok.encode(text, add_special_tokens=False)
            assert tok.unk_token_id not in ids and tok.decode(ids) == text
    pieces = tok.convert_ids_to_tokens(
        tok.encode("19? $5, 29.", add_special_tokens=False)
    )
    assert pieces == ["1", "##9", "##?", "$", "##5", "##,", "2", "##9", "##."]
    # Any number in that company, not only the dataset's own.
    ids = tok.encode("$731, 46?", add_special_tokens=False)
    assert tok.unk_token_id not in ids and tok.decode(ids) == "$731, 46?"


def test_digits_other_than_ascii_stay_in_their_words(tmp_path):
    # Only 0-9 have digit pieces: a fullwidth, Arabic-Indic or superscript digit is
    # text (split out, a word of them became <unk>).
    from trainer.tokenizer import build_word_tokenizer

    words = ["٣?", "１２個", "有５个苹果，", "2²", "x2²", "①"]
    rows = [{"prompt": " ".join(words), "answer": "1"}]
    env = make_env("dataset", {"path": str(_jsonl(tmp_path / "d.jsonl", rows))})
    tok = build_word_tokenizer(env.vocabulary())
    for word in words:
        ids = tok.encode(word, add_special_tokens=False)
        assert tok.unk_token_id not in ids and tok.decode(ids) == word, word
