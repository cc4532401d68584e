"""File names made from a user's text: letters with accents keep their letter
("café" -> "cafe", "données" -> "donnees") instead of becoming a gap, then what no
file system or shell takes as is becomes "-"."""

from __future__ import annotations

import re
import unicodedata

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def ascii_name(text: str, limit: int) -> str:
    """``text`` in ``[A-Za-z0-9_.-]``, at most ``limit`` characters, with no
    leading or trailing dot or dash ('' when nothing of it is left)."""
    plain = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in plain if not unicodedata.combining(c))
    return _UNSAFE.sub("-", plain).strip(".-")[:limit].strip(".-")
