"""File names made from a user's text: letters with accents keep their letter
("café" -> "cafe", "données" -> "donnees") instead of becoming a gap, then what no
file system or shell takes as is becomes "-"; a name with nothing left of it
("数学") is for the caller to name otherwise (:func:`meaningful`)."""

from __future__ import annotations

import re
import unicodedata

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# A gap beside other separators ("problèmes_数学 été": "problemes_-ete") is one dash.
_GAP = re.compile(r"[_.-]*-[_.-]*")


def ascii_name(text: str, limit: int) -> str:
    """``text`` in ``[A-Za-z0-9_.-]``, at most ``limit`` characters, with no
    leading or trailing dot or dash, no run of separators around a dash ('' when
    nothing of it is left)."""
    plain = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in plain if not unicodedata.combining(c))
    plain = _GAP.sub("-", _UNSAFE.sub("-", plain)).strip(".-")
    return plain[:limit].strip(".-")


def meaningful(name: str) -> bool:
    """Whether an :func:`ascii_name` still names something: a letter or a digit."""
    return any(c.isascii() and c.isalnum() for c in name)
