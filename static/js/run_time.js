// The run page's clock: the wall time, and whether an external run is still sending.
//
// The wall time is dashboard.reads.runs.duration_s, kept current: the time a run of
// ours ran (its attempts; paused in the queue it stands still), counting while it
// runs, and for an external run to its last
// event (trackio's client has no finish call: a client that stopped would otherwise
// grow by the hour). It starts from the server's figure at render, so the browser's
// clock does not matter, and compare (server-rendered) shows the same number.
//
// An external run that sent nothing for quiet_after_s (the server's threshold,
// dashboard.reads.runs.quiet_window_s, passed in the page data) is "not sending", as
// a reload would say; the next event brings it back to live. An event is a frame the
// socket brought with something in it, not a hello or a backfill (a poll's backfill
// repeats the last step).

/** Wall time as the server's `duration` filter writes it. */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.floor(seconds);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  const pad = (x) => String(x).padStart(2, "0");
  return h ? `${h}h ${pad(m)}m` : (m ? `${m}m ${pad(r)}s` : `${r}s`);
}

const UNITS = [["year", 365 * 86400], ["month", 30 * 86400], ["week", 7 * 86400], ["day", 86400], ["hour", 3600], ["minute", 60]];

/** An age as Django's `timesince` writes it: "0 minutes", "1 minute", "2 hours, 5 minutes". */
export function since(seconds) {
  let s = Math.max(0, Math.floor(seconds || 0));
  const i = UNITS.findIndex(([, n]) => s >= n);
  if (i < 0) return "0\u00a0minutes";
  const part = (k) => {
    const [name, n] = UNITS[k];
    const c = Math.floor(s / n);
    s -= c * n;
    return [c, `${c}\u00a0${name}${c === 1 ? "" : "s"}`];
  };
  const [, first] = part(i);
  if (i + 1 >= UNITS.length) return first;
  const [c2, second] = part(i + 1);
  return c2 ? `${first}, ${second}` : first;
}

/** Does a frame from the socket carry something the run sent? */
export function isEvent(frame) {
  if (!frame || frame.type !== "frame") return false;
  const any = (k) => Array.isArray(frame[k]) && frame[k].length > 0;
  return any("steps") || any("trajectories") || any("alerts") || any("judgements") || any("checkpoints") || !!frame.warmup;
}

export class RunClock {
  /** `clock`: the page data's {external, duration_s, event_age_s, quiet_after_s}. */
  constructor(clock, status, { now = () => performance.now() } = {}) {
    this.now = now;
    const t0 = now();
    this.external = !!clock.external;
    this.quietAfterMs = 1000 * (Number(clock.quiet_after_s) || 120);
    this.wall0 = clock.duration_s ?? null;
    this.status = status;
    // An external run's last event, on the page's clock; ours count from their start.
    const age = clock.event_age_s;
    this.eventAt0 = typeof age === "number" ? t0 - 1000 * age : null;
    this.eventAt = this.eventAt0;
    const created = clock.created_age_s;
    this.createdAt = typeof created === "number" ? t0 - 1000 * created : null;
    // Ours count while they run: a run paused back into the queue (a demo behind a
    // user's run) keeps its time until it runs again (dashboard.reads.runs.duration_s
    // counts its attempts only).
    const counting = !this.external && status === "running";
    this.runningSince = counting ? t0 - 1000 * (this.wall0 || 0) : null;
    this.frozen = this.wall0;
  }

  /** Seconds of wall time now (null: not started). */
  wallSeconds() {
    if (this.external) {
      if (this.wall0 === null) return null;
      return this.wall0 + (this.eventAt === null ? 0 : (this.eventAt - this.eventAt0) / 1000);
    }
    return this.runningSince === null ? this.frozen : (this.now() - this.runningSince) / 1000;
  }

  wallText() {
    const s = this.wallSeconds();
    // All of an external run's events in one batch: no time to show, not "0s" (the
    // server's `wall_time` filter renders the same "—", with a tooltip saying why).
    if (this.external && s !== null && s < 1) return "—";
    return duration(s);
  }

  /** Seconds since the run was created (null: not known). */
  createdAge() {
    return this.createdAt === null ? null : (this.now() - this.createdAt) / 1000;
  }

  /** Seconds since the external run's last event (null: none known). */
  eventAge() {
    return this.eventAt === null ? null : (this.now() - this.eventAt) / 1000;
  }

  /** An external run that should be sending (running, or lost and maybe coming
   * back) but sent nothing for the threshold. */
  notSending() {
    if (!this.external || !(this.status === "running" || this.status === "lost")) return false;
    if (this.status === "lost") return true;
    const age = this.eventAge();
    return age !== null && age * 1000 > this.quietAfterMs;
  }

  /** An event arrived now. */
  heard() {
    if (!this.external) return;
    const t = this.now();
    if (this.eventAt === null) { this.eventAt0 = t; this.wall0 = this.wall0 ?? 0; }
    this.eventAt = t;
  }

  /** Our run ended or was paused: its wall time as the server has it (its
   * attempts' time, the server's clock), not the moment this page heard of it (a
   * second or so later: "20s" live read "19s" after a reload). */
  settle(seconds) {
    if (this.external || this.status === "running" || !Number.isFinite(seconds)) return false;
    this.frozen = Math.max(0, seconds);
    this.runningSince = null;
    return true;
  }

  setStatus(status) {
    if (!this.external && status === "running" && this.runningSince === null) {
      this.runningSince = this.now() - 1000 * (this.frozen || 0);
    }
    if (!this.external && status !== "running" && this.runningSince !== null) {
      this.frozen = this.wallSeconds(); // ended, or paused back into the queue
      this.runningSince = null;
    }
    this.status = status;
  }
}
