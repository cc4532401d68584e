"""The word-level tokenizer the project builds for its own environments.

Environments speak in whitespace-separated words from a small vocabulary
(:meth:`trainer.envs.base.Environment.vocabulary`), so a word-level tokenizer round-trips
every prompt, action and observation exactly and keeps the default model tiny. A word of
the vocabulary is one token; a word that is not is read as a vocabulary word followed by
``##`` continuation pieces when the vocabulary has them, else as ``<unk>``. That is how
numbers are read digit by digit (as Llama 3's and Qwen's tokenizers do), with
:data:`DIGIT_PIECES` in the vocabulary: "17" is ``1 ##7`` and decodes back to "17", so a
model copies a number by copying ten digit tokens it sees everywhere, not by learning
each number as its own word. Built with the ``tokenizers`` library and wrapped as a
``PreTrainedTokenizerFast`` so the rest of the trainer treats it like any Hugging Face
tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
# End of action: the policy writes it to hand control to the environment.
EOA = "<eoa>"
# Marks the start of an observation (tool or sub-agent output) in the context.
OBS = "<obs>"
SPECIAL_TOKENS = [PAD, UNK, BOS, EOS, EOA, OBS]
# Numbers digit by digit: a first digit (or a minus sign), then continuation pieces.
DIGIT_PIECES = [
    "-",
    *(str(d) for d in range(10)),
    *(f"##{d}" for d in range(10)),
    "##.",
]


def build_word_tokenizer(vocabulary: Iterable[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over ``vocabulary`` plus the special tokens.

    >>> tok = build_word_tokenizer(["calc", "1", "+"])
    >>> tok.decode(tok.encode("calc 1 + 1", add_special_tokens=False))
    'calc 1 + 1'
    >>> tok = build_word_tokenizer(["calc", "+", *DIGIT_PIECES])
    >>> ids = tok.encode("calc -17 + 2.5", add_special_tokens=False)
    >>> tok.convert_ids_to_tokens(ids), tok.decode(ids)
    (['calc', '-', '##1', '##7', '+', '2', '##.', '##5'], 'calc -17 + 2.5')
    """
    words = sorted(
        {w for w in vocabulary if w and not w.isspace()} - set(SPECIAL_TOKENS)
    )
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + words)}
    core = Tokenizer(
        models.WordPiece(vocab=vocab, unk_token=UNK, continuing_subword_prefix="##")
    )
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # Word-level decoding joins with single spaces, which is the environments' protocol.
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        additional_special_tokens=[EOA, OBS],
    )
