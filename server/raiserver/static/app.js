// rai's web view: live queue, live job log (ANSI colours, follow that pauses when you scroll up), charts.
"use strict";
const rai = (() => {
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const dur = (s) => (s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`);
  // a waiting job's estimate in words, as raiprotocol/waits.py writes it (issue 49): a range, a guess says so
  const span = (s) => { s = Math.round(s); return s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min` + (s % 60 ? ` ${s % 60} s` : "") : `${Math.floor(s / 3600)} h` + (Math.floor((s % 3600) / 60) ? ` ${Math.floor((s % 3600) / 60)} min` : ""); };
  const between = (lo, hi) => (Math.round(lo) === Math.round(hi) ? span(hi) : hi < 60 ? `${Math.round(lo)}–${span(hi)}` : `${span(lo)} – ${span(hi)}`);
  const waitWords = (s) => {
    if (s.eta_high == null || s.eta_low == null) return s.eta_seconds ? `about ${span(s.eta_seconds)}` : "";
    if (s.eta_high <= 5 && s.eta_low <= 0) return "starting now";
    if (s.eta_guess) return (s.eta_low <= 0 ? `up to ${span(s.eta_high)}` : between(s.eta_low, s.eta_high)) + `, a guess: ${s.eta_guess}`;
    return `about ${between(s.eta_low, s.eta_high)}`;
  };

  // SGR colour codes → spans; anything else of ANSI is dropped
  const COLORS = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"];
  function ansi(text) {
    let out = "", open = 0;
    const parts = text.split(/\x1b\[([0-9;]*)m/);
    for (let i = 0; i < parts.length; i++) {
      if (i % 2 === 0) { out += esc(parts[i].replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "")); continue; }
      const codes = parts[i] === "" ? [0] : parts[i].split(";").map(Number);
      for (const c of codes) {
        if (c === 0) { out += "</span>".repeat(open); open = 0; }
        else if (c === 1) { out += '<span class="ansi-bold">'; open++; }
        else if (c >= 30 && c <= 37) { out += `<span class="ansi-${COLORS[c - 30]}">`; open++; }
        else if (c >= 90 && c <= 97) { out += `<span class="ansi-${COLORS[c - 90]} ansi-bright">`; open++; }
      }
    }
    return out + "</span>".repeat(open);
  }

  // the header's menu button (narrow windows): shows and hides the links
  const menu = document.getElementById("menu");
  if (menu) menu.addEventListener("click", () => menu.setAttribute("aria-expanded", String(menu.closest("header").classList.toggle("open"))));

  // a form with data-confirm (cancelling a job) asks first: one mis-tap must not end someone's run
  document.addEventListener("submit", (ev) => {
    const ask = ev.target.dataset && ev.target.dataset.confirm;
    if (ask && !window.confirm(ask)) ev.preventDefault();
  });

  // A job line never shows rai's mark where a line starts (as raiprotocol.markers.disarm): colours,
  // invisible characters (format, bidi, zero-width, combining, blank, unassigned) aside, at the
  // start or after a line separator, carriage return or terminal control, a '✱' gets a backslash
  // before it, and bidi controls in a line with the mark are shown as \u202e. Invisible is
  // markers.invisible's rule: those categories, Default_Ignorable_Code_Point, the Hangul conjoining
  // vowels and finals (Hangul_Syllable_Type V, T: JavaScript has no escape for it) and the blank
  // Braille pattern (tests/unit/test_client_output.py compares the two over every code point).
  const INVISIBLE = /^[\p{Cc}\p{Cf}\p{Cn}\p{Co}\p{Cs}\p{M}\p{Z}\p{Default_Ignorable_Code_Point}\u1160-\u11ff\ud7b0-\ud7ff\u2800]$/u;
  const BIDI = /[\u202a-\u202e\u2066-\u2069]/g;
  const SGR = /\x1b\[[0-9;:]*m/g;
  const BREAK = /\x1b\[[0-?]*[ -\/]*[@-~]?|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?|\x1b[ -\/]*[0-~]?|\x9b[0-?]*[ -\/]*[@-~]?|[\b\n\r\v\f\x1c-\x1e\x85\u2028\u2029]/g;
  function armed(segment) {
    for (const c of segment.replace(SGR, "")) {
      if (c === "✱") return true;
      if (!INVISIBLE.test(c)) return false;
    }
    return false;
  }
  function disarm(line) {
    if (!line.includes("✱")) return line;
    line = line.replace(BIDI, (c) => "\\u" + c.codePointAt(0).toString(16).padStart(4, "0"));
    let out = "", start = 0;
    for (const m of line.matchAll(BREAK)) {
      if (/^\x1b\[[0-9;:]*m$/.test(m[0])) continue;  // colours only: the same line goes on
      const segment = line.slice(start, m.index);
      out += (armed(segment) ? "\\" : "") + segment + m[0];
      start = m.index + m[0].length;
    }
    const segment = line.slice(start);
    return out + (armed(segment) ? "\\" : "") + segment;
  }

  // The job page (issue 37): the live log with line numbers and links to a line (#L123), each
  // line's time, folds per build command (each starts at rai's "Running:" line), search, the
  // failed command marked; the timeline grows as commands start; the tab title shows the state and,
  // if asked for, a browser notification says when the job ends.
  function jobPage(jobId, opts) {
    const $ = (id) => document.getElementById(id);
    const log = $("log"), state = $("state");
    const follow = $("follow") || { checked: false };  // a finished job's page has nothing to follow: read from the top
    const label = (s) => s.replace("_", " ");
    const setTitle = (s) => { document.title = `${label(s)} · Job ${opts.short} · rai`; };
    const clock = (t) => new Date(t * 1000).toISOString().slice(11, 19);
    let finished = opts.finished;
    log.addEventListener("scroll", () => {  // reading back up stops the follow; back at the bottom resumes it
      follow.checked = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    });
    $("log-times").addEventListener("change", (ev) => log.classList.toggle("no-times", !ev.target.checked));

    // lines and folds
    const KEEP = 20000;  // lines kept on the page; the whole log is a download away
    const shown = [];  // every line element on the page, oldest first (shown[head] is the oldest)
    let head = 0, fold = null, foldStart = 0, lastT = 0;
    const COMMAND = /^(Running: |Repeat \d+ of \d+: )(.*)$/;
    function closeFold(t) {
      if (!fold) return;
      const n = fold.querySelectorAll(":scope > div").length;
      fold.querySelector(".fold-info").textContent = `${n} line${n === 1 ? "" : "s"} · ${(t - foldStart).toFixed(1)} s`;
    }
    function lineEl(n, t, s, text) {
      const div = document.createElement("div");
      div.className = `l-${s}`;
      div.id = `L${n}`;
      div.innerHTML = `<a class="ln" href="#L${n}" aria-label="line ${n}">${n}</a><span class="lt">${clock(t)}</span>`
        + `<span class="lx">${s === "sys" ? `✱ ${esc(text)}` : ansi(disarm(text)) || "&nbsp;"}</span>`;
      return div;
    }
    function add(n, t, s, text) {
      lastT = t;
      const div = lineEl(n, t, s, text);
      const cmd = s === "sys" && text.match(COMMAND);
      if (cmd) {  // a build command starts: a fold of its own, open
        closeFold(t);
        fold = document.createElement("details");
        fold.className = "fold";
        fold.open = true;
        const summary = document.createElement("summary");
        summary.appendChild(div);
        div.insertAdjacentHTML("beforeend", '<span class="fold-info"></span>');
        fold.appendChild(summary);
        log.appendChild(fold);
        foldStart = t;
        if (opts.failedCommand !== null && cmd[2] === opts.failedCommand) markFailed(fold, n);
        if (!finished) timelineRow(t, cmd[1].startsWith("Repeat") ? "timed run started" : "command started", cmd[2]);
      } else {
        (fold || log).appendChild(div);
      }
      if (search.q && div.textContent.toLowerCase().includes(search.q)) hit(div);
      if (target === n) goTo(n);
      shown.push(div);
    }
    function trim() {
      let extra = shown.length - head - KEEP;
      if (extra <= 0) return;
      while (extra-- > 0) {
        const old = shown[head++];
        if (old.parentNode && old.parentNode.tagName === "SUMMARY") old.closest("details").remove();
        else old.remove();
      }
      if (head > KEEP) { shown.splice(0, head); head = 0; }
      if (!$("log-trimmed")) {
        log.insertAdjacentHTML("afterbegin", `<div id="log-trimmed" class="l-sys">✱ earlier lines are not shown here; <a href="/api/v1/jobs/${jobId}/log.txt">the whole log</a> once the job ends</div>`);
      }
    }

    // the failed command: its fold marked, and the outcome's link goes to it
    function markFailed(el, n) {
      for (const f of log.querySelectorAll("details.fold.failed")) f.classList.remove("failed");
      el.classList.add("failed");
      const jump = $("failed-jump");
      if (jump) { jump.href = `#L${n}`; jump.hidden = false; }
    }

    // links to a line: #L123 scrolls to it and marks it, now or when it arrives
    let target = null;
    function goTo(n) {
      const el = $(`L${n}`);
      if (!el) return;
      for (const old of log.querySelectorAll(".target")) old.classList.remove("target");
      el.classList.add("target");
      const f = el.closest("details");
      if (f) f.open = true;
      follow.checked = false;
      el.scrollIntoView({ block: "center" });
      target = null;
    }
    function fromHash() {
      const m = location.hash.match(/^#L(\d+)$/);
      if (m) { target = Number(m[1]); goTo(target); }
    }
    window.addEventListener("hashchange", fromHash);
    fromHash();

    // search: every matching line marked, Enter goes to the next one
    const search = { q: "", hits: [], at: -1 };
    const box = $("log-search"), count = $("log-hits");
    function hit(div) {
      div.classList.add("hit");
      search.hits.push(div);
      const f = div.closest("details");
      if (f) f.open = true;
      count.textContent = `${search.at + 1} of ${search.hits.length}`;
    }
    function find() {
      for (const el of search.hits) el.classList.remove("hit", "current");
      search.q = box.value.trim().toLowerCase();
      search.hits = [];
      search.at = -1;
      count.textContent = "";
      if (!search.q) return;
      for (const div of log.querySelectorAll("[id^=L]")) if (div.textContent.toLowerCase().includes(search.q)) hit(div);
      if (!search.hits.length) count.textContent = "no match";
      else next();
    }
    function next() {
      if (!search.hits.length) return;
      if (search.at >= 0) search.hits[search.at].classList.remove("current");
      search.at = (search.at + 1) % search.hits.length;
      const el = search.hits[search.at];
      el.classList.add("current");
      follow.checked = false;
      el.scrollIntoView({ block: "center" });
      count.textContent = `${search.at + 1} of ${search.hits.length}`;
    }
    let typing = null;
    box.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(find, 200); });
    box.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); next(); } });

    // the timeline grows while the job runs
    const timeline = $("timeline-rows");
    function timelineRow(t, step, detail) {
      if (!timeline) return;
      const t0 = Number(timeline.dataset.t0);
      const when = new Date(t * 1000).toISOString().slice(11, 23);
      timeline.insertAdjacentHTML("beforeend", `<tr class="live-row"><td class="opt">${when}</td><td class="num">${(t - t0).toFixed(3)}</td><td>${esc(step)}</td><td><code>${esc(detail)}</code></td></tr>`);
    }

    // a browser notification when the job ends, if asked for
    const bell = $("notify");
    let notify = false;
    if (bell && !finished && "Notification" in window) {
      bell.hidden = false;
      bell.addEventListener("click", async () => {
        const answer = await Notification.requestPermission();
        notify = answer === "granted";
        bell.textContent = notify ? "You will be notified when it ends" : "Notifications are blocked for this site";
        bell.disabled = true;
      });
    }

    // a running job's start and how long it has run, counted here each second (issue 49)
    function elapsed() {
      const el = $("elapsed");
      if (el && !finished) el.textContent = `running for ${dur(Math.max(0, Math.round(Date.now() / 1000 - Number(el.dataset.started))))}`;
    }
    setInterval(elapsed, 1000);
    function started() {  // it started while the page was open: from now
      const where = $("started");
      if (!where || $("elapsed")) return;
      where.innerHTML = `${new Date().toISOString().slice(0, 19).replace("T", " ")} UTC · <span id="elapsed" data-started="${Date.now() / 1000}"></span>`;
      elapsed();
    }

    const src = new EventSource(`/api/v1/jobs/${jobId}/log`);  // reconnects with Last-Event-ID by itself
    src.addEventListener("lines", (ev) => {
      for (const batch of JSON.parse(ev.data)) {
        const lines = batch.x.split("\n");
        for (let i = Math.max(0, lines.length - KEEP); i < lines.length; i++) add(batch.n + i, batch.t, batch.s, lines[i]);
      }
      trim();
      if (follow.checked) log.scrollTop = log.scrollHeight;
    });
    let position = opts.position;
    src.addEventListener("status", (ev) => {
      const s = JSON.parse(ev.data);
      if (s.state !== state.dataset.state && s.state === "running") { timelineRow(Date.now() / 1000, "running", s.worker || ""); started(); }
      state.dataset.state = s.state;
      state.textContent = label(s.state);
      state.className = `pill state-${s.state}`;
      setTitle(s.state);
      const where = $("position");
      if (where) {
        where.textContent = s.position ? ` · position ${s.position}` + (waitWords(s) ? ` · ${waitWords(s) === "starting now" ? "" : "starts in "}${waitWords(s)}` : "") : "";
        const why = $("position-why");
        const moved = position && s.position && s.position > position ? `Moved back from ${position} to ${s.position}. ` : "";
        why.textContent = s.position_why ? moved + s.position_why : moved;
        position = s.position;
      }
    });
    src.addEventListener("end", (ev) => {
      src.close();
      const job = JSON.parse(ev.data);
      closeFold(finished ? lastT : Math.max(lastT, Date.now() / 1000));
      setTitle(job.state);
      if (notify) try { new Notification(`Job ${opts.short} ${label(job.state)}`, { body: job.failed_command ? `'${job.failed_command}' exited with ${job.exit_code}` : job.message || "" }); } catch (e) { /* a browser that shows none */ }
      finished = true;
      if (state.dataset.state !== job.state) location.reload();  // show results and download
    });
  }

  function queuePage(initial, staff, csrf) {
    const cancel = (j) => (staff && j.id ? `<td><form method="post" action="/jobs/${j.id}/cancel" data-confirm="Cancel job ${esc(j.short)} of ${esc(j.owner)}?"><input type="hidden" name="csrf" value="${esc(csrf)}"><button class="danger small">Cancel</button></form></td>` : staff ? "<td></td>" : "");
    const jobCell = (j) => (j.id ? `<a href="/jobs/${j.id}" title="${j.id}"><code>${esc(j.short)}</code></a>` : '<span class="muted">—</span>');
    function draw(snap) {
      document.querySelector("#running tbody").innerHTML = snap.running.map((j) =>
        `<tr class="${j.mine ? "mine" : ""}"><td>${jobCell(j)}</td><td>${esc(j.owner)}</td><td class="opt">${esc(j.kind)}</td><td class="opt">${esc(j.queue)}</td><td class="opt">${esc(j.worker)}</td><td>${dur(j.seconds)}</td>${cancel(j)}</tr>`).join("")
        || `<tr><td colspan="7" class="muted">Nothing running.</td></tr>`;
      document.querySelector("#queued tbody").innerHTML = snap.queued.map((j) =>
        `<tr class="${j.mine ? "mine" : ""}"><td>${j.position ?? "—"}</td><td>${jobCell(j)}</td><td>${esc(j.owner)}</td><td class="opt">${esc(j.kind)}</td><td class="opt">${esc(j.queue)}</td><td class="opt">${dur(j.seconds)}</td><td${j.why ? ` title="${esc(j.why)}"` : ""}>${j.waiting ? esc(j.waiting) : esc(j.eta_words || "—")}${j.why && j.mine ? `<div class="muted why">${esc(j.why)}</div>` : ""}</td>${cancel(j)}</tr>`).join("")
        || `<tr><td colspan="8" class="muted">Nobody is waiting.</td></tr>`;
      document.getElementById("running-count").textContent = snap.running.length;
      document.getElementById("queued-count").textContent = snap.queued.length;
    }
    draw(initial);
    const live = document.getElementById("live");
    const src = new EventSource("/web/queue/events");
    src.addEventListener("queue", (ev) => { draw(JSON.parse(ev.data)); live.classList.remove("off"); });
    src.addEventListener("logout", () => { src.close(); location.href = "/login"; });  // key rotated or account closed
    src.onerror = () => live.classList.add("off");
  }

  const BLUE = "#2563eb";
  const chart = (el, config) => {  // charts are read, not watched: no animation
    config.options = { animation: false, ...(config.options || {}) };
    return new Chart(el, config);
  };
  function barChart(id, labels, values, unit) {
    chart(document.getElementById(id), {
      type: "bar",
      data: { labels, datasets: [{ label: unit, data: values, backgroundColor: BLUE }] },
      options: { indexAxis: "y", plugins: { legend: { display: false } }, scales: { x: { title: { display: true, text: unit } } } },
    });
  }

  function histogram(id, timesMs) {
    const el = document.getElementById(id);
    if (!timesMs.length) { el.replaceWith(Object.assign(document.createElement("p"), { className: "muted", textContent: "No valid run yet." })); return; }
    const lo = Math.min(...timesMs), hi = Math.max(...timesMs);
    const n = Math.min(12, Math.max(1, timesMs.length)), width = (hi - lo) / n || 1;
    const counts = new Array(n).fill(0);
    for (const t of timesMs) counts[Math.min(n - 1, Math.floor((t - lo) / width))]++;
    const labels = counts.map((_, i) => `${(lo + i * width).toFixed(3)}–${(lo + (i + 1) * width).toFixed(3)}`);
    chart(el, {
      type: "bar",
      data: { labels, datasets: [{ label: "teams", data: counts, backgroundColor: BLUE }] },
      options: { plugins: { legend: { display: false } }, scales: { x: { title: { display: true, text: "total op time (ms)" } }, y: { title: { display: true, text: "teams" }, ticks: { precision: 0 } } } },
    });
  }

  function lineChart(id, history) {
    chart(document.getElementById(id), {
      type: "line",
      data: { labels: history.map((h) => h.t.slice(5, 16).replace("T", " ")), datasets: [{ label: "total op time (s)", data: history.map((h) => h.s), borderColor: BLUE, tension: 0.2 }] },
      options: { scales: { y: { title: { display: true, text: "total op time (s)" } } } },
    });
  }

  return { ansi, jobPage, queuePage, barChart, histogram, lineChart };
})();
