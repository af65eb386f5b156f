// Batches (administrators only): every user's batches with their owner's name, the totals
// per user of GET /admin/batch/summary split as a batch's own page splits them, a running
// batch's finish estimate and its warning, cancel for any batch, and each batch's Prompts,
// Requests and attempts.

import { useState } from "preact/hooks";
import { get, post } from "../../api.js";
import { count, usd, when } from "../../format.js";
import { ErrorNote, html, Link, Pending, useLoad } from "../../ui.js";
import { Badge, Outcomes } from "../batches.js";
import { Caption, GroupFilter, More, usePages } from "../list.js";

// Input tokens with the part a prompt cache served, or "not recorded" where none was.
export function Tokens({ input, cached, unrecorded }) {
  if (cached == null) return html`${count(input)} <span class="note">(cached not recorded)</span>`;
  return html`${count(input)} <span class="note">(${count(cached)} cached${unrecorded ? `; ${count(unrecorded)} batches not recorded` : ""})</span>`;
}

export function Owner({ id, users }) {
  const user = users && users[id];
  if (!user) return html`<span>${id}</span>`;
  return html`<span>${user.user_name || id}</span><div class="note">${user.email || id}</div>`;
}

function Totals({ summary }) {
  const rows = [...summary.users.filter((u) => u.batches > 0), { ...summary.total, user_id: "", user_name: "All users" }];
  if (rows.length === 1) return html`<p class="info" role="status">No user has a batch yet.</p>`;
  return html`
    <div class="table-wrap" tabindex="0" role="region" aria-label="Totals per user"><table class="totals">
      <caption class="sr-only">Totals per user</caption>
      <thead><tr><th scope="col">User</th><th scope="col">Batches</th><th scope="col">Succeeded</th><th scope="col">Failed</th><th scope="col">Expired unrun</th>
        <th scope="col">Cancelled</th><th scope="col">Not finished</th><th scope="col">Known cost</th><th scope="col">Unknown-cost attempts</th><th scope="col">Input tokens</th><th scope="col">Output tokens</th></tr></thead>
      <tbody>${rows.map((r) => html`<tr key=${r.user_id} data-user=${r.user_id || "all"}>
        <th scope="row">${r.user_name || r.user_id}${r.email && html`<div class="note">${r.email}</div>`}</th><td>${count(r.batches)}</td>
        <td>${count(r.requests.succeeded)}</td><td>${count(r.requests.failed)}</td><td>${count(r.requests.expired_unrun)}</td>
        <td>${count(r.requests.cancelled)}</td><td>${count(r.requests.not_finished)}</td><td>${usd(r.cost_usd)}</td><td>${count(r.cost_unknown_attempts)}</td>
        <td><${Tokens} input=${r.input_tokens} cached=${r.cached_tokens} unrecorded=${r.cache_unrecorded_batches} /></td><td>${count(r.output_tokens)}</td></tr>`)}</tbody>
    </table></div>
    <p class="note">Failed includes the expired requests, as a batch's request_counts does; known cost leaves out the attempts whose cost is unknown.</p>`;
}

function Attempts({ batch, onClose }) {
  const state = useLoad(() => get(`/admin/batch/jobs/${encodeURIComponent(batch.id)}/attempts?limit=100`), [batch.id]);
  const attempts = state.data ? state.data.data : null;
  return html`
    <section aria-labelledby="attempts-title" class="info">
      <h3 id="attempts-title">Attempts of ${batch.name || batch.id}</h3>
      <button type="button" onClick=${onClose}>Close</button>
      <${Pending} state=${state} what="the attempts" />
      ${attempts && attempts.length === 0 && html`<p>No attempts yet.</p>`}
      ${attempts && attempts.length > 0 && html`<div class="table-wrap" tabindex="0" role="region" aria-label="Attempts"><table class="attempts">
        <thead><tr><th scope="col">Ended</th><th scope="col">custom_id</th><th scope="col">Attempt</th><th scope="col">Outcome</th><th scope="col">Status</th><th scope="col">Route</th><th scope="col">Latency</th><th scope="col">Cost</th></tr></thead>
        <tbody>${attempts.map((a) => html`<tr key=${a.id}>
          <td>${when(a.ended_at)}</td><td>${a.custom_id}</td><td>${a.attempt}</td><td>${a.outcome}${a.error_code ? ` (${a.error_code})` : ""}</td>
          <td>${a.status_code ?? "—"}</td><td>${a.route ?? "—"}</td><td>${a.latency_ms == null ? "—" : `${a.latency_ms} ms`}</td><td>${usd(a.cost_usd)}</td></tr>`)}</tbody>
      </table></div>`}
    </section>`;
}

