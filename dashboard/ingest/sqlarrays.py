"""PostgreSQL array literals built in Python: one string per array, which the server
parses once, instead of the driver quoting every element (for a batch of metric
points, the driver's quoting cost more than the SQL)."""

from __future__ import annotations


def int_array_literal(values: list[int]) -> str:
    """``{1,2,3}``: a PostgreSQL array literal of integers.

    >>> int_array_literal([3, -1])
    '{3,-1}'
    """
    return "{" + ",".join(map(str, values)) + "}"


def float_array_literal(values: list[float]) -> str:
    """A PostgreSQL array literal of doubles; Python's shortest round-trip repr
    (``nan``, ``inf`` and ``-inf`` are PostgreSQL's spellings too, any case).

    >>> float_array_literal([0.1, float("nan"), float("-inf")])
    '{0.1,nan,-inf}'
    """
    return "{" + ",".join(map(repr, map(float, values))) + "}"


def text_array_literal(values: list[str]) -> str:
    r"""A PostgreSQL array literal of strings, each double-quoted with backslashes
    and quotes escaped (NUL never reaches here: ``dashboard.jsonsafe.text``).

    >>> print(text_array_literal(['a', 'say "hi"', 'c:\\d', '']))
    {"a","say \"hi\"","c:\\d",""}
    """
    return (
        "{"
        + ",".join(
            '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values
        )
        + "}"
    )
