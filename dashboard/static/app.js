// Polls the queue's stats every second, updates the numbers and lane bars,
// and draws the last minutes of depth. No dependencies.
(function () {
  const queue = document.body.dataset.queue;
  if (!queue) return;
  const points = []; // {ready, delayed, inflight}
  const max = 300;   // five minutes at one poll a second
  const canvas = document.getElementById('chart');
  const set = (id, v) => { const e = document.getElementById(id); if (e) e.textContent = v; };
  function draw() {
    const c = canvas.getContext('2d'), w = canvas.width, h = canvas.height;
    c.clearRect(0, 0, w, h);
    let top = 1;
    const span = Math.max(points.length, 60); // the chart fills up over its first minute
    for (const p of points) top = Math.max(top, p.ready, p.delayed, p.inflight);
    for (const [key, color] of [['ready', '#4a7bd0'], ['delayed', '#d08a4a'], ['inflight', '#5aa55a']]) {
      c.strokeStyle = color; c.beginPath();
      points.forEach((p, i) => {
        const x = w - (points.length - 1 - i) * (w / span), y = h - 2 - (p[key] / top) * (h - 4);
        i === 0 ? c.moveTo(x, y) : c.lineTo(x, y);
      });
      c.stroke();
    }
  }
  async function poll() {
    try {
      const r = await fetch('../api/stats/' + encodeURIComponent(queue));
      if (r.ok) {
        const s = await r.json();
        set('ready', s.ready); set('delayed', s.delayed); set('inflight', s.in_flight); set('dead', s.dead);
        set('oldest', s.oldest_ready_s.toFixed(1) + 's'); set('paused', s.paused ? 'paused' : 'running');
        const top = Math.max(1, ...s.lanes);
        s.lanes.forEach((n, i) => {
          const bar = document.getElementById('lane-' + i);
          if (bar) bar.style.width = (n * 100 / top) + '%';
          set('lane-n-' + i, n);
        });
        points.push({ ready: s.ready, delayed: s.delayed, inflight: s.in_flight });
        if (points.length > max) points.shift();
        draw();
      }
    } catch (e) { /* the next poll tries again */ }
  }
  for (const f of document.querySelectorAll('form[data-confirm]')) {
    f.addEventListener('submit', (e) => { if (!confirm(f.dataset.confirm)) e.preventDefault(); });
  }
  poll();
  setInterval(poll, 1000);
})();
