"""What a newcomer walking the app read wrong, in Chromium:

1. a trajectory headed "Step 20 · group 0 · rollout 1" (a training step) labelled
   the agent's turns "Step 0", "Step 1", "Step 2": they are turns now, as the page's
   "3 turns" says;
2. the colour menu said "sampler log-prob" where the token tooltip said "old
   logprob" for the same numbers: one name each, in the menu, the tooltip and the
   legend's title;
3. the run page of a run before step 1 (queued, warming up, ended in its warm start)
   showed a dozen empty chart cards ~400 px tall, each repeating one sentence: one
   notice says it instead, kept current, and the charts come back with the first
   step as a reload shows them;
4. stray spaces: "Compare selected ( 0 )", "prompt field prompt , answer field", and
   the new-run name's placeholder cut in its box ("calc-grpo-N (blank: name")."""

from __future__ import annotations

import json
import re

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SEED = """
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from dashboard.library import datasets
from dashboard.models import Run, RunStatus
from tests.fixtures.seed import seed_run, valid_config
alice = get_user_model().objects.get(username='alice')
calc = seed_run(alice, name='walk labels calc', env='calc', preset='grpo', steps=2,
                groups=1, group_size=2, alert_every=0)
cfg = valid_config('calc', 'grpo', 200, name='warm cancelled')
cfg['model']['warmstart_steps'] = 500
warm = Run.objects.create(owner=alice, name='warm <b>cancelled</b>', config=cfg,
                          status=RunStatus.CANCELLED, warmup={'done': 9, 'of': 500})
queued = Run.objects.create(owner=alice, name='queued then cancelled',
                            config=valid_config('calc', 'grpo', 200, name='q'),
                            status=RunStatus.CANCELLED)
waiting = Run.objects.create(owner=alice, name='queued <i>run</i>',
                             config=valid_config('calc', 'grpo', 200, name='w'))
rows = b'{"prompt": "What is 1 + 1?", "answer": "2"}\\n' * 3
ds = datasets.do_upload_dataset(alice, SimpleUploadedFile('walk.jsonl', rows))
print(json.dumps({'calc': str(calc.pk), 'warm': str(warm.pk),
                  'queued': str(queued.pk), 'waiting': str(waiting.pk),
                  'dataset': str(ds.pk)}))
"""


@pytest.fixture(scope="module")
def seeded(live):
    return live.script(SEED)


# --- 1 and 2: the trajectory page -------------------------------------------------

TIP = """() => Object.fromEntries([...document.querySelectorAll('[data-tooltip] dt')]
  .map(dt => [dt.textContent, dt.nextElementSibling.textContent]))"""


def test_turns_are_turns_and_each_quantity_has_one_name(
    live, browser, seeded, ui, shots
):
    with ui.signed_in(browser, live, 1400) as page:
        page.goto(f"{live.url}/runs/{seeded['calc']}/trajectories/2/0/0/")
        ui.until(page, "document.body.dataset.heatTokens !== undefined")
        assert page.inner_text("h1") == "Step 2 · group 0 · rollout 0"
        labels = page.locator("[data-agent-step] .step-head > strong").all_inner_texts()
        assert labels == [f"Turn {i}" for i in range(len(labels))] and labels
        heads = " ".join(page.locator(".step-head").all_inner_texts())
        assert not re.search(r"\bStep \d", heads) and "step reward" not in heads
        assert "Σ turns" in page.inner_text("[data-attribution]")
        # Every colour choice: the tooltip names each quantity as the menu does, and
        # the legend's title names what the tokens are coloured by.
        options = page.evaluate(
            "() => [...document.querySelectorAll('[data-colour-by] > option')]"
            ".map(o => [o.value, o.textContent])"
        )
        assert dict(options)["old_logprob"] == "sampler log-prob"
        token = page.locator(".seg.kind-action [data-heat] span[data-t]").first
        for value, text in options:
            page.select_option("[data-colour-by]", value)
            title = page.get_attribute("[data-heat-scale]", "title")
            assert title.startswith(f"{text}: "), (value, title)
            assert page.get_attribute("[data-heat-legend]", "title") == title
            token.hover()
            page.locator("[data-tooltip]").wait_for(state="visible")
            tip = page.evaluate(TIP)
            # ratio − 1 colours by the ratio the tooltip shows
            shown = "ratio" if value == "ratio" else text
            assert shown in tip, (value, text, list(tip))
            page.mouse.move(0, 0)
        page.select_option("[data-colour-by]", "old_logprob")
        token.hover()
        page.locator("[data-tooltip]").wait_for(state="visible")
        tip = page.evaluate(TIP)
        assert "old logprob" not in tip and "logprob" not in tip, list(tip)
        assert {"learner log-prob", "sampler log-prob"} <= set(tip), list(tip)
        ui.shot(page, shots, "walk_trajectory_turns", full=False)


