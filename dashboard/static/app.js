// The dashboard's only script, no dependencies. On a queue's page it polls
// the queue's stats every second, updates the numbers and lane bars, and
// draws the last minutes of depth and of rates; on the list it polls each
// queue's stats to show its rates. A rate is the change of a total
// (Stats.Enqueued, Stats.Acked) between two polls over the time between them.
(function () {
  const max = 300; // five minutes at one poll a second
  const set = (id, v) => { const e = document.getElementById(id); if (e) e.textContent = v; };
  const fmtRate = (r) => r === null ? '–' : (r >= 100 ? Math.round(r).toString() : r.toFixed(1));

  // rater turns successive totals into rates per second; null when a total
  // went down (the counts key was reset). Its first sample is the one the
  // server rendered the page with (the element's data-enqueued, data-acked),
  // so the first poll already gives a rate and the page is not read twice.
  function rater(el) {
    let prev = { t: Date.now(), enqueued: Number(el.dataset.enqueued), acked: Number(el.dataset.acked) };
    return function (s, t) {
      let out = { enqueued: null, acked: null };
      if (t > prev.t) {
        const dt = (t - prev.t) / 1000;
        for (const k of ['enqueued', 'acked']) {
          const d = s[k] - prev[k];
          out[k] = d >= 0 ? d / dt : null;
        }
      }
      prev = { t: t, enqueued: s.enqueued, acked: s.acked };
      return out;
    };
  }

  function draw(canvas, points, series) {
    if (!canvas) return;
    const c = canvas.getContext('2d'), w = canvas.width, h = canvas.height;
    c.clearRect(0, 0, w, h);
    let top = 1;
    const span = Math.max(points.length, 60); // a chart fills up over its first minute
    for (const p of points) for (const [key] of series) top = Math.max(top, p[key] || 0);
    for (const [key, color] of series) {
      c.strokeStyle = color; c.beginPath();
      let started = false;
      points.forEach((p, i) => {
        if (p[key] === null || p[key] === undefined) return;
        const x = w - (points.length - 1 - i) * (w / span), y = h - 2 - (p[key] / top) * (h - 4);
        started ? c.lineTo(x, y) : c.moveTo(x, y);
        started = true;
      });
      c.stroke();
    }
    c.fillStyle = '#777'; c.fillText(String(Math.round(top)), 2, 10);
  }

  async function stats(base, name) {
    const r = await fetch(base + 'api/stats/' + encodeURIComponent(name));
    if (!r.ok) throw new Error(r.status);
    return r.json();
  }

  const queue = document.body.dataset.queue;
  if (queue) {
    const points = []; // {ready, delayed, inflight, enqueued, acked}
    const rate = rater(document.body);
    async function poll() {
      try {
        const s = await stats('../', queue);
        const r = rate(s, Date.now());
        set('ready', s.ready); set('delayed', s.delayed); set('inflight', s.in_flight); set('dead', s.dead);
        set('oldest', s.oldest_ready_s.toFixed(1) + 's'); set('paused', s.paused ? 'paused' : 'running');
        set('enq-rate', fmtRate(r.enqueued)); set('ack-rate', fmtRate(r.acked));
        const top = Math.max(1, ...s.lanes);
        s.lanes.forEach((n, i) => {
          const bar = document.getElementById('lane-' + i);
          if (bar) bar.style.width = (n * 100 / top) + '%';
          set('lane-n-' + i, n);
        });
        (s.shards || []).forEach((sh) => {
          for (const f of ['ready', 'delayed', 'in_flight', 'dead']) set('shard-' + sh.shard + '-' + f, sh[f]);
          set('shard-' + sh.shard + '-node', sh.node || '-');
        });
        points.push({ ready: s.ready, delayed: s.delayed, inflight: s.in_flight, enqueued: r.enqueued, acked: r.acked });
        if (points.length > max) points.shift();
        draw(document.getElementById('chart'), points, [['ready', '#4a7bd0'], ['delayed', '#d08a4a'], ['inflight', '#5aa55a']]);
        draw(document.getElementById('rates'), points, [['enqueued', '#8a4ad0'], ['acked', '#3a9a9a']]);
      } catch (e) { /* the next poll tries again */ }
    }
    for (const f of document.querySelectorAll('form[data-confirm]')) {
      f.addEventListener('submit', (e) => { if (!confirm(f.dataset.confirm)) e.preventDefault(); });
    }
    setInterval(poll, 1000);
    return;
  }

  // The queue list: rates per row, every two seconds.
  const rows = Array.from(document.querySelectorAll('tr[data-queue]'));
  const raters = new Map(rows.map((tr) => [tr, rater(tr)]));
  async function pollAll() {
    await Promise.all(rows.map(async (tr) => {
      try {
        const s = await stats('', tr.dataset.queue);
        const r = raters.get(tr)(s, Date.now());
        const e = tr.querySelector('.enq-rate'), a = tr.querySelector('.ack-rate');
        if (e) e.textContent = fmtRate(r.enqueued);
        if (a) a.textContent = s.reliable ? fmtRate(r.acked) : '–';
      } catch (e) { /* the next poll tries again */ }
    }));
  }
  if (rows.length) setInterval(pollAll, 2000);
})();
