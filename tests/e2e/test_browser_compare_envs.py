"""Comparing runs of different environments (issue 11, item 8): reward components are
matched by name, a component one run lacks is one row, another environment's
parameters are one row, and "no judges" against "[]" is no difference at all."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_compare_across_environments_lists_what_differs_by_name(live, page, shots, ui):
    ids = live.script(
        "from django.contrib.auth import get_user_model\n"
        "from dashboard.models import Run\n"
        "from dashboard.pages.forms import default_config\n"
        "alice = get_user_model().objects.get(username='alice')\n"
        "ids = []\n"
        "for env in ('calc', 'search', 'swarm'):\n"
        "    cfg = default_config(env)\n"
        "    cfg['reward']['judges'] = [] if env == 'calc' else cfg['reward']['judges']\n"
        "    r = Run.objects.create(name=f'cmp-{env}', owner=alice, config=cfg,\n"
        "                           status='succeeded')\n"
        "    ids.append(str(r.pk))\n"
        "print(json.dumps(ids))"
    )
    ui.login(page, live.url)
    page.goto(f"{live.url}/compare/?runs={','.join(ids)}")
    page.wait_for_selector("[data-config-diff]")
    paths = page.eval_on_selector_all(
        "[data-config-diff] tbody tr td:first-child",
        "tds => tds.map(t => t.textContent)",
    )
    assert len(paths) < 25, paths  # was about 100 rows, matched by position
    assert "reward.components.format.weight" in paths  # 0.1 vs 0.05 vs 0.05, by name
    assert "reward.components.outcome" in paths and "env.params" in paths
    assert not any(p.startswith("env.params.") for p in paths)
    assert not any(p.startswith("reward.components.1") for p in paths)
    ui.shot(page, shots, "compare_across_environments")
    page.guard.check()
