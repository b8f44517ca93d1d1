// report.js: draws the plots of a Gantry simulation report (gantry sim --html, gantry
// compare --html) into inline SVG. Compiled into the gantry binary and written into the
// page, so the page needs no network. The data is the JSON in <script id="gantry-data">:
//   {title, subtitle, table: {columns, rows}, runs: [{policy, report, timeline, wait_cdf}]}
// (see docs/simulator.md). Every plot container gets one <svg>; each series is a
// <path class="series"> or a <rect class="bar">, which the headless browser test counts.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1',
                 '#ff9da7', '#9c755f', '#bab0ac'];
const TIER_COLORS = {'critical': '#e15759', 'standard': '#4e79a7', 'best-effort': '#59a14f'};
const W = 600, H = 300, M = {left: 62, right: 16, top: 12, bottom: 42};

function html(tag, attrs, parent, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function svg(tag, attrs, parent, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

// Up to about n round tick values covering [lo, hi].
function ticks(lo, hi, n) {
  if (!(hi > lo)) hi = lo + 1;
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

function num(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return '-';
  const a = Math.abs(x);
  if (digits === undefined) digits = a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
  return x.toLocaleString('en-US', {maximumFractionDigits: digits});
}

// Simulated time shown in the unit that suits the run's span.
function timeUnit(spanS) {
  if (spanS > 3 * 86400) return {div: 86400, name: 'days'};
  if (spanS > 3 * 3600) return {div: 3600, name: 'hours'};
  if (spanS > 180) return {div: 60, name: 'minutes'};
  return {div: 1, name: 'seconds'};
}

// One chart: title, legend, axes; returns the plotting area and the scales.
// spec: {title, xLabel, yLabel, x: [lo, hi], y: [lo, hi], xTicks?: [[value, label]], legend}
function frame(parent, spec) {
  const box = html('div', {'class': 'chart'}, parent);
  html('h3', {}, box, spec.title);
  const legend = html('div', {'class': 'legend'}, box);
  for (const item of spec.legend) {
    const li = html('span', {'class': 'item'}, legend);
    html('span', {'class': 'swatch', 'style': 'background:' + item.color}, li);
    li.appendChild(document.createTextNode(item.name));
  }
  const root = svg('svg', {'viewBox': `0 0 ${W} ${H}`, 'width': W, 'height': H, 'role': 'img'}, box);
  svg('title', {}, root, spec.title);
  const [x0, x1] = spec.x, [y0, y1] = spec.y;
  const pw = W - M.left - M.right, ph = H - M.top - M.bottom;
  const sx = v => M.left + (x1 > x0 ? (v - x0) / (x1 - x0) : 0) * pw;
  const sy = v => M.top + ph - (y1 > y0 ? (v - y0) / (y1 - y0) : 0) * ph;
  const axes = svg('g', {'class': 'axes'}, root);
  const yt = ticks(y0, y1, 5);
  for (const v of yt) {
    svg('line', {'x1': M.left, 'x2': W - M.right, 'y1': sy(v), 'y2': sy(v), 'class': 'grid'}, axes);
    svg('text', {'x': M.left - 6, 'y': sy(v) + 4, 'text-anchor': 'end'}, axes, num(v));
  }
  const xt = spec.xTicks || ticks(x0, x1, 6).map(v => [v, num(v)]);
  for (const [v, label] of xt) {
    if (v < x0 - 1e-9 || v > x1 + 1e-9) continue;
    svg('line', {'x1': sx(v), 'x2': sx(v), 'y1': M.top + ph, 'y2': M.top + ph + 4, 'class': 'tick'}, axes);
    svg('text', {'x': sx(v), 'y': M.top + ph + 16, 'text-anchor': 'middle'}, axes, label);
  }
  svg('line', {'x1': M.left, 'x2': W - M.right, 'y1': M.top + ph, 'y2': M.top + ph, 'class': 'axis'}, axes);
  svg('line', {'x1': M.left, 'x2': M.left, 'y1': M.top, 'y2': M.top + ph, 'class': 'axis'}, axes);
  svg('text', {'x': M.left + pw / 2, 'y': H - 6, 'text-anchor': 'middle', 'class': 'label'}, axes, spec.xLabel);
  svg('text', {'x': 14, 'y': M.top + ph / 2, 'text-anchor': 'middle', 'class': 'label',
               'transform': `rotate(-90 14 ${M.top + ph / 2})`}, axes, spec.yLabel);
  const plot = svg('g', {'class': 'data'}, root);
  return {box, root, plot, sx, sy, y0};
}

// Points of a step function: value ys[i] over [xs[i], xs[i+1]]; equal neighbours merge.
function steps(xs, ys) {
  const pts = [];
  for (let i = 0; i < ys.length; ++i) {
    const y = ys[i] === null ? 0 : ys[i];
    if (pts.length && pts[pts.length - 1][1] === y) {
      pts[pts.length - 1] = [xs[i + 1], y];
      continue;
    }
    pts.push([xs[i], y], [xs[i + 1], y]);
  }
  return pts;
}

function pathOf(pts, f) {
  return pts.map((p, i) => (i ? 'L' : 'M') + f.sx(p[0]).toFixed(1) + ',' + f.sy(p[1]).toFixed(1)).join('');
}

function drawLine(f, name, color, pts, dashed) {
  const p = svg('path', {'class': 'series', 'data-series': name, 'd': pathOf(pts, f), 'fill': 'none',
                         'stroke': color, 'stroke-width': 1.6}, f.plot);
  if (dashed) p.setAttribute('stroke-dasharray', '5 3');
  svg('title', {}, p, name);
}

// Time-series chart of bucket means. series: [{name, color, values}]; stacked: areas.
// lines: [{name, color, values, dashed}] drawn on top, never stacked.
function timeChart(parent, run, spec) {
  const tl = run.timeline, n = tl.capacity_gpus.length;
  const unit = timeUnit(tl.end_s - tl.t0_s);
  const xs = [];
  for (let i = 0; i <= n; ++i) xs.push(Math.min(tl.t0_s + i * tl.bucket_s, tl.end_s) / unit.div);
  const stacked = spec.stacked ? spec.series : [];
  const lines = (spec.stacked ? [] : spec.series).concat(spec.lines || []);
  const top = new Array(n).fill(0);
  let ymax = 0;
  for (const s of stacked) s.values.forEach((v, i) => { top[i] += v || 0; ymax = Math.max(ymax, top[i]); });
  for (const s of lines) for (const v of s.values) ymax = Math.max(ymax, v || 0);
  const f = frame(parent, {title: spec.title, xLabel: `simulated time (${unit.name})`,
                           yLabel: spec.yLabel, x: [xs[0], xs[n]], y: [0, ymax > 0 ? ymax * 1.05 : 1],
                           legend: spec.series.concat(spec.lines || [])});
  const lower = new Array(n).fill(0);
  for (const s of stacked) {
    const upper = lower.map((v, i) => v + (s.values[i] || 0));
    const pts = steps(xs, upper).concat(steps(xs, lower).reverse());
    const p = svg('path', {'class': 'series', 'data-series': s.name, 'd': pathOf(pts, f) + 'Z',
                           'fill': s.color, 'fill-opacity': 0.75, 'stroke': s.color, 'stroke-width': 0.5}, f.plot);
    svg('title', {}, p, s.name);
    upper.forEach((v, i) => { lower[i] = v; });
  }
  for (const s of lines) drawLine(f, s.name, s.color, steps(xs, s.values), s.dashed);
  if (spec.note) html('p', {'class': 'note'}, f.box, spec.note);
  if (n === 0) html('p', {'class': 'note'}, f.box, 'The run had no simulated time span.');
  return f;
}

// Grouped bar chart. groups: [{label, bars: [{name, color, value}]}].
function barChart(parent, spec) {
  let ymax = 0;
  for (const g of spec.groups) for (const b of g.bars) ymax = Math.max(ymax, b.value || 0);
  const legend = [];
  for (const g of spec.groups) for (const b of g.bars) if (!legend.some(l => l.name === b.name)) legend.push(b);
  const k = Math.max(1, spec.groups.length);
  const f = frame(parent, {title: spec.title, xLabel: spec.xLabel, yLabel: spec.yLabel, x: [0, k],
                           y: [0, ymax > 0 ? ymax * 1.1 : 1], legend: spec.legendless ? [] : legend,
                           xTicks: spec.groups.map((g, i) => [i + 0.5, g.label])});
  spec.groups.forEach((g, gi) => {
    const slot = (f.sx(gi + 1) - f.sx(gi)) * 0.8 / Math.max(1, g.bars.length);
    g.bars.forEach((b, bi) => {
      const x = f.sx(gi) + (f.sx(gi + 1) - f.sx(gi)) * 0.1 + bi * slot;
      const y = f.sy(b.value || 0);
      const r = svg('rect', {'class': 'bar', 'data-series': b.name, 'x': x.toFixed(1), 'y': y.toFixed(1),
                             'width': Math.max(1, slot - 2).toFixed(1), 'height': (f.sy(0) - y).toFixed(1),
                             'fill': b.color}, f.plot);
      svg('title', {}, r, `${g.label} ${b.name}: ${num(b.value)}`);
    });
  });
  return f;
}

// Queue-wait CDF per tier, on a log scale of log10(1 + seconds).
function waitCdf(parent, run) {
  const pos = s => Math.log10(1 + s);
  let maxS = 1;
  const tiers = Object.entries(run.wait_cdf).filter(([, c]) => c.wait_s.length > 0);
  for (const [, c] of tiers) maxS = Math.max(maxS, c.wait_s[c.wait_s.length - 1]);
  const marks = [[0, '0'], [1, '1 s'], [10, '10 s'], [60, '1 min'], [600, '10 min'], [3600, '1 h'],
                 [36000, '10 h'], [86400, '1 d'], [864000, '10 d']];
  const f = frame(parent, {title: 'Queue wait CDF by tier', xLabel: 'queue wait, first start minus submit (log scale)',
                           yLabel: 'fraction of started jobs', x: [0, pos(maxS) * 1.02], y: [0, 1],
                           xTicks: marks.filter(m => m[0] <= maxS * 1.02).map(m => [pos(m[0]), m[1]]),
                           legend: tiers.map(([t]) => ({name: t, color: TIER_COLORS[t]}))});
  for (const [t, c] of tiers) {
    const pts = [[0, 0]];
    c.wait_s.forEach((s, i) => { pts.push([pos(s), pts[pts.length - 1][1]], [pos(s), c.fraction[i]]); });
    pts.push([pos(maxS) * 1.02, 1]);
    drawLine(f, t, TIER_COLORS[t], pts, false);
  }
  if (!tiers.length) html('p', {'class': 'note'}, f.box, 'No job started.');
  return f;
}

// Running totals of per-bucket counts (each bucket shows the total at its end).
function cumulative(values) {
  let sum = 0;
  return values.map(v => (sum += v));
}

function plots(section, run) {
  const tl = run.timeline, rep = run.report;
  const queueNames = Object.keys(tl.by_queue);
  const charts = {
    'alloc-tier': c => timeChart(c, run, {
      title: 'GPUs allocated by tier', yLabel: 'GPUs (bucket mean)', stacked: true,
      series: Object.entries(tl.by_tier).map(([t, v]) => ({name: t, color: TIER_COLORS[t], values: v})),
      lines: [{name: 'GPUs up', color: '#333', values: tl.capacity_gpus, dashed: true}]}),
    'alloc-queue': c => timeChart(c, run, {
      title: 'GPUs allocated by queue (own jobs)', yLabel: 'GPUs (bucket mean)', stacked: true,
      series: queueNames.map((q, i) => ({name: q, color: PALETTE[i % PALETTE.length], values: tl.by_queue[q]})),
      lines: [{name: 'GPUs up', color: '#333', values: tl.capacity_gpus, dashed: true}]}),
    'pending': c => timeChart(c, run, {
      title: 'Queue length', yLabel: 'pending jobs (bucket mean)',
      series: [{name: 'pending jobs', color: PALETTE[0], values: tl.pending_jobs}]}),
    'pending-cause': c => timeChart(c, run, {
      title: 'Pending jobs by why they wait', yLabel: 'pending jobs (bucket mean)', stacked: true,
      series: Object.entries(tl.pending_by_cause).map(([k, v], i) => ({name: k, color: PALETTE[i % PALETTE.length], values: v})),
      lines: [{name: 'pending jobs', color: '#333', values: tl.pending_jobs, dashed: true}],
      note: 'Each pending job counted under the first word of the scheduler\'s latest reason for it: ' +
            'capacity (no room now), a reservation holding the GPUs that fit, a preemption under way, its queue at ' +
            'its burst, a spent budget, its time window; not yet placed until its first pass.'}),
    'wait-cdf': c => waitCdf(c, run),
    'queue-usage': c => barChart(c, {
      title: 'Queue usage against guarantee and burst', xLabel: 'queue (usage includes child queues)',
      yLabel: 'GPUs',
      groups: tl.queues.map(q => ({label: q.name, bars: [
        {name: 'mean allocated', color: PALETTE[0], value: q.mean_subtree_gpus},
        {name: 'guaranteed', color: PALETTE[2], value: q.guaranteed_gpus}]
        .concat(q.burst_gpus === null ? [] : [{name: 'burst limit', color: PALETTE[1], value: q.burst_gpus}])}))}),
    'sharing': c => timeChart(c, run, {
      title: 'MIG and MPS / time-slice occupancy', yLabel: 'GPUs held through sharing (bucket mean)',
      series: [{name: 'MIG instances', color: PALETTE[6], values: tl.sharing_gpus.mig},
               {name: 'MPS shares', color: PALETTE[1], values: tl.sharing_gpus.mps},
               {name: 'time-slice shares', color: PALETTE[4], values: tl.sharing_gpus.timeslice}]}),
    'fragmentation': c => timeChart(c, run, {
      title: 'Unallocated and fragmented GPUs', yLabel: 'GPUs (bucket mean)',
      series: [{name: 'unallocated GPUs (up minus allocated)', color: PALETTE[9],
                values: tl.capacity_gpus.map((v, i) => Math.max(0, v - tl.allocated_gpus[i]))}]
        .concat(tl.fragmented_gpus ? [{name: 'fragmented GPUs (FGD)', color: PALETTE[3], values: tl.fragmented_gpus}] : []),
      note: tl.fragmented_gpus ? 'Fragmented GPUs: free capacity the observed job mix could not use, sampled at the first change in each bucket.'
                               : 'This build does not measure fragmentation.'}),
    'idle-cause': c => timeChart(c, run, {
      title: 'Idle GPUs by why nothing uses them', yLabel: 'GPUs (bucket mean)', stacked: true,
      series: Object.entries(tl.idle_gpus_by_cause || {}).map(([k, v], i) => ({name: k, color: PALETTE[i % PALETTE.length], values: v})),
      lines: [{name: 'unallocated GPUs (up minus allocated)', color: '#333', dashed: true,
               values: tl.capacity_gpus.map((v, i) => Math.max(0, v - tl.allocated_gpus[i]))}],
      note: tl.idle_gpus_by_cause
        ? 'Sampled at the first change in each bucket. The free GPUs of a pool count under the first of: nodes down; ' +
          'nothing waits; no waiting job accepts its model; none may use its pool or sharing mode; what may use it waits ' +
          'behind a reservation; does not fit it (fragmented: too few free together, or CPUs or memory); is held by its ' +
          'queue\'s burst, budget or window; has not had its first pass (or waits for another reason).'
        : 'This build does not measure idle GPUs by cause.'}),
    'preemptions': c => timeChart(c, run, {
      title: 'Runs ended early, cumulative', yLabel: 'runs ended so far',
      series: [{name: 'preemptions', color: PALETTE[3], values: cumulative(tl.preemptions)},
               {name: 'requeues (node failures)', color: PALETTE[1], values: cumulative(tl.requeues)},
               {name: 'idle reclaims', color: PALETTE[8], values: cumulative(tl.reclaims)}]}),
    'lost-work': c => barChart(c, {
      title: 'Lost work by cause', xLabel: 'cause', yLabel: 'GPU-hours lost', legendless: true,
      groups: [['preemption', 'preempt'], ['node failure', 'requeue'], ['idle reclaim', 'reclaim']].map(
        ([label, key], i) => ({label, bars: [{name: label, color: PALETTE[[3, 1, 8][i]],
                                              value: rep.lost_gpu_hours_by_cause[key]}]}))}),
  };
  const grid = html('div', {'class': 'grid'}, section);
  for (const [id, draw] of Object.entries(charts)) {
    const c = html('div', {'class': 'plot', 'data-plot': id}, grid);
    try {
      draw(c);
    } catch (e) {
      window.gantryError(`plot ${id} of ${run.policy}: ${e && e.stack || e}`);
      html('p', {'class': 'error'}, c, `This plot failed: ${e}`);
    }
  }
}

function summary(parent, table) {
  const t = html('table', {'class': 'summary'}, parent);
  const head = html('tr', {}, html('thead', {}, t));
  for (const c of table.columns) html('th', {}, head, c);
  const body = html('tbody', {}, t);
  for (const row of table.rows) {
    const tr = html('tr', {}, body);
    row.forEach((v, i) => html(i ? 'td' : 'th', {'class': i ? 'num' : ''}, tr, v));
  }
}

function main() {
  const data = JSON.parse(document.getElementById('gantry-data').textContent);
  const page = document.getElementById('page');
  html('h1', {}, page, data.title);
  html('p', {'class': 'sub'}, page, data.subtitle);
  html('h2', {}, page, 'Summary');
  summary(page, data.table);
  for (const run of data.runs) {
    const section = html('section', {'class': 'run', 'data-policy': run.policy}, page);
    html('h2', {}, section, `Policy ${run.policy}`);
    const tl = run.timeline;
    html('p', {'class': 'sub'}, section,
         `Plots show means over buckets of ${num(tl.bucket_s)} s of simulated time ` +
         `(${tl.capacity_gpus.length} buckets, from ${num(tl.t0_s)} s to ${num(tl.end_s)} s).`);
    plots(section, run);
  }
}

try {
  main();
} catch (e) {
  window.gantryError(`report: ${e && e.stack || e}`);
}
document.documentElement.setAttribute('data-done', '1');
