// The dashboard's only script, no dependencies, no inline code (the
// Content-Security-Policy allows this file and nothing else). Pages work
// without it; it keeps them live:
//   - a queue's page polls one reading of the queue every 2 s
//     (api/queue/<name>) and redraws from it the numbers, every table and
//     the charts, so that they always come from the same reading, and says
//     when that reading was taken (and when polls fail: "not updating");
//   - the list polls its own page (api/queues?<same query>) and redraws its
//     rows, with rates.
// A rate is the change of a total (Stats.Enqueued, Stats.Acked) between two
// readings over the time between them. Everything shown is set with
// textContent: names, reasons and payloads are never parsed as HTML.
(function () {
  'use strict';
  const hour = 3600e3;
  const $ = (id) => document.getElementById(id);
  const set = (id, v) => { const e = $(id); if (e) e.textContent = v; };
  const fmtRate = (r) => r === null || r === undefined ? '–' : (r >= 100 ? Math.round(r).toString() : r.toFixed(1));
  const pad = (n) => String(n).padStart(2, '0');
  const clock = (ms) => { const d = new Date(ms); return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()); };
  // dur is a duration as Go prints it, to the second: 4s, 2m5s, 1h0m3s.
  function dur(ms) {
    let s = Math.max(0, Math.round(ms / 1000));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    s %= 60;
    return h ? h + 'h' + m + 'm' + s + 's' : m ? m + 'm' + s + 's' : s + 's';
  }

  function fresh(ms) {
    const t = $('asof-time');
    if (!t) return;
    t.textContent = clock(ms);
    t.dataset.ms = ms;
    $('asof').classList.remove('stale');
    const st = $('stale');
    if (st) st.remove();
  }
  function stale(err) {
    const p = $('asof');
    if (!p) return;
    p.classList.add('stale');
    let st = $('stale');
    if (!st) { st = document.createElement('span'); st.id = 'stale'; p.appendChild(st); }
    st.textContent = ' — not updating: ' + err.message;
  }

  async function getJSON(url) {
    const r = await fetch(url, { credentials: 'same-origin', cache: 'no-store' });
    if (!r.ok) throw new Error(r.status + ' ' + (await r.text()).trim());
    return r.json();
  }

  // row makes a table row: a string is a cell's text, a Node its content.
  function row(cells) {
    const tr = document.createElement('tr');
    for (const c of cells) {
      const td = document.createElement('td');
      if (c instanceof Node) td.appendChild(c); else td.textContent = String(c);
      tr.appendChild(td);
    }
    return tr;
  }
  function fill(tbodySel, rows, empty, span) {
    const tb = document.querySelector(tbodySel);
    if (!tb) return;
    tb.replaceChildren(...rows);
    if (!rows.length) {
      const tr = row([empty]);
      tr.className = 'empty';
      tr.firstChild.colSpan = span;
      tb.appendChild(tr);
    }
  }
  function link(text, href, cls, data) {
    const a = document.createElement('a');
    a.textContent = text;
    a.href = href;
    if (cls) a.className = cls;
    for (const k in data || {}) a.dataset[k] = data[k];
    return a;
  }

  // rates turns successive readings into rates per second: null across a
  // gap (no reading for two minutes), or where a total went down (reset).
  function rates(samples) {
    return samples.map((s, i) => {
      const p = samples[i - 1], out = { t: s.t, enqueued: null, acked: null, retried: null, died: null };
      // A gap of more than two minutes (nobody read the queue) draws no
      // rate; readings kept in Redis are a minute apart.
      if (!p || s.t - p.t <= 0 || s.t - p.t > 125e3) return out;
      const dt = (s.t - p.t) / 1000;
      for (const [k, from] of [['enqueued', 'enqueued'], ['acked', 'acked'], ['retried', 'retried'], ['died', 'dead_lettered']]) {
        const d = s[from] - p[from];
        out[k] = d >= 0 ? d / dt : null;
      }
      return out;
    });
  }

  // nice rounds a chart's top up to 1, 2 or 5 times a power of ten.
  function nice(v) {
    if (v <= 1) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // chart draws series over time with both axes: the y axis in unit, from
  // 0, with gridlines; the x axis in minutes before the last reading. A
  // line breaks where a value is missing or readings are 15 s apart.
  function chart(canvas, points, series, unit) {
    if (!canvas || !points.length) return;
    const c = canvas.getContext('2d'), W = canvas.width, H = canvas.height;
    const L = 56, R = 12, T = 16, B = 24, w = W - L - R, h = H - T - B;
    c.clearRect(0, 0, W, H);
    c.font = '11px system-ui, sans-serif';
    const t1 = points[points.length - 1].t, t0 = Math.min(points[0].t, t1 - 120e3);
    let top = 0;
    for (const p of points) for (const [k] of series) if (p[k] !== null && p[k] !== undefined) top = Math.max(top, p[k]);
    top = nice(top);
    const x = (t) => L + (t - t0) / (t1 - t0) * w, y = (v) => T + h - v / top * h;
    // y axis: 0, half and top, with gridlines and the unit above.
    c.strokeStyle = '#ddd'; c.fillStyle = '#555'; c.textAlign = 'right'; c.textBaseline = 'middle';
    const ticks = String(top)[0] === '2' ? 4 : 5; // steps of 1, 2 or 5 times a power of ten
    for (let i = 0; i <= ticks; i++) {
      const v = top * i / ticks;
      c.beginPath(); c.moveTo(L, y(v)); c.lineTo(L + w, y(v)); c.stroke();
      c.fillText(String(Math.round(v * 100) / 100), L - 6, y(v));
    }
    c.textAlign = 'left'; c.textBaseline = 'top';
    c.fillText(unit, 2, 0);
    // x axis: a tick every step, labelled in minutes (or seconds) ago.
    const span = t1 - t0, steps = [10e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3];
    const step = steps.find((s) => span / s <= 6) || 3600e3;
    c.textAlign = 'center';
    c.strokeStyle = '#999'; c.beginPath(); c.moveTo(L, T + h); c.lineTo(L + w, T + h); c.moveTo(L, T); c.lineTo(L, T + h); c.stroke();
    for (let back = 0; back <= span; back += step) {
      const tx = x(t1 - back);
      c.beginPath(); c.moveTo(tx, T + h); c.lineTo(tx, T + h + 4); c.stroke();
      const label = back === 0 ? 'now' : '-' + (step < 60e3 ? back / 1000 + 's' : back / 60e3 + 'm');
      c.fillText(label, tx, T + h + 7);
    }
    c.lineWidth = 1.5;
    for (const [k, color] of series) {
      c.strokeStyle = color; c.beginPath();
      let prev = null;
      for (const p of points) {
        const v = p[k];
        if (v === null || v === undefined) { prev = null; continue; }
        if (prev && p.t - prev.t <= 125e3) c.lineTo(x(p.t), y(v)); else c.moveTo(x(p.t), y(v));
        prev = p;
      }
      c.stroke();
    }
    c.lineWidth = 1;
  }

  const body = document.body;
  const queue = body.dataset.queue;
  if (queue) {
    const api = '../api/queue/' + encodeURIComponent(queue);
    const path = encodeURIComponent(queue);
    const reliable = body.dataset.reliable === 'true';
    const canRequeue = body.dataset.canRequeue === 'true';
    const canRunNow = body.dataset.canRunNow === 'true', canCancel = body.dataset.canCancel === 'true';
    // msg is a message's id linking to its page ('' for a record without one).
    const msg = (id) => id ? link(id, path + '/message?id=' + encodeURIComponent(id), 'msg') : '';
    let samples = [];
    function render(s) {
      fresh(s.at);
      set('ready', s.ready); set('delayed', s.delayed); set('inflight', s.in_flight); set('dead', s.dead);
      set('oldest', s.oldest); set('paused', s.paused ? 'paused' : 'running');
      const outside = Math.max(0, s.ready - s.lanes.reduce((a, b) => a + b, 0));
      set('outside-lanes', outside);
      if ($('lanes-note')) $('lanes-note').hidden = !outside;
      const top = Math.max(1, ...s.lanes);
      s.lanes.forEach((n, i) => {
        const bar = $('lane-' + i);
        if (bar) { bar.max = top; bar.value = n; }
        set('lane-n-' + i, n);
      });
      (s.shards || []).forEach((sh) => {
        for (const f of ['ready', 'delayed', 'in_flight', 'dead']) set('shard-' + sh.shard + '-' + f, sh[f]);
        set('shard-' + sh.shard + '-node', sh.node || '-');
      });
      const r = rates(samples);
      const last = r[r.length - 1] || {};
      set('enq-rate', fmtRate(last.enqueued)); set('ack-rate', fmtRate(last.acked));
      // The failure rate over the last minute of readings: failed / finished.
      const win = samples.filter((x) => x.t >= s.at - 60e3);
      if (win.length > 1) {
        const a = win[0], b = win[win.length - 1];
        const failed = (b.retried - a.retried) + (b.dead_lettered - a.dead_lettered), done = failed + (b.acked - a.acked);
        set('fail-rate', done > 0 && failed >= 0 ? (100 * failed / done).toFixed(1) + '%' : '–');
      }
      chart($('chart'), samples, reliable ? [['ready', '#4a7bd0'], ['delayed', '#d08a4a'], ['in_flight', '#5aa55a'], ['dead', '#c0392b']]
        : [['ready', '#4a7bd0'], ['delayed', '#d08a4a']], 'messages');
      chart($('rates'), r, reliable ? [['enqueued', '#8a4ad0'], ['acked', '#3a9a9a'], ['retried', '#d0a040'], ['died', '#c0392b']] : [['enqueued', '#8a4ad0']], 'messages/s');

      if ($('idle')) $('idle').hidden = !s.idle;
      set('workers-count', s.workers.length + ' live consumer(s) serve it');
      if ($('workers-error')) $('workers-error').hidden = !s.workers_error;
      set('workers-error-text', s.workers_error);
      fill('#workers tbody', s.workers.map((w) => row([w.id + ' (' + w.kind + ')', w.host, w.process + ' ' + w.pid,
        w.in_flight + ' of ' + w.concurrency, w.delivered, dur(s.at - w.started), dur(Math.max(0, s.at - w.last_seen)) + ' ago'])),
        'no live consumer', 7);
      set('peek-count', s.peek.length + ' of ' + s.ready + ' ready');
      fill('#peek tbody', s.peek.map((m) => row([msg(m.id), m.priority, m.attempts, dur(s.at - m.enqueued) + ' ago', m.payload])), 'nothing ready', 5);
      // The pagers, redrawn: the table may have grown or shrunk.
      for (const nav of Object.values(s.pages)) {
        const p = $('pager-' + nav.Param);
        if (!p) continue;
        const links = [];
        if (nav.Prev) links.push(link('← earlier', nav.Prev, 'prev'), ' ');
        if (nav.Next) links.push(link('later →', nav.Next, 'next'));
        p.replaceChildren(...links);
      }
      set('delayed-count', s.pages.delayed_from.Text + ', soonest due first');
      fill('#delayedmsgs tbody', s.delayed_messages.map((m) => {
        const tr = row([msg(m.id), m.priority, m.attempts, dur(m.due - s.at), m.payload, '']);
        const q = '?id=' + encodeURIComponent(m.id);
        if (canRunNow) tr.lastChild.append(link('Run now…', path + '/run-now' + q, 'button run-now', { id: m.id }), ' ');
        if (canCancel) tr.lastChild.append(link('Cancel…', path + '/cancel' + q, 'button danger cancel', { id: m.id }));
        return tr;
      }), 'nothing delayed', 6);
      set('schedules-count', s.schedules.length);
      if ($('schedules-error')) $('schedules-error').hidden = !s.schedules_error;
      set('schedules-error-text', s.schedules_error);
      fill('#schedules tbody', s.schedules.map((c) => row([c.name, c.spec, c.next ? dur(Math.max(0, c.next - s.at)) : 'off',
        c.last ? dur(Math.max(0, s.at - c.last)) + ' ago' : 'never'])), 'no schedule', 4);
      if (!reliable) return;
      set('leased-count', s.pages.inflight_from.Text + ', soonest lease end first');
      fill('#leased tbody', s.leased.map((m) => row([msg(m.id), m.priority, m.attempts, dur(s.at - m.taken) + ' ago', dur(m.deadline - s.at), m.holder, m.payload])), 'nothing in flight', 7);
      set('groups-count', s.top_groups.length + ' shown, the most loaded; ' + s.groups + ' with messages ready');
      fill('#groups tbody', s.top_groups.map((g) => row([g.group, g.ready, g.in_flight, g.limit || '-', g.rate_set ? g.rate : '-',
        g.rate_parked ? 'rate' : (g.parked ? 'yes' : 'no')])), 'no group has messages', 6);
      set('dead-count', s.pages.dead_from.Text + ', oldest first');
      fill('#deadletters tbody', s.dead_letters.map((d) => row([msg(d.id), d.priority, d.attempts, dur(s.at - d.died) + ' ago', d.reason, d.payload,
        canRequeue ? link('Requeue…', path + '/requeue?id=' + encodeURIComponent(d.id), 'button requeue', { id: d.id }) : ''])), 'no dead letters', 7);
      const toggle = $('pause-toggle');
      if (toggle) {
        // Another operator may have paused or resumed it.
        toggle.href = path + (s.paused ? '/resume' : '/pause');
        toggle.textContent = s.paused ? 'Resume consumers…' : 'Pause consumers…';
      }
    }
    async function poll(first) {
      try {
        // The page's own query: the same pages of the state tables.
        const qs = new URLSearchParams(location.search);
        if (first) qs.set('history', '1');
        const s = await getJSON(api + (qs.toString() ? '?' + qs.toString() : ''));
        if (first && s.history) samples = s.history.slice();
        if (!samples.length || samples[samples.length - 1].t < s.at) {
          samples.push({ t: s.at, ready: s.ready, delayed: s.delayed, in_flight: s.in_flight, dead: s.dead, enqueued: s.enqueued, acked: s.acked,
            retried: s.retried, dead_lettered: s.dead_lettered });
        }
        while (samples.length && samples[0].t < s.at - hour) samples.shift();
        render(s);
      } catch (e) { stale(e); }
    }
    poll(true);
    setInterval(poll, 2000);
    return;
  }

  if (body.dataset.workers) {
    // The workers page: the registry read again every 2 s.
    setInterval(async () => {
      try {
        const js = await getJSON('api/workers');
        fresh(js.at);
        set('workers-count', js.workers.length + ' live consumer(s)');
        fill('#allworkers tbody', js.workers.map((w) => {
          const qs = document.createElement('span');
          w.queues.slice(0, 5).forEach((q, i) => {
            if (i) qs.append(', ');
            qs.append(link(q, 'q/' + encodeURIComponent(q)));
          });
          if (w.queues.length > 5) qs.append(' and ' + w.queues.length + ' in all');
          if (w.pattern) qs.append(' (pattern ' + w.pattern + ')');
          return row([w.id + ' (' + w.kind + ')', w.host, w.process + ' ' + w.pid, qs,
            w.in_flight + ' of ' + w.concurrency, w.delivered, dur(js.at - w.started), dur(Math.max(0, js.at - w.last_seen)) + ' ago']);
        }), 'no live consumer', 8);
      } catch (e) { stale(e); }
    }, 2000);
    return;
  }

  if (body.dataset.list) {
    // The list: its own page polled again (the same search, sort and page),
    // every row redrawn, with rates from the totals between polls.
    const prev = new Map();
    const at0 = $('asof-time') ? Number($('asof-time').dataset.ms) : Date.now();
    for (const tr of document.querySelectorAll('tr[data-queue]')) {
      prev.set(tr.dataset.queue, { t: at0, enqueued: Number(tr.dataset.enqueued), acked: Number(tr.dataset.acked) });
    }
    const rate = (name, st, t) => {
      const p = prev.get(name), out = { enqueued: null, acked: null };
      if (p && t > p.t) {
        for (const k of ['enqueued', 'acked']) {
          const d = st[k] - p[k];
          out[k] = d >= 0 ? d / ((t - p.t) / 1000) : null;
        }
      }
      prev.set(name, { t: t, enqueued: st.enqueued, acked: st.acked });
      return out;
    };
    async function pollList() {
      try {
        const js = await getJSON('api/queues' + location.search);
        fresh(js.at);
        const rows = js.queues.map((q) => {
          const name = link(q.name, 'q/' + encodeURIComponent(q.name));
          let tr;
          if (q.error) {
            tr = row([name, q.error]);
            tr.lastChild.colSpan = 9;
            tr.lastChild.className = 'err';
          } else {
            const s = q.stats, r = rate(q.name, s, js.at);
            const cons = q.consumers < 0 ? '?' : (q.idle ? 'none' : q.consumers);
            tr = row([name, s.ready, s.delayed, s.in_flight, cons, s.dead, s.oldest, s.paused ? 'paused' : '–',
              fmtRate(r.enqueued), s.reliable === false ? '–' : fmtRate(r.acked)]);
            ['', 'ready', 'delayed', 'in_flight', q.idle ? 'consumers idle' : 'consumers', 'dead', 'oldest', 'paused', 'enq-rate', 'ack-rate']
              .forEach((cls, i) => { if (cls) tr.children[i].className = cls; });
          }
          tr.dataset.queue = q.name;
          return tr;
        });
        fill('#queues tbody', rows, body.dataset.search ? 'no queue name contains "' + body.dataset.search + '"'
          : 'no queues yet: they appear here once created', 10);
      } catch (e) { stale(e); }
    }
    // A sort by depth reads every queue (a snapshot reused for 5 s): poll
    // it less often than a page of names.
    setInterval(pollList, body.dataset.sort === 'name' ? 2000 : 10000);
  }
})();
