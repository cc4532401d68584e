"""A number as a person typed it in the new-run form: the one rule the page's script
(``static/js/run_form.js``) and the server both apply."""

from __future__ import annotations

import math
import re

# What the form accepts as a number: plain decimal, optional exponent. Python's float()
# also takes "1_0", "inf" or " 1", which a person would not read as that number;
# static/js/run_form.js applies the same rule as the user types.
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_INT = re.compile(r"^[+-]?\d+$")


MAX_DIGITS = 18  # a whole number's digits: more than any field's bound


def number_problem(raw: str, kind: str, words: tuple[str, ...] = ()) -> str | None:
    """Why ``raw`` (already stripped) is not a number of ``kind`` (int/float), nor one
    of ``words``, or None.

    The message names the text as typed so that nothing is silently replaced."""
    if raw in words:
        return None
    shown = raw if len(raw) <= 40 else f"{raw[:20]}\u2026"  # never the whole of it
    if kind == "int":
        if _INT.match(raw):
            # Python will not read an int of over 4,300 digits; no field wants 19.
            if len(raw.lstrip("+-")) > MAX_DIGITS:
                return f"\u201c{shown}\u201d is too large ({MAX_DIGITS} digits at most)"
            return None
        alt = "".join(f" or \u201c{w}\u201d" for w in words)
        return f"\u201c{shown}\u201d is not a whole number{alt}"
    if not _FLOAT.match(raw):
        return f"\u201c{shown}\u201d is not a number"
    if not math.isfinite(float(raw)):
        return f"\u201c{shown}\u201d is too large to be a number"
    return None
