// perfsuite dashboard: renders the JSON embedded in index.html (schema 1, written by
// perfsuite/dashboard/model.py). Findings first, then fastest implementations, the post's checks,
// per-series charts (uPlot) with filters, and a comparison of two commits or two testbeds.
// No network request: everything it needs is in the page or beside it.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("perfsuite-data").textContent);
  const C = D.commits;                       // [sha, date, subject] in first-parent order
  const FILTERS = ["variant", "case", "mode", "dtype", "measure", "testbed"];
  const PAGE = 24;                           // charts added per "show more"
  const charts = (window.perfsuiteCharts = {});
  const state = {filters: {}, shown: PAGE, onlyChanges: false};

  // ---------- helpers ----------
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") e.textContent = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids.flat()) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }
  const short = (i) => C[i][0].slice(0, 8);
  function commitLink(i) {
    const code = el("code", {title: C[i][0] + (C[i][2] ? ": " + C[i][2] : "")}, short(i));
    return D.repo_url ? el("a", {href: D.repo_url + "/commit/" + C[i][0], class: "commit"}, code) : code;
  }
  function fmtUs(us) {
    if (us === null || us === undefined) return "-";
    if (us === 0) return "0";
    if (us >= 1e6) return (us / 1e6).toPrecision(3) + " s";
    if (us >= 1e3) return (us / 1e3).toPrecision(3) + " ms";
    return us.toPrecision(3) + " \u00b5s";
  }
  const pct = (r) => (r >= 1 ? "+" : "") + ((r - 1) * 100).toFixed(1) + "%";
  // a change point: a regression when the model says so (a count's step has no ratio), else a ratio above 1
  const worse = (c) => (c.worse === null || c.worse === undefined ? c.ratio > 1 : c.worse);
  // its size: the words the model gives (``0 -> 1 score copies``), else the ratio with its interval
  const size = (c) => c.size || pct(c.ratio) + " [" + pct(c.lo) + ", " + pct(c.hi) + "]";
  const fmtRatio = (r, lo, hi) => r.toFixed(3) + "x " + (lo === null || hi === null ? "(no interval: the run kept no spread)" : "[" + lo.toFixed(3) + ", " + hi.toFixed(3) + "]");
  const yTicks = (u, ticks) => ticks.map(fmtUs);
  const testbed = (id) => D.testbeds[id] || id;
  const label = (s) => s.variant + " \u00b7 " + s.case + " \u00b7 " + s.mode + " \u00b7 " + s.measure;
  // 95% interval of a median: median +- 1.58 IQR / sqrt(rounds) (McGill, Tukey, Larsen 1978); model.py has the same.
  function interval(s, i) {
    const half = 1.58 * (s.q3[i] - s.q1[i]) / Math.sqrt(Math.max(s.n[i], 1));
    return [s.m[i] - half, s.m[i] + half];
  }
  function table(head, rows, attrs) {
    return el("table", attrs || {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows));
  }
  const seriesHref = (s) => "#series=" + encodeURIComponent(s.id);

  // ---------- findings ----------
  const unconfirmed = (c) => c.status === "unconfirmed";
  const stateWords = (c) => c.note || c.status || (c.open ? "open" : "closed");
  function findings() {
    const rows = [], closed = [];
    for (const s of D.series) for (const c of s.changes) {
      if (unconfirmed(c)) continue;                // a step nothing confirmed is drawn, never listed
      (c.open ? rows : closed).push([s, c]);
    }
    rows.sort((a, b) => b[1].bad - a[1].bad || b[1].ratio - a[1].ratio);
    const regressions = rows.filter(([, c]) => worse(c)).length;
    const sec = el("section", {id: "findings"}, el("h2", {}, "Findings"));
    if (D.notes.length) sec.append(el("ul", {id: "notes"}, D.notes.map((n) => el("li", {class: n.level}, n.text))));
    if (D.series.length) sec.append(el("p", {class: "lead"}, rows.length
      ? regressions + " open regression(s) and " + (rows.length - regressions) + " other open finding(s), newest first"
      : "No open finding in " + D.series.length + " series."));
    const head = ["", "benchmark", "testbed", "size", "last good", "first bad", "cause"];
    const line = ([s, c]) => el("tr", {class: worse(c) ? "regression" : "improvement", "data-series": s.id, "data-finding": c.finding || null},
      el("td", {}, c.size ? (worse(c) ? "regression" : "change") : c.ratio > 1 ? "slower" : "faster"),
      el("td", {}, el("a", {href: seriesHref(s)}, label(s))),
      el("td", {}, testbed(s.testbed)),
      el("td", {class: "num"}, size(c)),
      el("td", {}, commitLink(c.good)),
      el("td", {}, commitLink(c.bad), " ", el("span", {class: "date"}, C[c.bad][1].slice(0, 10))),
      el("td", {class: "cause"}, c.cause || "no structural change: timing only"));
    if (rows.length) sec.append(table(head, rows.map(line), {id: "changes"}));
    if (closed.length) {
      closed.sort((a, b) => b[1].bad - a[1].bad);
      sec.append(el("details", {id: "closed"}, el("summary", {}, closed.length + " closed finding(s): recovered, accepted, or the step that recovered one"),
        table(head.concat(["state"]), closed.map((r) => { const tr = line(r); tr.append(el("td", {}, stateWords(r[1]))); return tr; }))));
    }
    return sec;
  }

  function fastest() {
    const sec = el("section", {id: "fastest"}, el("h2", {}, "Fastest implementation per case"));
    if (!D.fastest.length) { sec.append(el("p", {}, "No case has two or more implementations timed at one commit without contention (contended points are shown on their series, not compared).")); return sec; }
    sec.append(table(["case", "mode", "testbed", "fastest", "median", "runner-up: its time / fastest", "roofline"],
      D.fastest.map((f) => el("tr", {},
        el("td", {}, f.case), el("td", {}, f.mode), el("td", {}, testbed(f.testbed)),
        el("td", {}, el("b", {}, f.variant)), el("td", {class: "num"}, fmtUs(f.median_us)),
        el("td", {class: "num"}, f.runner_up && f.ratio !== null ? f.runner_up + " " + fmtRatio(f.ratio, f.ratio_low, f.ratio_high) : "-"),
        el("td", {class: "num"}, f.roofline === null ? "-" : (100 * f.roofline).toFixed(1) + "% of " + f.roof)))));
    return sec;
  }

  function checks() {
    const sec = el("section", {id: "checks"}, el("h2", {}, "The post's findings, checked on every run"));
    if (!D.checks.length) { sec.append(el("p", {}, "No check applies: the store has no run of naive, naive_inplace or a pinned SDPA variant (sdpa_math, sdpa_flash, sdpa_efficient, sdpa_cudnn).")); return sec; }
    sec.append(table(["", "finding", "variant", "testbed", "torch", "expected", "observed"], D.checks.map((c) =>
      el("tr", {class: c.ok ? "ok" : "bad"}, el("td", {}, c.ok ? "\u2713" : "\u2717"), el("td", {}, c.finding),
        el("td", {}, c.variant), el("td", {}, testbed(c.testbed)), el("td", {}, c.torch),
        el("td", {}, c.expected), el("td", {}, c.observed)))));
    return sec;
  }

  // ---------- series ----------
  function matches(s) {
    for (const f of FILTERS) if (state.filters[f] && s[f] !== state.filters[f]) return false;
    if (state.filters.series && s.id !== state.filters.series) return false;
    return !state.onlyChanges || s.changes.length > 0;
  }
  function filterBar(onChange) {
    const bar = el("div", {class: "filters", id: "filters"});
    for (const f of FILTERS) {
      const values = [...new Set(D.series.map((s) => s[f]))].sort();
      const select = el("select", {id: "filter-" + f, name: f, onchange: (e) => { state.filters[f] = e.target.value; delete state.filters.series; onChange(); }},
        el("option", {value: ""}, "all " + f + "s"), values.map((v) => el("option", {value: v}, f === "testbed" ? testbed(v) : v)));
      select.value = state.filters[f] || "";
      bar.append(el("label", {}, f + " ", select));
    }
    bar.append(el("label", {}, el("input", {type: "checkbox", id: "filter-changes", checked: state.onlyChanges,
      onchange: (e) => { state.onlyChanges = e.target.checked; onChange(); }}), " only series with change points"));
    return bar;
  }

  function drawMarks(s, errorBars) {
    return (u) => {
      const ctx = u.ctx, top = u.bbox.top, h = u.bbox.height, dpr = devicePixelRatio || 1;
      ctx.save();
      const vline = (x, color, dash, text) => {
        const px = u.valToPos(x, "x", true);
        ctx.strokeStyle = color; ctx.setLineDash(dash); ctx.lineWidth = 1.5 * dpr;
        ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, top + h); ctx.stroke();
        if (text) {  // right of the line, or left of it where the plot would clip it
          ctx.fillStyle = color; ctx.font = 11 * dpr + "px system-ui";
          const width = ctx.measureText(text).width, right = u.bbox.left + u.bbox.width;
          ctx.fillText(text, px + 3 * dpr + width > right ? px - 3 * dpr - width : px + 3 * dpr, top + 12 * dpr);
        }
      };
      for (const e of s.epochs) vline(e.c - 0.5, "#888", [2 * dpr, 3 * dpr], e.label);
      for (const c of s.changes) {  // at the first bad commit; an unconfirmed step grey and dotted
        if (unconfirmed(c)) vline(c.bad, "#9e9e9e", [2 * dpr, 4 * dpr], "unconfirmed " + pct(c.ratio));
        else vline(c.bad, worse(c) ? "#c62828" : "#2e7d32", [6 * dpr, 3 * dpr], (c.size ? c.size.split("; ")[0] : pct(c.ratio)) + (c.open ? "" : " (" + c.status + ")"));
      }
      if (errorBars) {
        ctx.setLineDash([]); ctx.strokeStyle = "#1f4e79"; ctx.lineWidth = 1 * dpr;
        for (let i = 0; i < s.c.length; i++) {
          const [lo, hi] = interval(s, i), x = u.valToPos(s.c[i], "x", true);
          ctx.beginPath(); ctx.moveTo(x, u.valToPos(lo, "y", true)); ctx.lineTo(x, u.valToPos(hi, "y", true));
          ctx.moveTo(x - 3 * dpr, u.valToPos(lo, "y", true)); ctx.lineTo(x + 3 * dpr, u.valToPos(lo, "y", true));
          ctx.moveTo(x - 3 * dpr, u.valToPos(hi, "y", true)); ctx.lineTo(x + 3 * dpr, u.valToPos(hi, "y", true));
          ctx.stroke();
        }
      }
      ctx.restore();
    };
  }

  function why(s, i) { const at = s.k.indexOf(i); return at < 0 ? "" : ((s.kw || [])[at] || "contended"); }
  function hoverText(s, i) {
    const c = s.c[i], parts = [short(c), C[c][1].slice(0, 16).replace("T", " "), fmtUs(s.m[i]) + " median",
      "IQR " + fmtUs(s.q1[i]) + " - " + fmtUs(s.q3[i]), s.n[i] + " rounds"];
    if (s.k.includes(i)) parts.push("set aside: " + why(s, i) + " (not used)");
    if (s.cp.length && s.cp[i] !== null) parts.push(s.cp[i] + " score copies");
    if (C[c][2]) parts.push(C[c][2]);
    return parts.join(" \u00b7 ");
  }

  function chart(s, box, hover) {
    const contended = new Set(s.k);
    const median = s.m.map((v, i) => (contended.has(i) ? null : v));
    const apart = s.m.map((v, i) => (contended.has(i) ? v : null));
    const errorBars = s.c.length <= 60;
    const width = Math.max(320, box.clientWidth || 800);
    const opts = {
      width, height: 220, legend: {show: false}, cursor: {points: {size: 6}},
      scales: {x: {time: false}},
      axes: [{values: (u, ticks) => ticks.map((t) => (Number.isInteger(t) && C[t] ? short(t).slice(0, 7) : ""))},
             {label: {time: "time per round", wall: "wall time per run"}[s.measure] || s.measure, size: 70, values: yTicks}],
      series: [{},
        {label: "median", stroke: "#1f4e79", width: 2, spanGaps: true, points: {show: s.c.length <= 120, size: 4}},
        {label: "q1", stroke: "rgba(31,78,121,0.25)", width: 1, points: {show: false}},
        {label: "q3", stroke: "rgba(31,78,121,0.25)", width: 1, points: {show: false}},
        {label: "set aside", stroke: "#e65100", fill: "#fff", paths: () => null, points: {show: true, size: 8, width: 2}}],
      bands: [{series: [3, 2], fill: "rgba(31,78,121,0.15)"}],
      hooks: {
        draw: [drawMarks(s, errorBars)],
        setCursor: [(u) => { const i = u.cursor.idx; hover.textContent = i === null || i === undefined ? "Hover the chart for a point's commit, date, value and rounds." : hoverText(s, i); }],
      },
    };
    const u = new uPlot(opts, [s.c, median, s.q1, s.q3, apart], box);
    charts[s.id] = u;
    return u;
  }

  function seriesCard(s, observer) {
    const hover = el("div", {class: "hover"}, "Hover the chart for a point's commit, date, value and rounds.");
    const box = el("div", {class: "chart"});
    const notes = el("ul", {class: "notes"},
      s.changes.map((c) => unconfirmed(c)
        ? el("li", {class: "unconfirmed"}, "unconfirmed step ", pct(c.ratio), " between ", commitLink(c.good), " and ",
          commitLink(c.bad), ": " + c.note)
        : el("li", {class: worse(c) ? "regression" : "improvement"}, worse(c) ? "regression " : "change ", size(c),
          " between ", commitLink(c.good), " and ", commitLink(c.bad),
          c.cause ? ": " + c.cause : "", " [" + stateWords(c) + "]")),
      s.epochs.map((e) => el("li", {class: "epoch"}, "epoch from ", commitLink(e.c), ": " + e.label)),
      s.k.length ? el("li", {class: "contended"}, s.k.length + " point(s) set aside (" + [...new Set(s.kw || ["contended"])].join(", ") +
        ") drawn apart (orange), not used") : null);
    const card = el("article", {class: "series", id: "s-" + s.id, "data-series": s.id, "data-points": s.c.length},
      el("h3", {}, el("a", {href: seriesHref(s)}, label(s))),
      el("p", {class: "meta"}, s.dtype + " \u00b7 " + testbed(s.testbed) + " \u00b7 " + s.c.length + " commits"),
      box, hover, notes);
    card._render = () => { if (!charts[s.id]) chart(s, box, hover); };
    observer.observe(card);
    return card;
  }

  function seriesSection() {
    const sec = el("section", {id: "series"}, el("h2", {}, "Series"));
    const list = el("div", {id: "series-list"});
    const count = el("p", {id: "series-count"});
    const more = el("button", {id: "show-more", onclick: () => { state.shown += PAGE; render(); }}, "show more");
    const observer = new IntersectionObserver((entries) => {
      for (const e of entries) if (e.isIntersecting) { e.target._render(); observer.unobserve(e.target); }
    }, {rootMargin: "400px"});
    function render() {
      for (const id of Object.keys(charts)) { charts[id].destroy(); delete charts[id]; }
      list.replaceChildren();
      const picked = D.series.filter(matches);
      count.textContent = "showing " + Math.min(picked.length, state.shown) + " of " + picked.length +
        " matching series (" + D.series.length + " in all)";
      for (const s of picked.slice(0, state.shown)) list.append(seriesCard(s, observer));
      more.hidden = picked.length <= state.shown;
      writeHash();
      comparison.update();
    }
    sec.append(filterBar(() => { state.shown = PAGE; render(); }), count, list, more);
    sec._render = render;
    return sec;
  }

  // ---------- comparison ----------
  function pointAt(s, commit) { const i = s.c.indexOf(commit); return i < 0 ? null : i; }
  function ratioRow(a, i, b, j, cause) {
    const [alo, ahi] = interval(a, i), [blo, bhi] = interval(b, j), r = b.m[j] / a.m[i];
    const structA = a.st.length ? a.st[a.s[i]] : "", structB = b.st.length ? b.st[b.s[j]] : "";
    let diff = cause || (structA !== structB ? "structure changed" : "same structure");
    const apart = [[a, i], [b, j]].filter(([s, k]) => s.k.includes(k)).map(([s, k]) => short(s.c[k]).slice(0, 7) + " " + why(s, k));
    const copies = (s, k) => (s.cp.length && s.cp[k] !== null && s.cp[k] !== undefined ? String(s.cp[k]) : "not recorded");
    if ((a.cp.length || b.cp.length) && copies(a, i) !== copies(b, j)) diff += "; score copies " + copies(a, i) + " -> " + copies(b, j);
    return {label: label(a), testbed: a.testbed === b.testbed ? testbed(a.testbed) : testbed(a.testbed) + " vs " + testbed(b.testbed),
      a: a.m[i], b: b.m[j], r, lo: blo / Math.max(ahi, 1e-12), hi: bhi / Math.max(alo, 1e-12), diff, id: a.id, apart};
  }
  function compareCommits(ca, cb, picked) {
    const rows = [];
    for (const s of picked) {
      const i = pointAt(s, ca), j = pointAt(s, cb);
      if (i === null || j === null) continue;
      const causes = s.changes.filter((c) => c.bad > Math.min(ca, cb) && c.bad <= Math.max(ca, cb) && c.cause).map((c) => c.cause);
      rows.push(ratioRow(s, i, s, j, causes.join("; ")));
    }
    return rows;
  }
  function compareTestbeds(ta, tb, picked) {
    const key = (s) => [s.variant, s.case, s.mode, s.dtype, s.measure].join("|");
    const onB = new Map(D.series.filter((s) => s.testbed === tb).map((s) => [key(s), s]));
    const rows = [];
    for (const a of picked) {
      if (a.testbed !== ta || !onB.has(key(a))) continue;
      const b = onB.get(key(a)), common = a.c.filter((c) => b.c.includes(c));
      if (!common.length) continue;
      const c = common[common.length - 1];
      rows.push(ratioRow(a, pointAt(a, c), b, pointAt(b, c), ""));
    }
    return rows;
  }
  const comparison = (function () {
    const sec = el("section", {id: "compare"}, el("h2", {}, "Compare two commits or two testbeds"));
    const kind = el("select", {id: "compare-kind"}, el("option", {value: "commits"}, "two commits"), el("option", {value: "testbeds"}, "two testbeds"));
    const a = el("select", {id: "compare-a"}), b = el("select", {id: "compare-b"});
    const out = el("div", {id: "compare-table"});
    const testbeds = [...new Set(D.series.map((s) => s.testbed))].sort();
    function options() {
      const list = kind.value === "commits" ? C.map((c, i) => [String(i), c[0].slice(0, 8) + " " + c[1].slice(0, 10) + " " + (c[2] || "").slice(0, 40)])
        : testbeds.map((t) => [t, testbed(t)]);
      for (const s of [a, b]) s.replaceChildren(...list.map(([v, t]) => el("option", {value: v}, t)));
      if (kind.value === "commits") {
        // the last confirmed change, else the newest two commits with a clean point: never a set-aside baseline
        const confirmed = D.series.flatMap((s) => s.changes.filter((c) => !unconfirmed(c))).sort((x, y) => y.bad - x.bad || (y.open - x.open))[0];
        const clean = [...new Set(D.series.flatMap((s) => s.c.filter((c, i) => !s.k.includes(i))))].sort((x, y) => x - y);
        const pick = confirmed ? [confirmed.good, confirmed.bad] : clean.length >= 2 ? clean.slice(-2) : [0, C.length - 1];
        a.value = String(pick[0]); b.value = String(pick[1]);
      } else { a.value = testbeds[0] || ""; b.value = testbeds[1] || testbeds[0] || ""; }
    }
    function update() {
      const picked = D.series.filter(matches);
      const rows = kind.value === "commits" ? compareCommits(Number(a.value), Number(b.value), picked) : compareTestbeds(a.value, b.value, picked);
      rows.sort((x, y) => y.r - x.r);
      out.replaceChildren(rows.length ? table(["benchmark", "testbed", "A", "B", "B / A [95% interval]", "structure"],
        rows.slice(0, 200).map((r) => el("tr", {class: r.apart.length ? "set-aside" : r.lo > 1 ? "regression" : r.hi < 1 ? "improvement" : "", "data-series": r.id},
          el("td", {}, r.label), el("td", {}, r.testbed), el("td", {class: "num"}, fmtUs(r.a)), el("td", {class: "num"}, fmtUs(r.b)),
          el("td", {class: "num"}, fmtRatio(r.r, r.lo, r.hi), r.apart.length ? el("span", {class: "apart"}, " set aside: " + r.apart.join("; ")) : null),
          el("td", {class: "cause"}, r.diff)))) :
        el("p", {}, "No benchmark of the filtered series has points on both sides."));
      if (rows.length > 200) out.append(el("p", {}, "the 200 largest ratios of " + rows.length));
    }
    kind.addEventListener("change", () => { options(); update(); });
    a.addEventListener("change", update); b.addEventListener("change", update);
    options();
    sec.append(el("p", {class: "filters"}, el("label", {}, "compare ", kind), el("label", {}, " A ", a), el("label", {}, " B ", b)),
      el("p", {class: "meta"}, "Ratios of medians; the interval is the ratio of the medians' 95% intervals (median \u00b1 1.58 IQR/\u221arounds). Filters above apply."), out);
    return {sec, update};
  })();

  // ---------- one run: implementations side by side, medians with error bars ----------
  function groupChart(g, box) {
    const x = g.labels.map((_, i) => i);
    const bars = (u) => {
      const ctx = u.ctx, dpr = devicePixelRatio || 1;
      ctx.save(); ctx.strokeStyle = "#1f4e79"; ctx.lineWidth = 1.5 * dpr;
      for (let i = 0; i < x.length; i++) {
        if (g.lo[i] === null || g.hi[i] === null) continue;
        const px = u.valToPos(i, "x", true), lo = u.valToPos(g.lo[i], "y", true), hi = u.valToPos(g.hi[i], "y", true);
        ctx.beginPath(); ctx.moveTo(px, lo); ctx.lineTo(px, hi);
        ctx.moveTo(px - 5 * dpr, lo); ctx.lineTo(px + 5 * dpr, lo); ctx.moveTo(px - 5 * dpr, hi); ctx.lineTo(px + 5 * dpr, hi);
        ctx.stroke();
      }
      ctx.restore();
    };
    const values = g.m.concat(g.lo.filter((v) => v !== null), g.hi.filter((v) => v !== null));
    const opts = {
      width: Math.max(320, box.clientWidth || 600), height: 240, legend: {show: false},
      scales: {x: {time: false, range: [-0.5, x.length - 0.5]}, y: {range: [0, Math.max(...values) * 1.1]}},
      axes: [{splits: () => x, values: (u, ticks) => ticks.map((t) => g.labels[t] || ""), rotate: 0, size: 40},
             {label: "median", size: 70, values: yTicks}],
      series: [{}, {label: "median", stroke: "#1f4e79", paths: () => null, points: {show: true, size: 9, fill: "#1f4e79"}}],
      hooks: {draw: [bars]},
    };
    charts[g.title] = new uPlot(opts, [x, g.m], box);
  }
  function groupsSection() {
    const sec = el("section", {id: "groups"}, el("h2", {}, "Medians with 95% intervals, per case and mode"),
      el("p", {class: "meta"}, "Error bars: median \u00b1 1.58 IQR/\u221arounds (McGill, Tukey and Larsen 1978)."));
    const list = el("div", {id: "group-list"});
    sec.append(list);
    sec._render = () => {
      for (const g of D.groups) {
        const box = el("div", {class: "chart"});
        list.append(el("article", {class: "series group", "data-group": g.title, "data-points": g.m.length},
          el("h3", {}, g.title), box,
          el("p", {class: "meta"}, g.labels.map((l, i) => l + " " + fmtUs(g.m[i])).join(" \u00b7 "))));
        groupChart(g, box);
      }
    };
    return sec;
  }

  // the single run's full table (rendered in Python: report.results owns the columns)
  function detail() {
    const sec = el("section", {id: "detail"}, el("h2", {}, "All results"));
    const table = el("table", {}, el("thead", {}, el("tr", {}, D.detail.header.map((h) => el("th", {}, h)))),
      el("tbody", {}, D.detail.rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
    sec.append(table);
    if (D.detail.skipped.length) sec.append(el("h3", {}, "Skipped"), el("ul", {}, D.detail.skipped.map((t) => el("li", {}, t))));
    return sec;
  }

  // ---------- links (#variant=...&case=...&series=ID) ----------
  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    for (const f of FILTERS.concat(["series"])) if (params.get(f)) state.filters[f] = params.get(f);
  }
  function writeHash() {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(state.filters)) if (v) params.set(k, v);
    const text = params.toString();
    if (("#" + text) !== location.hash && !(text === "" && location.hash === "")) history.replaceState(null, "", text ? "#" + text : location.pathname);
  }

  // ---------- page ----------
  function main() {
    const t0 = performance.now();
    readHash();
    const dates = C.map((c) => c[1]).filter(Boolean).sort();
    document.getElementById("summary").textContent = D.subtitle || D.series.length + " series over " + C.length + " commits" +
      (dates.length ? " (" + dates[0].slice(0, 10) + " to " + dates[dates.length - 1].slice(0, 10) + ")" : "") +
      " on " + new Set(D.series.map((s) => s.testbed)).size + " testbed(s)";
    const history = D.series.length > 0;
    const series = seriesSection(), groups = groupsSection();
    const parts = [["findings", "Findings"], ["fastest", "Fastest"], ["checks", "Checks"]]
      .concat(D.groups.length ? [["groups", "Charts"]] : []).concat(history ? [["series", "Series"], ["compare", "Compare"]] : []);
    const nav = el("nav", {}, parts.map(([id, t]) => el("a", {href: "#" + id, onclick: (e) => { e.preventDefault(); document.getElementById(id).scrollIntoView(); }}, t)));
    document.getElementById("app").replaceChildren(nav, findings(), fastest(), checks(), ...(D.groups.length ? [groups] : []),
      ...(history ? [series, comparison.sec] : []), ...(D.detail ? [detail()] : []));
    if (D.groups.length) groups._render();
    if (history) series._render();
    window.addEventListener("hashchange", () => { state.filters = {}; readHash(); for (const f of FILTERS) document.getElementById("filter-" + f).value = state.filters[f] || ""; series._render(); });
    if (state.filters.series) { const card = document.getElementById("s-" + state.filters.series); if (card) card.scrollIntoView(); }
    window.perfsuiteReady = {ms: performance.now() - t0};
    document.body.setAttribute("data-ready", "1");
  }
  main();
})();
