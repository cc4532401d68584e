"""Readable tokens for imported trajectories: ``--tokenizer NAME_OR_DIR``.

prime-rl's traces and miles's dumps keep token ids, not the tokenizer's pieces, so
without a tokenizer the trajectory page can only show each token by its id. Given one
(a local directory, or a model already in the Hugging Face cache: an import never
downloads), every trajectory whose segments have ids and no pieces gains them as our
own trainer sends them (:mod:`trainer.token_text`): ``tokens``, ``token_text``,
``special`` and the chat ``turns``, read over the whole trajectory at once.
"""

from __future__ import annotations

from typing import Any

from trainer.token_text import TokenTexts


def load_tokenizer(name: str) -> Any:
    """The tokenizer at ``name``, from local files only."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 (transformers raises many kinds)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc
        raise ValueError(
            f"--tokenizer {name}: no tokenizer there or in the local Hugging Face "
            f"cache (an import never downloads one): {first}"
        ) from None


class WithPieces:
    """A reader (``poll``, ``flush``, ``last_step``, ``config``) whose trajectory
    events gain their tokens' pieces and texts from ``tokenizer``."""

    def __init__(self, reader: Any, tokenizer: Any) -> None:
        self.reader = reader
        self.tokenizer = tokenizer
        self.texts = TokenTexts(tokenizer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reader, name)

    def poll(self, *, settle: bool = False) -> list[dict[str, Any]]:
        return [self.add(e) for e in self.reader.poll(settle=settle)]

    def flush(self) -> list[dict[str, Any]]:
        return [self.add(e) for e in self.reader.flush()]

    def add(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event`` with pieces on its segments (unchanged: not a trajectory, no
        token ids, or pieces already there)."""
        segments = (
            event.get("segments") or [] if event.get("type") == "trajectory" else []
        )
        ids = [int(t) for s in segments for t in s.get("token_ids") or []]
        if not ids or any(s.get("tokens") for s in segments):
            return event
        raw = self.tokenizer.convert_ids_to_tokens(ids)
        pieces = [
            p if isinstance(p, str) else f"<{i}>" for p, i in zip(raw, ids, strict=True)
        ]
        view = self.texts.view(ids, pieces)
        out, at = [], 0
        for seg in segments:
            n = len(seg.get("token_ids") or [])
            out.append({**seg, **view.segment(at, n)})
            at += n
        return {**event, "segments": out}
