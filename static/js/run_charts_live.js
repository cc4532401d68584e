// The run page's charts for metric names first sent after the page was rendered.
// Which charts a run has depends on what it logged (dashboard/pages/charts.py
// run_charts: an external run's standard charts that have a logged key, its reward
// components, its other metrics grouped by prefix; any run's metric families), so a
// frame with a name the page has not seen asks for the page again (run_parts.js: one
// request for a burst) and takes from it the charts a reload would show: the
// server's sections (its template escapes the names) in the server's order, each
// new one loading its series from the metrics API. A chart already on the page with
// the same keys stays, with its points, hidden lines and log box (a prefix's chart
// is named by its prefix, dashboard/pages/charts.py extra_id, so a new prefix does
// not move it); should the server name it otherwise, its section takes the new id.
// A chart whose keys changed (a component added, a prefix's group grown) is made
// again and loads every key.

import { logToggle } from "./chart_view.js";
import { SENT_PARTS, refreshParts, takePartWith } from "./run_parts.js";

const CHART_PARTS = ["[data-charts]"];
// The server may answer before it stored the name a frame brought (the page is
// rendered from the stored metric names): asked again, a few times at most.
const RETRIES = 3;

const sameKeys = (chart, spec) => chart.keys.length === spec.keys.length && chart.keys.every((k, i) => k === spec.keys[i]);
const nameOf = (spec) => (spec.help ? `${spec.title}: ${spec.help}` : spec.title);
const picked = (root) => new Set([...root.querySelectorAll("[data-metric-pick] option")].map((o) => o.value).filter(Boolean));

/**
 * ``charts``: the page's MetricChart list (changed in place; each chart of a
 * ``[data-chart]`` section carries its ``spec``), ``makeChart(section, spec)`` and
 * ``loadCharts(list)`` the page's own, ``onTaken()`` called once the charts changed.
 * Returns ``newNames()`` (a frame brought a name the page had not seen) and
 * ``step(s)`` (each step a frame brought).
 */
export function liveCharts({ data, charts, makeChart, loadCharts, view, onTaken }) {
  const grid = document.querySelector("[data-charts]");
  const framing = new Set(); // per load of new charts under way: the steps framed meanwhile
  let retries = 0;

  const ask = () => refreshParts(data.clock?.external ? [...SENT_PARTS, ...CHART_PARTS] : CHART_PARTS);

  // A kept chart's section as the fresh page has it: its id (and the ids its heading
  // and help are known by), title, help and empty text; its log box follows the id.
  function retitle(chart, spec, fresh) {
    const section = chart.section;
    for (const a of ["data-chart", "aria-labelledby", "aria-describedby"]) section.setAttribute(a, fresh.getAttribute(a));
    for (const sel of ["h3 > span", "[data-chart-help]"]) {
      const mine = section.querySelector(sel), theirs = fresh.querySelector(sel);
      if (!mine || !theirs) continue;
      mine.id = theirs.id;
      if (mine.textContent !== theirs.textContent) mine.textContent = theirs.textContent;
    }
    const p = section.querySelector("[data-nodata]"), q = fresh.querySelector("[data-nodata]");
    if (p && q && (p.dataset.initial ?? p.textContent) !== q.textContent) {
      p.dataset.initial = q.textContent;
      if (p.dataset.loading === undefined) p.textContent = q.textContent;
    }
    const was = chart.spec;
    if (was.id !== spec.id || was.title !== spec.title) {
      const heading = section.querySelector("h3");
      heading.querySelector(".log-toggle")?.remove();
      logToggle(heading, chart, spec.id, view, spec.title);
      chart.schedule();
    }
    if (nameOf(was) !== nameOf(spec)) chart.setName(nameOf(spec));
    chart.spec = spec;
  }

  // A new chart's series: what frames drew while it loaded is drawn again after,
  // the stored series it loaded may predate them.
  async function load(list) {
    const framed = [];
    framing.add(framed);
    try {
      await loadCharts(list);
    } catch { /* a reload shows them */ } finally {
      framing.delete(framed);
    }
    for (const s of framed) for (const c of list) c.add(s.step, s.metrics);
  }

  function take(page) {
    let fresh = null;
    try {
      fresh = JSON.parse(page.getElementById("page-data")?.textContent || "null");
    } catch { return; }
    if (!grid || !Array.isArray(fresh?.charts)) return;
    if (fresh.reward_key) data.reward_key = fresh.reward_key; // train/reward, sent later
    const sectionOf = (spec) => page.querySelector(`[data-chart="${CSS.escape(spec.id)}"]`);
    const specs = fresh.charts.filter(sectionOf);
    const mine = charts.filter((c) => c.section?.hasAttribute("data-chart"));
    const left = new Set(mine);
    const find = (spec, byId) => {
      for (const c of left) {
        if (sameKeys(c, spec) && (!byId || c.spec.id === spec.id)) { left.delete(c); return c; }
      }
      return null;
    };
    const kept = specs.map((s) => find(s, true));
    specs.forEach((s, i) => { kept[i] ||= find(s, false); });
    for (const c of left) { c.destroy(); c.section.remove(); }
    const added = [];
    const next = specs.map((spec, i) => {
      if (kept[i]) { retitle(kept[i], spec, sectionOf(spec)); return kept[i]; }
      const chart = makeChart(document.importNode(sectionOf(spec), true), spec);
      added.push(chart);
      return chart;
    });
    // Placed from the last, each before the one after it: a chart in place is not moved.
    let after = grid.querySelector("[data-histogram]");
    for (const c of [...next].reverse()) {
      if (c.section.parentNode !== grid || c.section.nextElementSibling !== after) grid.insertBefore(c.section, after);
      after = c.section;
    }
    charts.splice(0, charts.length, ...next, ...charts.filter((c) => !mine.includes(c)));
    data.charts = specs;
    onTaken?.();
    if (added.length) load(added);
    const served = picked(page);
    if ([...picked(document)].some((k) => !served.has(k)) && retries < RETRIES) {
      retries += 1;
      ask();
    } else retries = 0;
  }

  takePartWith(CHART_PARTS[0], take);
  return {
    newNames() { retries = 0; ask(); },
    step(s) { for (const f of framing) f.push(s); },
  };
}
