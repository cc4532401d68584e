"""An imported prime-rl run in a real browser (issue 20): the trainer's own per-token
arrays (mismatch_kl, is_masked...) colour the tokens from the colour-by selector and
show in the token tooltip, DPPO-masked tokens say why, and a branched trace reads
branch by branch."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

IMPORT = """
import tempfile
from pathlib import Path
from django.contrib.auth import get_user_model
from dashboard.ingest import writer
from dashboard.runs import external
from tests.fixtures import layouts
from trainer.importers.primerl import PrimeRlReader

tmp = Path(tempfile.mkdtemp())
layouts.prime_run(tmp, step=1)
layouts.prime_branched_run(tmp, step=2)
events = PrimeRlReader(tmp).poll()
alice = get_user_model().objects.get(username="alice")
run = external.do_create_external_run(alice, name="prime-rl", framework="prime-rl")
writer.store(run.pk, [e for e in events if e["type"] == "trajectory"])
print(json.dumps({"run": str(run.pk)}))
"""


def test_tokens_colour_by_the_trainers_own_arrays(scripted_live, page, shots, ui):
    run = scripted_live.script(IMPORT)["run"]
    ui.login(page, scripted_live.url)
    page.goto(f"{scripted_live.url}/runs/{run}/trajectories/1/0/0/")
    page.wait_for_selector("[data-heat] span[data-t]")
    answer = page.locator("[data-heat='1'] span[data-t]")
    # Imported without --tokenizer: the tokens are shown by id, the text kept.
    assert answer.all_inner_texts() == ["#4", " #5"]
    assert "import with --tokenizer" in page.text_content("[data-heat-status]")
    bins = "ss => ss.map(s => s.className.split(' ')[0])"
    # By advantage both answer tokens carry 0.5: the same colour (the second one
    # also marked as left out of the loss).
    assert answer.evaluate_all(bins) == ["hb-p10", "hb-p10"]
    assert answer.nth(1).evaluate("s => s.classList.contains('tm')")
    page.select_option("[data-colour-by]", "series:mismatch_kl")
    # 0.03 and 0.02 on a scale of 0.03: bins 10 and 7.
    assert answer.evaluate_all(bins) == ["hb-p10", "hb-p7"]
    # Every value at or above 0: the legend is one-sided, as for entropy; log-probs
    # are never above 0 (a walk read "±9.5" and "±1.25" on a symmetric bar).
    side = "document.querySelector('[data-heat-legend]').dataset.side"
    shown = (
        "[...document.querySelectorAll('[data-heat-legend] > span')]"
        ".filter(s => s.offsetWidth > 0).map(s => s.className)"
    )
    assert page.text_content("[data-heat-scale]") == "0 … 0.03"
    assert page.evaluate(side) == "pos"
    assert page.evaluate(shown) == [
        "hb-0",
        "hb-p2",
        "hb-p4",
        "hb-p6",
        "hb-p8",
        "hb-p10",
    ]
    page.select_option("[data-colour-by]", "entropy")
    assert page.text_content("[data-heat-scale]") == "0 … 1.5"
    page.select_option("[data-colour-by]", "logprob")
    # (-0.75 is the masked token's: left out of the loss, out of the scale)
    assert page.text_content("[data-heat-scale]") == "−0.25 … 0"
    assert page.evaluate(side) == "neg" and page.evaluate(shown)[-1] == "hb-0"
    page.select_option("[data-colour-by]", "series:mismatch_kl")
    answer.nth(1).hover()
    tip = page.locator("[data-tooltip]").inner_text()
    assert "mismatch_kl" in tip and "log_importance_ratio" in tip
    assert "prime-rl's DPPO trust region" in tip  # why it was left out
    ui.shot(page, shots, "series_mismatch_kl")

    page.goto(f"{scripted_live.url}/runs/{run}/trajectories/2/0/0/")
    page.wait_for_selector("[data-heat] span[data-t]")
    fork = page.locator("[data-branch-fork]")
    assert fork.count() == 1 and "shares the first 3 messages of branch 0" in (
        fork.inner_text()
    )
    assert page.locator("[data-seg-branch]").all_text_contents()[-1] == "branch 1"
    ui.shot(page, shots, "series_branches")
