// @ts-check
// Line charts drawn as SVG, by hand: a few series of (time, value) points over the last minutes,
// on a linear or a logarithmic scale. A chart library would bring far more than this needs and
// most evaluate code at run time, which the page's Content-Security-Policy forbids.
'use strict';

const CHART_W = 640;
const CHART_H = 200;
const PAD = { left: 58, right: 12, top: 10, bottom: 24 };

/**
 * @typedef {{ name: string, cls: string, points: [number, number][] }} Series
 * @typedef {{ title: string, unit: (v: number) => string, log?: boolean, windowMs: number, now: number, series: Series[], empty: string, id: string }} ChartSpec
 */

/** A round step for `n` ticks over `span`. @param {number} span @param {number} n */
function niceStep(span, n) {
  const raw = span / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  const m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/**
 * A chart: its title, an SVG of its series, and a legend.
 * @param {ChartSpec} spec
 * @returns {HTMLElement}
 */
function lineChart(spec) {
  const { windowMs, now } = spec;
  const x0 = now - windowMs;
  const innerW = CHART_W - PAD.left - PAD.right;
  const innerH = CHART_H - PAD.top - PAD.bottom;
  const values = spec.series.flatMap((se) => se.points.filter(([t]) => t >= x0).map(([, v]) => v));
  const svg = s('svg', { viewBox: `0 0 ${CHART_W} ${CHART_H}`, role: 'img', 'aria-label': spec.title, 'data-chart': spec.id });
  svg.appendChild(s('title', null, spec.title));
  const x = (/** @type {number} */ t) => PAD.left + ((t - x0) / windowMs) * innerW;
  // The y scale: linear from 0, or logarithmic over the decades the values span.
  /** @type {(v: number) => number} */
  let y;
  /** @type {number[]} */
  let ticks;
  const positive = values.filter((v) => v > 0);
  if (spec.log === true && positive.length > 0) {
    const lo = Math.floor(Math.log10(Math.min(...positive)));
    const hi = Math.max(lo + 1, Math.ceil(Math.log10(Math.max(...positive))));
    y = (v) => PAD.top + innerH - ((Math.log10(Math.max(v, 10 ** lo)) - lo) / (hi - lo)) * innerH;
    ticks = [];
    for (let d = lo; d <= hi; d++) ticks.push(10 ** d);
  } else {
    const max = Math.max(1e-9, ...values);
    const step = niceStep(max, 4);
    const top = Math.ceil(max / step) * step || 1;
    y = (v) => PAD.top + innerH - (v / top) * innerH;
    ticks = [];
    for (let v = 0; v <= top + step / 2; v += step) ticks.push(v);
  }
  if (values.length === 0) ticks = [];
  for (const v of ticks) {
    svg.appendChild(s('line', { class: 'axis', x1: PAD.left, x2: CHART_W - PAD.right, y1: y(v), y2: y(v) }));
    svg.appendChild(s('text', { class: 'tick', x: PAD.left - 6, y: y(v) + 3, 'text-anchor': 'end' }, spec.unit(v)));
  }
  // Time ticks back from now: every minute on a long window, every 10, 15 or 30 s on a short one.
  const stepMs = [10_000, 15_000, 30_000, 60_000].find((ms) => windowMs / ms <= 6) ?? 60_000;
  for (let m = 0; m * stepMs <= windowMs; m++) {
    const t = now - m * stepMs;
    const ago = (m * stepMs) / 1000;
    const label = m === 0 ? 'now' : ago % 60 === 0 ? `-${ago / 60} min` : `-${ago} s`;
    svg.appendChild(s('text', { class: 'tick', x: x(t), y: CHART_H - 6, 'text-anchor': m === 0 ? 'end' : 'middle' }, label));
  }
  if (values.length === 0) {
    svg.appendChild(s('text', { class: 'empty', x: PAD.left + innerW / 2, y: PAD.top + innerH / 2, 'text-anchor': 'middle' }, spec.empty));
  }
  for (const se of spec.series) {
    const pts = se.points.filter(([t]) => t >= x0).sort((a, b) => a[0] - b[0]);
    let d = '';
    let last = -Infinity;
    for (const [t, v] of pts) {
      // A gap of more than a few seconds (nobody sampled) is left open rather than drawn across.
      d += `${t - last > 5000 ? 'M' : 'L'}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      last = t;
    }
    if (d !== '') svg.appendChild(s('path', { class: `line ${se.cls}`, d }));
  }
  const legend = h(
    'div',
    { class: 'legend' },
    ...spec.series.map((se) => h('span', null, h('span', { class: `swatch ${se.cls}` }), se.name)),
  );
  return h('div', { class: 'chart' }, h('h3', null, spec.title), svg, legend);
}
