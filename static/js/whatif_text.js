// The what-if panel's words (static/js/whatif.js draws them): the summary of a report
// from POST /api/runs/{id}/whatif, each example's label, the line that says how many
// of the changes the table shows, and the address of the clone form the panel opens.
// Pure (no DOM), so that tests/dashboard/test_whatif_page.py runs it under node.

import { fmt } from "./util.js";

export const MAX_EXAMPLES = 100; // dashboard.reads.whatif.MAX_EXAMPLES

export const KIND_LABEL = {
  sign_flip: "advantage sign changes",
  best_change: "best rollout changes",
  rank_change: "ranking changes",
  signal_change: "group signal changes",
};
const KIND_SHORT = { sign_flip: "advantage", best_change: "best rollout", rank_change: "ranking", signal_change: "group signal" };

// An advantage of exactly 0 pushes the policy neither way: going to 0 or leaving it
// is not a sign flip, and is said as what it is.
const FLIP_LABEL = {
  reversed: "advantage sign reversed",
  to_zero: "advantage to 0 (its push gone)",
  from_zero: "advantage from 0 (a new push)",
};

/** The label of one example row of ``kind``. */
export function exampleLabel(kind, ex) {
  if (kind === "sign_flip" && FLIP_LABEL[ex.flip]) return FLIP_LABEL[ex.flip];
  return KIND_LABEL[kind] || kind;
}

function advantageChanges(t) {
  const n = t.sign_flips;
  const head = `${n} of ${t.trajectories} trained trajectories change their advantage's sign (+, 0 or −)`;
  if (!n || t.sign_reversed === undefined) return head;
  const kinds = [
    [t.sign_reversed, "reversed"],
    [t.sign_to_zero, "to 0 (no push any more)"],
    [t.sign_from_zero, "from 0 (a push where there was none)"],
  ];
  return `${head}: ${kinds.filter(([k]) => k).map(([k, what]) => `${k} ${what}`).join(", ")}`;
}

/** Kendall's tau in words: its mean over the groups it could be computed for, or
 * why it could not be ("—"). */
export function tauText(t) {
  if (t.tau_mean === null || t.tau_mean === undefined) {
    const why = t.groups
      ? "in every group the rollouts' totals were all equal, before or after, so no group has an order to compare"
      : "no whole group of rollouts was recomputed";
    return `mean Kendall τ — (none: ${why})`;
  }
  const over = t.tau_groups < t.groups
    ? ` over ${t.tau_groups} of ${t.groups} groups (the other ${t.groups - t.tau_groups} had all their totals tied before or after)`
    : ` over ${t.tau_groups} group${t.tau_groups === 1 ? "" : "s"}`;
  return `mean Kendall τ ${fmt(t.tau_mean, 3)}${over}`;
}

/** The one-line summary of a report's ``total``; when the weights differ from the
 * run's (``reweighted``) but change no advantage's sign, no best rollout and no
 * group's order, it begins by saying so (they change how hard each rollout is
 * pushed, not which way). */
export function summary(t, reweighted = true) {
  if (!t.trajectories && !t.groups) {
    // Nothing to recompute: "0 of 0 ... no rollout's advantage changes" would read
    // as a verdict on the weights.
    return "Nothing to recompute yet: this run has no recorded rollouts (they appear as its steps are recorded)";
  }
  const parts = [];
  const same = t.sign_flips === 0 && !t.best_changes && (t.tau_mean === 1 || t.tau_mean === null);
  if (reweighted && same && t.trajectories) {
    parts.push("No direction changes: every advantage keeps its sign and every group its order, so these weights change how hard each rollout is pushed, not which way");
  }
  if (t.sign_flips !== null) {
    parts.push(advantageChanges(t));
    parts.push(`${fmt(100 * t.token_flip_share, 3)}% of trained tokens' advantages change sign the same way`);
  }
  parts.push(`${t.best_changes} of ${t.groups} groups change their best rollout`);
  parts.push(tauText(t));
  return parts.join(" · ");
}

/** How many of the changes the table shows, and of which kinds: {text, all, more}:
 * ``all``, how many of each kind to ask for to see the rest (at most MAX_EXAMPLES),
 * and ``more``, the label of the button that asks ("" when nothing more to show). */
export function shownText(report, shown, limit) {
  const counts = report.example_counts || {};
  const kinds = Object.keys(KIND_LABEL).filter((k) => counts[k]);
  const total = kinds.reduce((s, k) => s + counts[k], 0);
  if (!total) return { text: "", all: 0, more: "" };
  if (shown >= total) {
    return { text: `All ${total} changes shown, the largest first within each kind.`, all: 0, more: "" };
  }
  const each = kinds.map((k) => `${KIND_SHORT[k]} ${Math.min(counts[k], limit)} of ${counts[k]}`).join(", ");
  const most = Math.max(...kinds.map((k) => counts[k]));
  const all = Math.min(most, MAX_EXAMPLES);
  let more = "";
  if (all > limit) more = all === most ? `Show all ${total}` : `Show the ${all} largest of each kind`;
  return {
    text: `${shown} of ${total} changes shown: the ${limit} largest of each kind (${each}).`,
    all,
    more,
  };
}

/** The clone form (``/runs/<id>/clone/``) filled with ``weights``, and the alert it
 * repairs when there is one: the user reviews it there, then launches. */
export function cloneHref(url, weights, repairing) {
  const q = new URLSearchParams({ weights: JSON.stringify(weights) });
  if (repairing) {
    q.set("repair", repairing.detector);
    // No step (an address with ?repair= alone): the detector's first alert.
    if (Number.isInteger(repairing.step)) q.set("step", String(repairing.step));
  }
  return `${url}?${q}`;
}