# --- 3: the run page before step 1 ------------------------------------------------

STATE = """() => {
  const n = document.querySelector('[data-charts-waiting]');
  const grid = document.querySelector('[data-charts]');
  return {notice: n && !n.hidden ? n.textContent : null,
          noticeHeight: n ? n.getBoundingClientRect().height : 0,
          grid: !!grid && grid.getClientRects().length > 0,
          tools: document.querySelector('[data-chart-tools]').getClientRects().length > 0,
          charts: document.querySelectorAll('[data-chart]').length,
          points: Math.max(0, ...[...document.querySelectorAll('[data-chart]')]
            .map(c => Number(c.dataset.points || 0)))};
}"""


def _state(page) -> dict:
    return page.evaluate(STATE)


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("warm", "Stopped at warm start 9 of 500 (cancelled): no RL step ran, so "
                 "nothing was charted."),
        ("queued", "Stopped before step 1 (cancelled): no RL step ran, so nothing "
                   "was charted."),
        ("waiting", "Queued: charts begin at step 1, once the run starts."),
    ],
)  # fmt: skip
def test_a_run_without_a_step_shows_one_notice_not_a_dozen_empty_charts(
    live, browser, seeded, ui, shots, key, text
):
    with ui.signed_in(browser, live, 1400) as page:
        page.goto(f"{live.url}/runs/{seeded[key]}/")
        ui.until(page, "document.body.dataset.chartsReady === '1'")
        got = _state(page)
        assert got["notice"] == text, got
        assert not got["grid"] and not got["tools"], got
        assert got["noticeHeight"] < 120, got
        # The charts are in the page still (hidden): scripts and tests find them.
        assert got["charts"] >= 10, got
        assert page.locator("img[src=x], h1 b, h1 i").count() == 0
        ui.shot(page, shots, f"walk_before_step_1_{key}", full=False)