function Finish({ batch }) {
  const eta = batch.eta;
  if (batch.group !== "processing" || !eta) return null;
  return html`<div class="note" data-eta>Should finish ${eta.estimated_completion_at ? when(eta.estimated_completion_at) : "(no pace yet)"}</div>
    ${eta.warning && html`<div class="warning" role="note">${eta.warning}</div>`}`;
}

export function AdminBatchesPage() {
  const [group, setGroup] = useState("");
  const [user, setUser] = useState("");
  const [query, setQuery] = useState("");
  const [filters, setFilters] = useState({ user: "", q: "" });
  const [open, setOpen] = useState(null);
  const [error, setError] = useState(null);
  const summary = useLoad(() => get("/admin/batch/summary"), []);
  const list = usePages("/admin/console/batches", { group, ...filters });
  const users = summary.data ? Object.fromEntries(summary.data.users.map((u) => [u.user_id, u])) : null;

  const cancel = async (batch) => {
    const owner = (users && users[batch.user_id] && users[batch.user_id].user_name) || batch.user_id;
    if (!window.confirm(`Cancel ${batch.name || batch.id} of ${owner}?`)) return;
    setError(null);
    try {
      await post(`/v1/batches/${encodeURIComponent(batch.id)}/cancel`);
      list.reload();
      summary.reload();
    } catch (failure) {
      setError(failure);
    }
  };

  return html`
    <section aria-labelledby="admin-title">
      <h2 id="admin-title">Batches</h2>
      <section aria-labelledby="totals-title">
        <h3 id="totals-title">Totals per user</h3>
        <${Pending} state=${summary} what="the totals" />
        ${summary.data && html`<${Totals} summary=${summary.data} />`}
      </section>
      <h3>Every user's batches</h3>
      <form class="toolbar" role="search" onSubmit=${(e) => { e.preventDefault(); setFilters({ user: user.trim(), q: query.trim() }); }}>
        <label>User ID <input name="user" value=${user} onInput=${(e) => setUser(e.target.value)} /></label>
        <label>Search by name or ID <input type="search" name="q" value=${query} onInput=${(e) => setQuery(e.target.value)} /></label>
        <button type="submit">Search</button>
      </form>
      <${GroupFilter} group=${group} onChange=${setGroup} />
      <${ErrorNote} error=${error || list.error} />
      ${open && html`<${Attempts} batch=${open} onClose=${() => setOpen(null)} />`}
      ${!list.loading && !list.error && list.rows.length === 0 && html`<p class="info" role="status">No batch matches these filters.</p>`}
      <div class="table-wrap" tabindex="0" role="region" aria-label="Every user's batches"><table class="batches">
        <${Caption} list=${list} />
        <thead><tr><th scope="col">Owner</th><th scope="col">Name</th><th scope="col">Status</th><th scope="col">Requests</th><th scope="col">Input tokens</th><th scope="col">Cost</th><th scope="col">Created</th></tr></thead>
        <tbody>${list.rows.map((b) => html`<tr key=${b.id} data-batch=${b.id}>
          <td data-label="Owner"><${Owner} id=${b.user_id} users=${users} /></td>
          <td data-label="Name">${b.name || b.id}${b.name && html`<div class="note">${b.id}</div>`}
            <div class="row-actions">
              <${Link} class="button" href=${`/console/admin/prompts/${encodeURIComponent(b.id)}`}>Prompts <span class="sr-only">of ${b.id}</span><//>
              <${Link} class="button" href=${`/console/admin/requests?batch_id=${encodeURIComponent(b.id)}`}>Requests <span class="sr-only">of ${b.id}</span><//>
              <button type="button" onClick=${() => setOpen(b)}>Attempts <span class="sr-only">of ${b.id}</span></button>
              ${b.may.cancel && html`<button type="button" class="danger" onClick=${() => cancel(b)}>Cancel <span class="sr-only">${b.id}</span></button>`}
            </div></td>
          <td data-label="Status"><${Badge} batch=${b} /><${Finish} batch=${b} /></td>
          <td data-label="Requests">${count(b.request_counts.total)}: <${Outcomes} batch=${b} /></td>
          <td data-label="Input tokens"><${Tokens} input=${b.usage.input_tokens} cached=${b.usage.input_tokens_details && b.usage.input_tokens_details.cached_tokens} /></td>
          <td data-label="Cost">${usd(b.cost_usd)}</td><td data-label="Created">${when(b.created_at)}</td>
        </tr>`)}</tbody>
      </table></div>
      <${More} list=${list} />
    </section>`;
}
