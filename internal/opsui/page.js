"use strict";
(function () {
  var SVG = "http://www.w3.org/2000/svg";
  var $ = function (id) { return document.getElementById(id); };

  function el(name, attrs, text) {
    var e = document.createElementNS(SVG, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // hours lists every hour of the window, so an hour without rows draws as 0, not as a gap.
  function hours(from, to) {
    var out = [];
    var t = new Date(from); t.setUTCMinutes(0, 0, 0);
    for (var end = new Date(to); t <= end; t = new Date(t.getTime() + 3600e3)) out.push(t.toISOString().slice(0, 19) + "Z");
    return out;
  }

  // sum adds field of rows per hour.
  function sum(rows, axis, field) {
    var idx = {}; axis.forEach(function (h, i) { idx[h] = i; });
    var v = axis.map(function () { return 0; });
    rows.forEach(function (r) { if (r.hour in idx) v[idx[r.hour]] += r[field]; });
    return v;
  }

  // chart draws one line per series over the hours, with a circle per data point.
  function chart(target, axis, series) {
    var W = 960, H = 220, L = 44, R = 24, T = 10, B = 28;
    var max = 1;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    var x = function (i) { return L + (axis.length < 2 ? 0 : i * (W - L - R) / (axis.length - 1)); };
    var y = function (v) { return T + (H - T - B) * (1 - v / max); };
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "class": "chart" });
    [0, 0.5, 1].forEach(function (f) {
      var v = Math.round(max * f);
      svg.appendChild(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#eef0f3" }));
      svg.appendChild(el("text", { x: L - 6, y: y(v) + 3, "text-anchor": "end" }, String(v)));
    });
    var step = Math.max(1, Math.ceil(axis.length / 12));
    axis.forEach(function (h, i) {
      if (i % step === 0) svg.appendChild(el("text", { x: x(i), y: H - 8, "text-anchor": "middle" }, h.slice(11, 16)));
    });
    series.forEach(function (s) {
      var pts = s.values.map(function (v, i) { return x(i) + "," + y(v); }).join(" ");
      svg.appendChild(el("polyline", { points: pts, fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.name }));
      s.values.forEach(function (v, i) {
        var c = el("circle", { cx: x(i), cy: y(v), r: v > 0 ? 3 : 1.5, fill: s.color, "class": "pt", "data-series": s.name, "data-value": v });
        c.appendChild(el("title", {}, s.name + " " + axis[i] + ": " + v));
        svg.appendChild(c);
      });
    });
    var legend = document.createElement("div");
    legend.className = "legend";
    series.forEach(function (s) {
      var span = document.createElement("span"), i = document.createElement("i");
      i.style.background = s.color;
      span.appendChild(i);
      span.appendChild(document.createTextNode(s.name));
      legend.appendChild(span);
    });
    var t = $(target);
    t.replaceChildren(svg, legend);
  }

  function totals(data) {
    var f = function (rows, k) { return rows.reduce(function (a, r) { return a + r[k]; }, 0); };
    var req = f(data.scopes, "requests"), rep = f(data.scopes, "replays");
    var items = [
      ["requests", req], ["replays (calls not run again)", rep],
      ["hit rate", req ? (100 * rep / req).toFixed(1) + "%" : "no data"],
      ["conflicts (in progress)", f(data.scopes, "inProgress")], ["takeovers", f(data.scopes, "takeovers")],
      ["store errors", f(data.scopes, "storeErrors")], ["resets (run again on request)", f(data.scopes, "resets")],
      ["keys", f(data.keys, "created")]
    ];
    $("totals").replaceChildren.apply($("totals"), items.map(function (it) {
      var d = document.createElement("div"), b = document.createElement("b");
      b.textContent = String(it[1]);
      d.appendChild(b); d.appendChild(document.createTextNode(it[0]));
      return d;
    }));
  }

  function byScope(data) {
    var agg = {};
    data.scopes.forEach(function (r) {
      var a = agg[r.scope] || (agg[r.scope] = { requests: 0, replays: 0, inProgress: 0, takeovers: 0, failures: 0, storeErrors: 0, resets: 0 });
      for (var k in a) a[k] += r[k];
    });
    var cols = ["requests", "replays", "inProgress", "takeovers", "failures", "storeErrors", "resets"];
    var table = document.createElement("table"), head = table.insertRow();
    ["scope"].concat(cols).forEach(function (c) { var th = document.createElement("th"); th.textContent = c; head.appendChild(th); });
    Object.keys(agg).sort().forEach(function (s) {
      var row = table.insertRow();
      row.insertCell().textContent = s;
      cols.forEach(function (c) { row.insertCell().textContent = String(agg[s][c]); });
    });
    $("byscope").replaceChildren(table);
  }

  function render(data) {
    $("who").textContent = "operator · store " + data.store + (data.tenant ? " · keys of tenant " + data.tenant : "");
    $("note").textContent = data.note;
    if (!data.from) {
      $("status").textContent = data.note;
      return;
    }
    var axis = hours(data.from, data.to);
    chart("traffic", axis, [
      { name: "requests", color: "#3563e9", values: sum(data.scopes, axis, "requests") },
      { name: "replays", color: "#12a150", values: sum(data.scopes, axis, "replays") },
      { name: "in progress (409)", color: "#e98b35", values: sum(data.scopes, axis, "inProgress") }
    ]);
    chart("trouble", axis, [
      { name: "takeovers", color: "#9b35e9", values: sum(data.scopes, axis, "takeovers") },
      { name: "failures", color: "#d92d20", values: sum(data.scopes, axis, "failures") },
      { name: "store errors", color: "#1d2330", values: sum(data.scopes, axis, "storeErrors") },
      { name: "resets", color: "#0e9aa7", values: sum(data.scopes, axis, "resets") }
    ]);
    chart("keys", axis, [
      { name: "created", color: "#3563e9", values: sum(data.keys, axis, "created") },
      { name: "succeeded", color: "#12a150", values: sum(data.keys, axis, "succeeded") },
      { name: "failed", color: "#d92d20", values: sum(data.keys, axis, "failed") }
    ]);
    totals(data);
    byScope(data);
    $("status").textContent = "From " + data.from + " to " + data.to + " (database clock, UTC).";
    document.body.setAttribute("data-loaded", "true");
  }

  // load asks the operator listener, which serves this page, for its figures: no credential, the
  // listener is the operator's own.
  var loads = 0; // only the latest load draws: an earlier answer arriving late is dropped
  function load() {
    var mine = ++loads;
    document.body.removeAttribute("data-loaded");
    $("status").textContent = "Loading…";
    $("status").className = "note";
    var tenant = $("tenant").value.trim();
    fetch("v1/stats?since=" + encodeURIComponent($("since").value) + (tenant ? "&tenant=" + encodeURIComponent(tenant) : ""))
      .then(function (resp) {
        return resp.json().then(function (body) {
          if (!resp.ok) throw new Error(body.title + ": " + body.detail);
          return body;
        });
      })
      .then(function (data) { if (mine === loads) render(data); })
      .catch(function (err) {
        if (mine !== loads) return;
        $("status").textContent = String(err.message || err);
        $("status").className = "error";
      });
  }

  $("filter").addEventListener("submit", function (ev) {
    ev.preventDefault();
    load();
  });
  $("since").addEventListener("change", load);
  load();
})();
