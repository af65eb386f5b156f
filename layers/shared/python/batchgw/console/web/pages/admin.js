// The Admin Batches tab (administrators only): every user's batches with the Batches page's
// filters plus user (GET /admin/console/batches), the totals of GET /admin/batch/summary,
// cancel any batch, one batch's attempt log, and each model's cap and yield state
// (GET /admin/batch/models).

import { useEffect, useState } from "preact/hooks";
import { get, post } from "../api.js";
import { count, usd, when } from "../format.js";
import { ErrorNote, html } from "../ui.js";
import { Badge, Outcomes } from "./batches.js";
import { GroupFilter, Caption, More, usePages } from "./list.js";

function Summary() {
  const [summary, setSummary] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    get("/admin/batch/summary").then(setSummary, setError);
  }, []);
  if (error) return html`<${ErrorNote} error=${error} />`;
  if (!summary) return html`<p>Loading totals…</p>`;
  const rows = [...summary.users.filter((u) => u.batches > 0), { ...summary.total, user_id: "All users" }];
  return html`
    <section aria-labelledby="totals-title">
      <h3 id="totals-title">Totals</h3>
      <div class="table-wrap"><table>
        <thead><tr><th scope="col">User</th><th scope="col">Batches</th><th scope="col">Succeeded</th><th scope="col">Failed</th><th scope="col">Cancelled</th><th scope="col">Not finished</th><th scope="col">Tokens</th><th scope="col">Cost</th><th scope="col">Unknown-cost attempts</th></tr></thead>
        <tbody>${rows.map((r) => html`<tr key=${r.user_id}>
          <th scope="row">${r.user_id}</th><td>${count(r.batches)}</td><td>${count(r.requests.succeeded)}</td><td>${count(r.requests.failed)}</td>
          <td>${count(r.requests.cancelled)}</td><td>${count(r.requests.not_finished)}</td><td>${count(r.input_tokens + r.output_tokens)}</td>
          <td>${usd(r.cost_usd)}</td><td>${count(r.cost_unknown_attempts)}</td></tr>`)}</tbody>
      </table></div>
    </section>`;
}

function Models() {
  const [models, setModels] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    get("/admin/batch/models").then((page) => setModels(page.data), setError);
  }, []);
  if (error) return html`<${ErrorNote} error=${error} />`;
  if (!models) return html`<p>Loading models…</p>`;
  return html`
    <section aria-labelledby="models-title">
      <h3 id="models-title">Models: caps and yield</h3>
      <div class="table-wrap"><table>
        <thead><tr><th scope="col">Model</th><th scope="col">Cap</th><th scope="col">Running</th><th scope="col">Queued</th><th scope="col">Batch slots</th><th scope="col">Interactive in flight</th><th scope="col">Reserve</th><th scope="col">Headroom</th><th scope="col">Adaptive limit</th><th scope="col">Why</th><th scope="col">Paused</th></tr></thead>
        <tbody>${models.map((m) => html`<tr key=${m.id} data-model=${m.id}>
          <th scope="row">${m.id}</th><td>${m.effective_concurrency} <span class="note">(${m.concurrency_source})</span></td><td>${m.running}</td><td>${m.queued}</td>
          <td>${m.batch_share.slots}</td><td>${m.batch_share.interactive_in_flight ?? "unknown"}</td><td>${m.batch_share.interactive_reserve}</td>
          <td>${m.batch_share.interactive_headroom}</td><td>${m.batch_share.adaptive_limit ?? "—"}${m.batch_share.adaptive_reason ? ` (${m.batch_share.adaptive_reason})` : ""}</td>
          <td>${m.batch_share.reason}</td><td>${m.paused ? m.paused.reason : "no"}</td></tr>`)}</tbody>
      </table></div>
    </section>`;
}

