"""The compare page's picker: ``/compare/`` with no runs chosen (the menu's
"Compare"), or with fewer than 2 or more than 8, lists the user's recent runs to tick,
as the runs list does (``templates/pages/partials/run_row.html`` and its compare
boxes, ``static/js/runs_list.js``): name, status, progress, reward, latest reward,
algorithm, environment; those already chosen ticked. More are on the runs list.
"""

from __future__ import annotations

from typing import Any

from dashboard.pages.views import COMPARE_MAX, COMPARE_MIN, run_info, with_waiting
from dashboard.reads import runs as run_reads
from dashboard.reads import sparklines
from dashboard.runs import services

PICK = 20  # the newest runs offered; the runs list has the rest


def message(ids: list[str]) -> str:
    """What the page asks for: the runs to tick, or why the ones asked for were not
    compared."""
    if not ids:
        return (
            f"Pick between {COMPARE_MIN} and {COMPARE_MAX} runs to compare: tick "
            "them below, then “Compare selected”."
        )
    return (
        f"Pick between {COMPARE_MIN} and {COMPARE_MAX} runs to compare "
        f"(got {len(ids)})."
    )


def picker(user: Any, ids: list[str]) -> dict[str, Any]:
    """The picker's context: its rows (``(run, info, sparkline)``, newest first, as
    the runs list's), how many runs the user may pick from, and the ids already
    chosen (their boxes ticked)."""
    runs = run_reads.filter_runs(services.visible_runs(user), {})
    rows = with_waiting(list(runs[:PICK]))
    sparks = sparklines.sparklines(rows)
    return {
        "pick_rows": [(r, run_info(r), sparks.get(r.pk, "")) for r in rows],
        "pick_total": runs.count() if len(rows) == PICK else len(rows),
        "chosen": ids[:100],  # a box is ticked when its run's id is among these
    }
