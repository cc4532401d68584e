"""The word-level tokenizer the project builds for its own environments.

Environments speak in whitespace-separated words from a small vocabulary
(:meth:`trainer.envs.base.Environment.vocabulary`), so a word-level tokenizer round-trips
every prompt, action and observation exactly and keeps the default model tiny. Built with
the ``tokenizers`` library and wrapped as a ``PreTrainedTokenizerFast`` so the rest of the
trainer treats it like any Hugging Face tokenizer.
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


def build_word_tokenizer(vocabulary: Iterable[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over ``vocabulary`` plus the special tokens.

    >>> tok = build_word_tokenizer(["calc", "1", "+"])
    >>> tok.decode(tok.encode("calc 1 + 1", add_special_tokens=False))
    'calc 1 + 1'
    """
    words = sorted(
        {w for w in vocabulary if w and not w.isspace()} - set(SPECIAL_TOKENS)
    )
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
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
