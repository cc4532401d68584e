"""Compare's config differences keep a long value whole (the page cuts it, with a way
to open it: ``templates/pages/partials/config_value.html``); the new-run form's diff
still cuts a sub-tree in one cell at ``SUMMARY_LIMIT`` characters."""

from __future__ import annotations

from django.template.loader import render_to_string

from dashboard.pages import configdiff

HOSTILE = '<img src=x onerror="alert(1)">'


def _judges(*names: str) -> dict:
    rubric = [{"name": f"dimension_{i}", "weight": 1.0} for i in range(12)]
    return {"reward": {"judges": [{"name": n, "rubric": rubric} for n in names]}}


def test_compare_keeps_a_sub_tree_whole_where_diff_cuts_it():
    a, b = _judges("rules"), _judges("rules", "strict")
    (cut,) = configdiff.diff([a, b])
    assert cut.path == "reward.judges.strict"
    assert len(cut.values[1]) == configdiff.SUMMARY_LIMIT
    assert cut.values[1].endswith("\u2026")
    (whole,) = configdiff.compare([a, b]).rows
    assert len(whole.values[1]) > configdiff.SUMMARY_LIMIT
    assert whole.values[1].startswith(cut.values[1][:-1])
    assert whole.values[1].endswith("rubric.dimension_11.weight=1.0")


def test_a_long_value_opens_whole_and_stays_text():
    long = "word " * 40 + HOSTILE
    html = render_to_string("pages/partials/config_value.html", {"v": long})
    assert html.count("<details") == 1 and "<img" not in html
    escaped = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
    assert f'title="{"word " * 40}{escaped}"' in html  # the whole value, escaped
    assert html.count(escaped) == 2  # in the title and the opened box, not the start
    short = render_to_string("pages/partials/config_value.html", {"v": HOSTILE})
    assert "<details" not in short and "&lt;img" in short and "<img" not in short
