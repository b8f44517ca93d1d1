#include "server/dashboard.h"

namespace gantry::server {

const char* const kDashboardHtml = R"HTML(<!doctype html>
<html><head><meta charset="utf-8"><title>Gantry</title>
<style>
 body { font: 13px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
 h1 { font-size: 18px; } h2 { font-size: 15px; margin-top: 1.5em; }
 table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: left; border-bottom: 1px solid #eee; }
 th { background: #f4f4f4; } .pending { color: #a60; } .running { color: #070; } .down, .failed { color: #b00; }
 #err { color: #b00; }
</style></head><body>
<h1>Gantry</h1>
<label>Token <input id="tok" type="password" size="40"></label> <span id="err"></span>
<h2>Queues</h2><table id="queues"></table>
<h2>Nodes</h2><table id="nodes"></table>
<h2>Jobs</h2><table id="jobs"></table>
<script>
const tok = document.getElementById('tok');
tok.value = localStorage.getItem('gantry-token') || '';
tok.onchange = () => { localStorage.setItem('gantry-token', tok.value); refresh(); };
const esc = s => String(s ?? '').replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
function table(id, cols, rows) {
  const head = '<tr>' + cols.map(c => '<th>' + esc(c[0]) + '</th>').join('') + '</tr>';
  const body = rows.map(r => '<tr>' + cols.map(c => '<td class="' + esc(r.state) + '">' + esc(c[1](r)) + '</td>').join('') + '</tr>').join('');
  document.getElementById(id).innerHTML = head + body;
}
async function get(path) {
  const r = await fetch(path, {headers: {Authorization: 'Bearer ' + tok.value}});
  const j = await r.json();
  if (!r.ok) throw new Error(j.error || r.status);
  return j;
}
const n = x => x == null ? '-' : Math.round(x * 100) / 100;
// A node's MIG layout: per GPU with instances, each as profile@first memory slice.
const mig = r => (r.gpu_detail || []).filter(g => (g.mig || []).length)
    .map(g => 'GPU ' + g.index + ': ' + g.mig.slice().sort((a, b) => a.start - b.start)
        .map(m => m.profile + '@' + m.start).join(' ')).join('; ');
async function refresh() {
  try {
    const [q, nd, jb] = await Promise.all([get('/v1/queues'), get('/v1/nodes'), get('/v1/jobs')]);
    table('queues', [['queue', r => r.name], ['used', r => n(r.used_gpus)], ['guarantee', r => n(r.guaranteed_gpus)],
                     ['burst', r => n(r.burst_gpus)], ['pending', r => r.pending], ['running', r => r.running]], q.queues);
    table('nodes', [['node', r => r.name], ['model', r => r.model], ['state', r => r.state], ['gpus', r => r.gpus],
                    ['free', r => r.free_gpus], ['MIG layout', mig], ['reason', r => r.reason]], nd.nodes);
    table('jobs', [['id', r => r.id], ['queue', r => r.queue], ['tier', r => r.tier], ['state', r => r.state],
                   ['request', r => r.request], ['nodes / reason', r => r.state === 'running' ? r.nodes.join(',') : r.reason]], jb.jobs);
    document.getElementById('err').textContent = '';
  } catch (e) { document.getElementById('err').textContent = String(e.message || e); }
}
refresh(); setInterval(refresh, 2000);
</script></body></html>
)HTML";

}  // namespace gantry::server
