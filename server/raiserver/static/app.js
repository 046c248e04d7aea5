// rai's web view: live queue, live job log (ANSI colours, follow that pauses when you scroll up), charts.
"use strict";
const rai = (() => {
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const dur = (s) => (s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`);

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

  // A job line never shows rai's mark where a line starts (as raiprotocol.markers.disarm): colours,
  // invisible characters (format, bidi, zero-width, combining, blank, unassigned) aside, at the
  // start or after a line separator, carriage return or terminal control, a '✱' gets a backslash
  // before it, and bidi controls in a line with the mark are shown as \u202e.
  const INVISIBLE = /^[\p{Cc}\p{Cf}\p{Cn}\p{Co}\p{Cs}\p{M}\p{Z}\u115f\u1160\u3164\uffa0\u2800]$/u;
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

  function jobPage(jobId) {
    const log = document.getElementById("log");
    const follow = document.getElementById("follow");
    const state = document.getElementById("state");
    log.addEventListener("scroll", () => {  // reading back up stops the follow; back at the bottom resumes it
      follow.checked = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    });
    const KEEP = 20000;  // lines kept on the page; the whole log is a download away
    const src = new EventSource(`/api/v1/jobs/${jobId}/log`);  // reconnects with Last-Event-ID by itself
    src.addEventListener("lines", (ev) => {
      const frag = document.createDocumentFragment();
      for (const batch of JSON.parse(ev.data)) {
        for (const text of batch.x.split("\n").slice(-KEEP)) {
          const div = document.createElement("div");
          div.className = `l-${batch.s}`;
          div.innerHTML = batch.s === "sys" ? `✱ ${esc(text)}` : ansi(disarm(text)) || "&nbsp;";
          frag.appendChild(div);
        }
      }
      log.appendChild(frag);
      let extra = log.childElementCount - KEEP;
      if (extra > 0) {
        let note = document.getElementById("log-trimmed");
        while (extra-- > 0) log.removeChild(note ? note.nextSibling : log.firstChild);
        if (!note) {
          note = document.createElement("div");
          note.id = "log-trimmed";
          note.className = "l-sys";
          note.innerHTML = `✱ earlier lines are not shown here; <a href="/api/v1/jobs/${jobId}/log.txt">the whole log</a> once the job ends`;
          log.insertBefore(note, log.firstChild);
        }
      }
      if (follow.checked) log.scrollTop = log.scrollHeight;
    });
    src.addEventListener("status", (ev) => {
      const s = JSON.parse(ev.data);
      state.textContent = s.state.replace("_", " ");
      state.className = `pill state-${s.state}`;
    });
    src.addEventListener("end", (ev) => {
      src.close();
      const job = JSON.parse(ev.data);
      if (state.textContent !== job.state.replace("_", " ")) location.reload();  // show results and download
    });
  }

  function queuePage(initial, staff, csrf) {
    const cancel = (j) => (staff && j.id ? `<td><form method="post" action="/jobs/${j.id}/cancel"><input type="hidden" name="csrf" value="${esc(csrf)}"><button class="danger small">Cancel</button></form></td>` : staff ? "<td></td>" : "");
    const jobCell = (j) => (j.id ? `<a href="/jobs/${j.id}"><code>${j.id.slice(-10)}</code></a>` : '<span class="muted">—</span>');
    function draw(snap) {
      document.querySelector("#running tbody").innerHTML = snap.running.map((j) =>
        `<tr class="${j.mine ? "mine" : ""}"><td>${jobCell(j)}</td><td>${esc(j.owner)}</td><td>${esc(j.kind)}</td><td>${esc(j.queue)}</td><td>${esc(j.worker)}</td><td>${dur(j.seconds)}</td>${cancel(j)}</tr>`).join("")
        || `<tr><td colspan="7" class="muted">Nothing running.</td></tr>`;
      document.querySelector("#queued tbody").innerHTML = snap.queued.map((j) =>
        `<tr class="${j.mine ? "mine" : ""}"><td>${j.position ?? "—"}</td><td>${jobCell(j)}</td><td>${esc(j.owner)}</td><td>${esc(j.kind)}</td><td>${esc(j.queue)}</td><td>${dur(j.seconds)}</td><td>${j.waiting ? esc(j.waiting) : j.eta != null ? "≈ " + dur(Math.round(j.eta)) : "—"}</td>${cancel(j)}</tr>`).join("")
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
      data: { labels: history.map((h) => h.t.slice(5, 16).replace("T", " ")), datasets: [{ label: "total op time (ms)", data: history.map((h) => h.ms), borderColor: BLUE, tension: 0.2 }] },
      options: { scales: { y: { title: { display: true, text: "ms" } } } },
    });
  }

  return { ansi, jobPage, queuePage, barChart, histogram, lineChart };
})();
