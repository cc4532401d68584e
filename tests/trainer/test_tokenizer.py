from __future__ import annotations

from trainer.tokenizer import EOA, OBS, SPECIAL_TOKENS, build_word_tokenizer


def test_it_maps_every_vocabulary_word_to_one_token():
    tok = build_word_tokenizer(["search", "answer", "d1", "+"])
    ids = tok.encode("search d1 + answer", add_special_tokens=False)
    assert len(ids) == 4 and tok.unk_token_id not in ids


def test_it_keeps_special_tokens_first_and_unknown_words_as_unk():
    tok = build_word_tokenizer(["x", "<eoa>"])
    assert tok.convert_ids_to_tokens(list(range(len(SPECIAL_TOKENS)))) == SPECIAL_TOKENS
    assert tok.encode("zzz", add_special_tokens=False) == [tok.unk_token_id]
    assert tok.convert_tokens_to_ids(EOA) == 4 and tok.convert_tokens_to_ids(OBS) == 5


def test_it_is_deterministic_whatever_the_order_of_the_vocabulary():
    a = build_word_tokenizer(["b", "a", "c"])
    b = build_word_tokenizer(["c", "b", "a", "a"])
    assert a.get_vocab() == b.get_vocab()


def test_numbers_are_read_digit_by_digit_when_the_vocabulary_has_digit_pieces():
    from trainer.tokenizer import DIGIT_PIECES

    tok = build_word_tokenizer(["calculator", "+", "d17", *DIGIT_PIECES])
    for text in ["calculator 1234 + -56", "3.25", "d17 17"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
    assert tok.tokenize("1234") == ["1", "##2", "##3", "##4"]
    assert tok.tokenize("d17") == ["d17"]  # a vocabulary word stays one token
    # Without digit pieces a number outside the vocabulary is unknown, as before.
    assert build_word_tokenizer(["calc"]).tokenize("17") == ["<unk>"]
