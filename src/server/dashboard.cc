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
<form id="signin" hidden><label>Token <input id="tok" type="password" size="40" autocomplete="off"></label>
 <button>Sign in</button></form>
<div id="who" hidden>Signed in as <b id="me"></b> <button id="signout">Sign out</button></div>
<span id="err"></span>
<h2>Queues</h2><table id="queues"></table>
<h2>Nodes</h2><table id="nodes"></table>
<h2>Jobs</h2><p id="waiting"></p><table id="jobs"></table>
<script>
// Sign-in: the token goes to POST /v1/session once and lives in an HttpOnly cookie (this
// script never sees it again); requests that change something carry X-CSRF-Token.
let csrf = '', admin = false;
const $ = id => document.getElementById(id);
const esc = s => String(s ?? '').replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
async function api(method, path, body) {
  const headers = method === 'GET' ? {} : {'X-CSRF-Token': csrf, 'Content-Type': 'application/json'};
  const r = await fetch(path, {method, headers, credentials: 'same-origin',
                               body: body === undefined ? undefined : JSON.stringify(body)});
  const j = await r.json().catch(() => ({}));
  if (r.status === 401) { signedOut(); throw new Error('sign in with a token'); }
  if (!r.ok) throw new Error(j.error || r.status);
  return j;
}
function signedIn(s) {
  csrf = s.csrf; admin = s.admin;
  $('me').textContent = s.principal; $('who').hidden = false; $('signin').hidden = true;
}
function signedOut() {
  csrf = ''; admin = false; $('who').hidden = true; $('signin').hidden = false;
  for (const t of ['queues', 'nodes', 'jobs']) $(t).innerHTML = '';
  $('waiting').textContent = '';
}
$('signin').onsubmit = async ev => {
  ev.preventDefault();
  try { signedIn(await api('POST', '/v1/session', {token: $('tok').value})); $('tok').value = ''; refresh(); }
  catch (e) { $('err').textContent = String(e.message || e); }
};
$('signout').onclick = async () => { try { await api('DELETE', '/v1/session'); } finally { signedOut(); } };
function table(id, cols, rows) {
  const head = '<tr>' + cols.map(c => '<th>' + esc(c[0]) + '</th>').join('') + '</tr>';
  const body = rows.map(r => '<tr>' + cols.map(c => '<td class="' + esc(r.state) + '">' + (c[2] ? c[1](r) : esc(c[1](r))) + '</td>').join('') + '</tr>').join('');
  $(id).innerHTML = head + body;
}
const n = x => x == null ? '-' : Math.round(x * 100) / 100;
// A node's MIG layout: per GPU with instances, each as profile@first memory slice.
const mig = r => (r.gpu_detail || []).filter(g => (g.mig || []).length)
    .map(g => 'GPU ' + g.index + ': ' + g.mig.slice().sort((a, b) => a.start - b.start)
        .map(m => m.profile + '@' + m.start).join(' ')).join('; ');
const button = (action, arg, label) => '<button data-action="' + action + '" data-arg="' + esc(arg) + '">' + label + '</button>';
// Pending jobs by why they wait: the reason's first clause ("capacity", "budget", ...).
function waiting(jobs) {
  const by = {};
  for (const j of jobs) if (j.state === 'pending') { const k = String(j.reason || 'not yet considered').split(':')[0]; by[k] = (by[k] || 0) + 1; }
  const parts = Object.entries(by).sort((a, b) => b[1] - a[1]).map(([k, c]) => c + ' for ' + k);
  return parts.length ? 'Waiting: ' + parts.join(', ') + '.' : 'Nothing waits.';
}
document.addEventListener('click', async ev => {
  const b = ev.target.closest('button[data-action]');
  if (!b) return;
  const [method, path] = {drain: ['POST', '/v1/nodes/' + b.dataset.arg + '/drain'],
                          resume: ['POST', '/v1/nodes/' + b.dataset.arg + '/resume'],
                          cancel: ['POST', '/v1/jobs/' + b.dataset.arg + '/cancel']}[b.dataset.action];
  try { await api(method, path); refresh(); } catch (e) { $('err').textContent = String(e.message || e); }
});
async function refresh() {
  if (!csrf) return;
  try {
    const [q, nd, jb] = await Promise.all([api('GET', '/v1/queues'), api('GET', '/v1/nodes'), api('GET', '/v1/jobs')]);
    table('queues', [['queue', r => r.name], ['parent', r => r.parent], ['used', r => n(r.used_gpus)], ['guarantee', r => n(r.guaranteed_gpus)],
                     ['burst', r => n(r.burst_gpus)], ['pending', r => r.pending], ['running', r => r.running]], q.queues);
    const nodeCols = [['node', r => r.name], ['model', r => r.model], ['state', r => r.state], ['gpus', r => r.gpus],
                      ['free', r => r.free_gpus], ['MIG layout', mig], ['reason', r => r.reason]];
    if (admin) nodeCols.push(['', r => r.state === 'drained' ? button('resume', r.name, 'Resume') : button('drain', r.name, 'Drain'), true]);
    table('nodes', nodeCols, nd.nodes);
    $('waiting').textContent = waiting(jb.jobs);
    table('jobs', [['id', r => r.id], ['queue', r => r.queue], ['tier', r => r.tier], ['state', r => r.state],
                   ['request', r => r.request], ['nodes / reason', r => r.state === 'running' ? r.nodes.join(',') : r.reason],
                   ['', r => r.state === 'pending' || r.state === 'running' ? button('cancel', r.id, 'Cancel') : '', true]], jb.jobs);
    $('err').textContent = '';
  } catch (e) { $('err').textContent = String(e.message || e); }
}
api('GET', '/v1/session').then(s => { signedIn(s); refresh(); }, () => signedOut());
setInterval(refresh, 2000);
</script></body></html>
)HTML";

}  // namespace gantry::server