function Attempts({ batch, onClose }) {
  const [attempts, setAttempts] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    get(`/admin/batch/jobs/${encodeURIComponent(batch.id)}/attempts?limit=100`).then((page) => setAttempts(page.data), setError);
  }, [batch.id]);
  return html`
    <section aria-labelledby="attempts-title" class="info">
      <h3 id="attempts-title">Attempts of ${batch.name || batch.id}</h3>
      <button type="button" onClick=${onClose}>Close</button>
      <${ErrorNote} error=${error} />
      ${attempts && attempts.length === 0 && html`<p>No attempts yet.</p>`}
      ${attempts && attempts.length > 0 && html`<div class="table-wrap"><table class="attempts">
        <thead><tr><th scope="col">Ended</th><th scope="col">custom_id</th><th scope="col">Attempt</th><th scope="col">Outcome</th><th scope="col">Status</th><th scope="col">Route</th><th scope="col">Latency</th><th scope="col">Cost</th></tr></thead>
        <tbody>${attempts.map((a) => html`<tr key=${a.id}>
          <td>${when(a.ended_at)}</td><td>${a.custom_id}</td><td>${a.attempt}</td><td>${a.outcome}${a.error_code ? ` (${a.error_code})` : ""}</td>
          <td>${a.status_code ?? "—"}</td><td>${a.route ?? "—"}</td><td>${a.latency_ms == null ? "—" : `${a.latency_ms} ms`}</td><td>${usd(a.cost_usd)}</td></tr>`)}</tbody>
      </table></div>`}
    </section>`;
}

export function AdminPage() {
  const [group, setGroup] = useState("");
  const [user, setUser] = useState("");
  const [query, setQuery] = useState("");
  const [filters, setFilters] = useState({ user: "", q: "" });
  const [open, setOpen] = useState(null);
  const [error, setError] = useState(null);
  const list = usePages("/admin/console/batches", { group, ...filters });

  const cancel = async (batch) => {
    if (!window.confirm(`Cancel ${batch.name || batch.id} of ${batch.user_id}?`)) return;
    try {
      await post(`/v1/batches/${encodeURIComponent(batch.id)}/cancel`);
      list.reload();
    } catch (failure) {
      setError(failure);
    }
  };

  return html`
    <section aria-labelledby="admin-title">
      <h2 id="admin-title">Admin: Batches</h2>
      <${Summary} />
      <${Models} />
      <h3>Every user's batches</h3>
      <form class="toolbar" role="search" onSubmit=${(e) => { e.preventDefault(); setFilters({ user: user.trim(), q: query.trim() }); }}>
        <label>User <input name="user" value=${user} onInput=${(e) => setUser(e.target.value)} /></label>
        <label>Search by name or ID <input type="search" name="q" value=${query} onInput=${(e) => setQuery(e.target.value)} /></label>
        <button type="submit">Search</button>
      </form>
      <${GroupFilter} group=${group} onChange=${setGroup} />
      <${ErrorNote} error=${error || list.error} />
      ${open && html`<${Attempts} batch=${open} onClose=${() => setOpen(null)} />`}
      <div class="table-wrap"><table class="batches">
        <${Caption} list=${list} />
        <thead><tr><th scope="col">User</th><th scope="col">Name</th><th scope="col">Status</th><th scope="col">Requests</th><th scope="col">Cost</th><th scope="col">Created</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${list.rows.map((b) => html`<tr key=${b.id} data-batch=${b.id}>
          <td data-label="User">${b.user_id}</td><td data-label="Name">${b.name || b.id}${b.name && html`<div class="note">${b.id}</div>`}</td>
          <td data-label="Status"><${Badge} batch=${b} /></td><td data-label="Requests">${count(b.request_counts.total)}: <${Outcomes} batch=${b} /></td>
          <td data-label="Cost">${usd(b.cost_usd)}</td><td data-label="Created">${when(b.created_at)}</td>
          <td><button type="button" onClick=${() => setOpen(b)}>Attempts <span class="sr-only">of ${b.id}</span></button>
            ${b.may.cancel && html`<button type="button" class="danger" onClick=${() => cancel(b)}>Cancel <span class="sr-only">${b.id}</span></button>`}</td>
        </tr>`)}</tbody>
      </table></div>
      <${More} list=${list} />
    </section>`;
}
