/* The report's one piece of inline JavaScript: the values under the cursor on the time-axis figures.

It earns its place: hovering a latency spike on the timeline draws the same instant as a line
across every probe panel below and shows, in a small box, the time, the level then running and
the value of each line of the panel under the cursor. It reads only the figures' own
`data-hover` attributes (reports.time_axis), builds its text with textContent (nothing from the
run is parsed as HTML), fetches nothing, and the report reads the same without it. */
(function () {
  var figs = [].slice.call(document.querySelectorAll('.tfig[data-hover]'));
  if (!figs.length) return;
  var levelsEl = document.getElementById('run-levels');
  var levels = levelsEl ? JSON.parse(levelsEl.getAttribute('data-levels') || '[]') : [];
  var tip = document.createElement('div');
  tip.className = 'tip';
  document.body.appendChild(tip);
  figs.forEach(function (el) {
    el._h = JSON.parse(el.getAttribute('data-hover'));
    el._line = document.createElement('div');
    el._line.className = 'cursor';
    el.appendChild(el._line);
    el.addEventListener('mousemove', function (ev) { move(el, ev); });
    el.addEventListener('mouseleave', hide);
  });
  function svg(el) { return el.querySelector('svg'); }
  function hide() {
    tip.style.display = 'none';
    figs.forEach(function (o) { o._line.style.display = 'none'; });
  }
  function nearest(ts, t) {
    var lo = 0, hi = ts.length - 1;
    while (hi - lo > 1) { var mid = (lo + hi) >> 1; if (ts[mid] < t) lo = mid; else hi = mid; }
    return Math.abs(ts[lo] - t) <= Math.abs(ts[hi] - t) ? lo : hi;
  }
  function row(text, bold) {
    var d = document.createElement('div');
    d.textContent = text;
    if (bold) d.style.fontWeight = '600';
    tip.appendChild(d);
  }
  function move(el, ev) {
    var h = el._h, r = svg(el).getBoundingClientRect();
    var fx = (ev.clientX - r.left) / r.width, fy = 1 - (ev.clientY - r.top) / r.height;
    if (fx < h.l || fx > h.r) { hide(); return; }
    var t = h.x0 + (fx - h.l) / (h.r - h.l) * (h.x1 - h.x0);
    figs.forEach(function (o) {
      var s = svg(o).getBoundingClientRect(), e = o.getBoundingClientRect(), oh = o._h;
      var x = s.left - e.left + (oh.l + (t - oh.x0) / (oh.x1 - oh.x0) * (oh.r - oh.l)) * s.width;
      o._line.style.left = x + 'px';
      o._line.style.top = (s.top - e.top) + 'px';
      o._line.style.height = s.height + 'px';
      o._line.style.display = 'block';
    });
    tip.textContent = '';
    var lv = levels.filter(function (l) { return t >= l[1] && t <= l[2]; })[0];
    row('t = ' + t.toFixed(1) + ' s' + (lv ? ' · ' + lv[0] : ''), true);
    var p = h.panels.filter(function (p) { return fy >= p.y0 && fy <= p.y1 + 0.04; })[0];
    if (p && h.t.length) {
      var i = nearest(h.t, t);
      row(p.title + ' at ' + h.t[i].toFixed(1) + ' s');
      Object.keys(p.lines).forEach(function (k) {
        var v = p.lines[k][i];
        row(k + ': ' + (v === null ? '—' : v));
      });
    }
    tip.style.display = 'block';
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + 'px';
    tip.style.top = (ev.clientY + 14) + 'px';
  }
})();
