"""Each token as the text it decodes to, for people reading a trajectory.

A tokenizer's pieces are its internals: byte-level BPE (GPT-2, Llama 3, Qwen) writes a
space as ``Ġ`` and a newline as ``Ċ``, SentencePiece writes ``▁`` and ``<0xE4>``,
WordPiece writes ``##``. :class:`TokenTexts` gives each token of a sequence the text
it adds to the decoded sequence instead, so that joining them gives the decoded text
with special tokens kept. A character whose UTF-8 bytes are split over several tokens
(``é``, ``中``, an emoji) belongs to the token that completes it; the tokens before
it read as ``""``. Bytes that never form a character read as U+FFFD, as a decoder
would show them.

It also says which tokens are special (dimmed on the page) and where a chat turn
starts: a special token followed by a role name (``<|im_start|>system``,
``<|start_header_id|>user``), the way chat templates open a message.

Byte-level and SentencePiece vocabularies are read through a table of each id's bytes,
built once; any other tokenizer through its own ``decode`` over a short window before
each token (what an incremental detokenizer does), which costs two small decodes a
token.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

ROLES = frozenset({"system", "user", "assistant", "tool", "ipython", "developer"})
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in of each byte -> the byte (``Ġ`` -> 0x20)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1)]
    keep += range(0xAE, 0xFF + 1)
    chars, extra = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


def _scheme(tokenizer: Any) -> str:
    """``byte`` (byte-level BPE), ``sentencepiece`` (``▁`` pieces) or ``decode``."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    name = type(decoder).__name__ if decoder is not None else ""
    text = repr(decoder) if decoder is not None else ""
    if name == "ByteLevel" or "ByteLevel" in text:
        return "byte"
    if "Metaspace" in text or ("Replace" in text and "▁" in text):
        return "sentencepiece"
    return "decode"


@dataclass(frozen=True)
class TokenView:
    """A sequence's tokens for the page: raw ``pieces``, readable ``texts``, the
    positions of ``special`` tokens and the ``turns`` that open there."""

    pieces: list[str]
    texts: list[str]
    special: list[int]
    turns: list[list[Any]]

    def segment(self, pos: int, n: int) -> dict[str, Any]:
        """The fields of the segment holding tokens ``pos .. pos + n - 1`` (positions
        relative to the segment)."""
        out: dict[str, Any] = {"tokens": self.pieces[pos : pos + n]}
        if self.texts:
            out["token_text"] = self.texts[pos : pos + n]
            out["special"] = [k - pos for k in self.special if pos <= k < pos + n]
            out["turns"] = [[k - pos, r] for k, r in self.turns if pos <= k < pos + n]
        return out

    @classmethod
    def of_pieces(cls, pieces: list[str]) -> TokenView:
        """Pieces alone (no tokenizer at hand): the page reads them as it can."""
        return cls(list(pieces), [], [], [])


class TokenTexts:
    """Readable per-token text for one tokenizer (built once per policy)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.special = frozenset(int(i) for i in tokenizer.all_special_ids)
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self.special |= {int(i) for i, t in added.items() if getattr(t, "special", 0)}
        self.scheme = _scheme(tokenizer)
        self._bytes: list[bytes] | None = None

    # ----- the table of bytes ---------------------------------------------------------
    def _table(self) -> list[bytes]:
        if self._bytes is None:
            n = len(self.tokenizer)
            pieces = self.tokenizer.convert_ids_to_tokens(list(range(n)))
            added = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
            self._bytes = [
                (p or "").encode() if i in added else self._piece_bytes(p or "")
                for i, p in enumerate(pieces)
            ]
        return self._bytes

    def _piece_bytes(self, piece: str) -> bytes:
        if self.scheme == "byte":
            table = _byte_decoder()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
            return piece.encode()
        m = _BYTE_PIECE.fullmatch(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        return piece.replace("▁", " ").encode()

    # ----- per sequence ---------------------------------------------------------------
    def texts(self, ids: Sequence[int]) -> list[str]:
        """Each token's text; ``"".join`` of them is the sequence decoded with its
        special tokens kept."""
        ids = [int(i) for i in ids]
        if self.scheme == "decode":
            return self._by_decode(ids)
        table, n = self._table(), len(self._table())
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        out = [utf8.decode(table[i] if 0 <= i < n else b"\xef\xbf\xbd") for i in ids]
        if out:
            out[-1] += utf8.decode(b"", final=True)
        if self.scheme == "sentencepiece" and out and out[0].startswith(" "):
            out[0] = out[0][1:]  # the decoder drops the first piece's own space
        return out

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def _by_decode(self, ids: list[int]) -> list[str]:
        # Decode from the token after the last one that showed text (``prefix``) up
        # to k, and keep what it adds past the text already shown (``read``).
        out: list[str] = []
        prefix, read = 0, 0
        for k in range(len(ids)):
            shown = self._decode(ids[prefix:read])
            upto = self._decode(ids[prefix : k + 1])
            last = k == len(ids) - 1
            if len(upto) > len(shown) and (last or not upto.endswith("\ufffd")):
                out.append(upto[len(shown) :])
                prefix, read = read, k + 1
            else:  # nothing yet, or a character the next tokens finish
                out.append("")
        return out

    def view(self, ids: Sequence[int], pieces: list[str]) -> TokenView:
        texts = self.texts(ids)
        return TokenView(
            pieces, texts, self.special_positions(ids), self.turns(ids, texts)
        )

    def special_positions(self, ids: Sequence[int]) -> list[int]:
        return [k for k, i in enumerate(ids) if int(i) in self.special]

    def turns(self, ids: Sequence[int], texts: Sequence[str]) -> list[list[Any]]:
        """``[[k, role], ...]``: token ``k`` (special) opens a message of ``role``:
        the text after it, up to a newline or the next special token, is a role name
        (a role may take several tokens: ``u`` ``ser``)."""
        out = []
        for k, i in enumerate(ids):
            if int(i) not in self.special:
                continue
            name = ""
            for j in range(k + 1, min(k + 9, len(ids))):
                if int(ids[j]) in self.special or "\n" in texts[j]:
                    break
                name += texts[j]
            if name.strip().lower() in ROLES:
                out.append([k, name.strip().lower()])
        return out
