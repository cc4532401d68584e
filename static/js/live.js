// The run page's live feed: a websocket to /ws/runs/<id>/ that survives drops.
//
// Frames are numbered (seq). The database is the source of truth and the channel
// layer may drop frames, so on every (re)connect, on a gap in seq and on a frame
// marked truncated, the stream backfills from the JSON API (?since_step=N) and hands
// the result to the same onFrame callback. Applying a step twice is harmless: the
// page keys everything by step.
//
// The server sends a second hello on an open socket when its channel layer was away
// (Redis restarted, say) and frames may have gone nowhere: it is handled like the
// first one. And a stream that stays quiet for quietMs while the run is not finished
// asks the database anyway (a backfill also carries the status), so the final status
// reaches the page even if every frame after some point was lost.

import { getJSON } from "./util.js";

// A run in one of these statuses sends no more frames.
export const FINAL = new Set(["succeeded", "failed", "cancelled", "unresponsive"]);

export class RunStream {
  constructor({ wsPath, backfillUrl, lastStep = 0, seq = 0, status = null, quietMs = 20000, onFrame, onState }) {
    this.wsPath = wsPath;
    this.backfillUrl = backfillUrl;
    this.lastStep = lastStep;
    this.seq = seq;
    this.status = status;
    this.quietMs = quietMs;
    this.heardAt = Date.now();
    this.onFrame = onFrame;
    this.onState = onState || (() => {});
    this.retry = 0;
    this.closed = false;
    this.refused = false;
    this.backfilling = null;
    // Messages are handled one at a time, in arrival order: a frame that arrives while
    // the hello's backfill is in flight waits for it instead of racing it.
    this.inbox = Promise.resolve();
    this.stats = { frames: 0, gaps: 0, backfills: 0, reconnects: 0, hellos: 0, polls: 0 };
  }

  start() {
    this.connect();
    this.quietTimer = setInterval(() => this.checkQuiet(), 1000);
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible" && (!this.ws || this.ws.readyState > 1)) this.connect();
    });
  }

  /** True when every message received so far has been handled and no backfill runs. */
  async settled() {
    let inbox;
    do {
      inbox = this.inbox;
      await inbox;
    } while (inbox !== this.inbox);
    return !this.backfilling;
  }

  stop() {
    this.closed = true;
    clearInterval(this.quietTimer);
    this.ws?.close();
  }

  /** Nothing heard for quietMs and the run not finished: ask the database, in turn
   * with the messages (a frame that arrives meanwhile waits for it). */
  checkQuiet() {
    if (this.closed || this.refused || FINAL.has(this.status)) return;
    if (Date.now() - this.heardAt < this.quietMs) return;
    this.heardAt = Date.now();
    this.stats.polls += 1;
    this.inbox = this.inbox.then(() => this.backfill()).catch(() => {});
  }

  connect() {
    if (this.closed) return;
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(`${proto}//${location.host}${this.wsPath}`);
    this.ws = ws;
    this.onState("connecting");
    ws.addEventListener("open", () => {
      this.retry = 0;
      this.onState("live");
    });
    ws.addEventListener("message", (e) => {
      this.heardAt = Date.now();
      this.inbox = this.inbox.then(() => this.receive(e.data)).catch(() => {});
    });
    ws.addEventListener("close", (e) => {
      if (this.ws !== ws) return;
      if (e.code === 4401 || e.code === 4404 || e.code === 4403) {
        this.refused = true;
        this.onState("refused");
        return;
      }
      this.schedule();
    });
  }

  schedule() {
    if (this.closed) return;
    this.stats.reconnects += 1;
    const delay = Math.min(10000, 500 * 2 ** this.retry) * (0.75 + Math.random() / 2);
    this.retry += 1;
    this.onState("retry");
    setTimeout(() => this.connect(), delay);
  }

  async receive(text) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      return;
    }
    if (msg.type === "hello") {
      // Whatever happened while we were away is in the database.
      if (msg.frame_seq > this.seq || msg.last_step > this.lastStep) await this.backfill();
      this.seq = Math.max(this.seq, msg.frame_seq || 0);
      if (msg.status) this.status = msg.status;
      this.onFrame({ status: msg.status, last_step: msg.last_step, steps: [], trajectories: [], alerts: [], judgements: [] });
      this.stats.hellos += 1;
      return;
    }
    if (msg.type !== "frame") return;
    this.stats.frames += 1;
    if (msg.seq <= this.seq) return; // already covered by a backfill
    const gap = this.seq > 0 && msg.seq > this.seq + 1;
    if (gap || msg.truncated) {
      this.stats.gaps += 1;
      await this.backfill();
    }
    this.seq = Math.max(this.seq, msg.seq);
    this.apply(msg);
  }

  apply(frame) {
    if (frame.status) this.status = frame.status;
    for (const s of frame.steps || []) this.lastStep = Math.max(this.lastStep, s.step);
    if (typeof frame.last_step === "number") this.lastStep = Math.max(this.lastStep, frame.last_step);
    this.onFrame(frame);
  }

  /** Fetch everything after the last step we have (one step of overlap: a frame may
   * have carried only part of a step's rows). Serialised: one backfill at a time. */
  backfill() {
    if (this.backfilling) return this.backfilling;
    this.backfilling = (async () => {
      this.stats.backfills += 1;
      let since = Math.max(-1, this.lastStep - 1);
      for (let rounds = 0; rounds < 50; rounds++) {
        let body;
        try {
          body = await getJSON(`${this.backfillUrl}?since_step=${since}&max_steps=2000`);
        } catch {
          break;
        }
        this.seq = Math.max(this.seq, body.frame_seq || 0);
        this.apply(body);
        if (!body.more) break;
        since = body.until_step;
      }
    })().finally(() => {
      this.backfilling = null;
    });
    return this.backfilling;
  }
}