def test_the_warm_start_notice_follows_live(live, page, ui, shots):
    """An external run reporting its warm start: the notice counts along."""
    token = ui.new_token(page, live.url)  # signed in as a user does
    http = httpx.Client(
        base_url=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    r = http.post("/api/runs/external", json={"name": "warming <b>up</b>"})
    assert r.status_code == 201, r.text
    run = r.json()["id"]

    def send(*events):
        body = "".join(json.dumps(e) + "\n" for e in events)
        r = http.post(f"/api/runs/{run}/events", content=body)
        assert r.status_code == 200, r.text

    send({"type": "warmstart", "done": 16, "of": 300, "loss": 1.5})
    page.goto(f"{live.url}/runs/{run}/")
    ui.until(page, "document.body.dataset.live === 'live'")
    got = _state(page)
    assert got["notice"] == "Warm start 16 of 300: charts begin at step 1.", got
    assert not got["grid"], got
    ui.shot(page, shots, "walk_warm_start_notice", full=False)
    send({"type": "warmstart", "done": 120, "of": 300, "loss": 1.2})
    ui.until(
        page,
        "document.querySelector('[data-charts-waiting]').textContent"
        " === 'Warm start 120 of 300: charts begin at step 1.'",
        15,
    )
    assert not _state(page)["grid"]
    # Its first metrics: the notice goes, the charts' grid is back.
    send({"type": "step", "step": 1, "metrics": {"reward": 0.5, "entropy": 1.0}})
    ui.until(page, f"(s => !s.notice && s.grid && s.tools)(({STATE})())", 15)
    page.reload()  # what a reload shows
    ui.until(page, "document.body.dataset.chartsReady === '1'")
    got = _state(page)
    assert got["notice"] is None and got["grid"] and got["points"] > 0, got
    page.guard.check()


def test_the_first_step_brings_the_charts_back_live(live, page, ui, shots):
    """Our trainer, from its queue through a short warm start to step 1: the notice
    in place of the charts says where it is, then the charts come back and draw the
    first step, without a reload."""
    token = ui.new_token(page, live.url)
    config = {
        "name": "walk first step",
        "steps": 2,
        "env": {"name": "calc"},
        "model": {"size": "tiny", "device": "cpu", "warmstart_steps": 60,
                  "warmstart_batch": 2},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_turns": 2},
    }  # fmt: skip
    r = httpx.post(
        f"{live.url}/api/runs",
        json={"config": config},
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    assert r.status_code in (200, 201), r.text
    run = r.json()["id"]
    page.goto(f"{live.url}/runs/{run}/")
    notice = page.evaluate(STATE)
    seen = {notice["notice"]} if notice["notice"] else set()
    if notice["notice"] is not None:
        assert not notice["grid"], notice
    for _ in range(600):
        got = page.evaluate(STATE)
        if got["notice"]:
            seen.add(got["notice"])
            assert not got["grid"], got
        if got["points"] > 0:
            break
        page.wait_for_timeout(200)
    assert got["notice"] is None and got["grid"] and got["tools"], (got, seen)
    assert seen, "the page showed no notice before step 1"
    width = page.evaluate(
        "Math.max(...[...document.querySelectorAll('[data-chart] .uplot')]"
        ".map(u => u.getBoundingClientRect().width))"
    )
    assert width > 300, width  # drawn at its card's width, not a hidden one's
    ui.shot(page, shots, "walk_first_step_charts", full=False)
    ui.until(
        page,
        "['succeeded', 'failed'].includes("
        "document.querySelector('[data-run-status] .badge').textContent)",
        300,
    )
    page.reload()  # what a reload shows
    ui.until(page, "document.body.dataset.chartsReady === '1'")
    got = page.evaluate(STATE)
    assert got["notice"] is None and got["grid"] and got["points"] > 0, got
    page.guard.check()


# --- 4: stray spaces, a cut placeholder ---------------------------------------------

# Gaps between the pieces of an element's text (its text nodes and inline
# elements), left to right on one line, where punctuation should hug its neighbour
# (after "(", before ")" or ","): a flex container's gap put one around each
# element ("( 0 )", "prompt , answer field").
GAPS = """(sel) => {
  const el = document.querySelector(sel);
  const pieces = [];
  const walk = (node) => {
    for (const c of node.childNodes) {
      if (c.nodeType === 3) {
        if (!c.textContent.trim()) continue;
        const r = document.createRange();
        r.selectNodeContents(c);
        pieces.push({text: c.textContent, rect: r.getBoundingClientRect()});
      } else if (c.nodeType === 1 && ['SPAN', 'CODE', 'A'].includes(c.tagName)
                 && !c.querySelector('span, code, a')) {
        pieces.push({text: c.textContent, rect: c.getBoundingClientRect()});
      } else if (c.nodeType === 1) walk(c);
    }
  };
  walk(el);
  const out = [];
  for (let i = 1; i < pieces.length; i++) {
    const a = pieces[i - 1], b = pieces[i];
    if (Math.abs(a.rect.top - b.rect.top) > 3) continue;
    const hugs = /\\($/.test(a.text) || /^[),.]/.test(b.text);
    if (hugs) out.push({between: [a.text, b.text], gap: b.rect.left - a.rect.right});
  }
  return out;
}"""


def _stray_gaps(page, sel):
    gaps = page.evaluate(GAPS, sel)
    assert gaps, sel  # the punctuation is there to check
    return [g for g in gaps if g["gap"] > 1]


@pytest.mark.parametrize("width", [1400, 800])
def test_no_stray_spaces_and_a_whole_name_placeholder(
    live, browser, seeded, ui, shots, width
):
    with ui.signed_in(browser, live, width) as page:
        page.goto(f"{live.url}/runs/")
        button = "[data-compare-button]"
        assert page.inner_text(button) == "Compare selected (0)"
        assert _stray_gaps(page, button) == []
        page.goto(f"{live.url}/")
        if page.locator(button).count():
            assert _stray_gaps(page, button) == []
        page.goto(f"{live.url}/datasets/{seeded['dataset']}/")
        fields = "[data-dataset-fields]"
        assert page.inner_text(fields) == "prompt field prompt, answer field answer"
        assert _stray_gaps(page, ".page-head .meta") == []
        ui.shot(page, shots, f"walk_dataset_meta_{width}", full=False)
        # The name's placeholder whole in its box, for every environment and
        # algorithm (it follows both).
        page.goto(f"{live.url}/runs/new/")
        name = "[name='name']"
        ui.until(page, f"document.querySelector(\"{name}\").placeholder.includes('-N')")
        envs = page.evaluate(
            "() => [...document.querySelectorAll('[data-env-radio]')].map(r => r.value)"
        )
        presets = page.evaluate(
            "() => [...document.querySelectorAll(\"[name='algorithm.preset'] option\")]"
            ".map(o => o.value)"
        )
        assert envs and presets
        fits = """(sel) => { const i = document.querySelector(sel);
          const s = getComputedStyle(i);
          const c = document.createElement('canvas').getContext('2d');
          c.font = `${s.fontStyle} ${s.fontWeight} ${s.fontSize} ${s.fontFamily}`;
          const room = i.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
          return {text: i.placeholder, width: c.measureText(i.placeholder).width, room}; }"""
        for env in envs:
            page.check(f"[data-env-radio][value='{env}']")
            for preset in presets:
                page.select_option("[name='algorithm.preset']", preset)
                got = page.evaluate(fits, name)
                assert got["text"] == f"blank: {env}-{preset}-N", got
                assert got["width"] <= got["room"], got
        ui.shot(page, shots, f"walk_name_placeholder_{width}", full=False)
