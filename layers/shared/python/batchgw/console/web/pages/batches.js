// The Batches page: the caller's batches, found by group and by name or id, a page at a
// time from the server (GET /console/api/batches; never every batch at once).

import { useState } from "preact/hooks";
import { count, GROUP_NAMES, inputMethod, usd, when } from "../format.js";
import { ErrorNote, html, Link } from "../ui.js";
import { Caption, GroupFilter, More, usePages } from "./list.js";

export function Badge({ batch }) {
  return html`<span class=${`badge ${batch.group}`} data-group=${batch.group}>${GROUP_NAMES[batch.group]}</span>`;
}

export function Outcomes({ batch }) {
  const o = batch.outcomes;
  const parts = [
    [o.succeeded, "succeeded"],
    [o.failed, "failed"],
    [o.expired, "expired"],
    [o.cancelled, "cancelled"],
    [o.not_ended, "not ended"],
  ].filter(([n]) => n > 0);
  if (parts.length) return parts.map(([n, label]) => `${count(n)} ${label}`).join(" · ");
  return batch.group === "processing" ? "none yet" : "none ran";
}

function Row({ batch }) {
  return html`
    <tr data-batch=${batch.id}>
      <td data-label="Name">
        <${Link} href=${`/console/batches/${encodeURIComponent(batch.id)}`}>${batch.name || batch.id}<//>
        ${batch.name && html`<div class="note">${batch.id}</div>`}
      </td>
      <td data-label="Target">${batch.target}</td>
      <td data-label="Model">${batch.models.join(", ") || "—"}</td>
      <td data-label="Input">${inputMethod(batch)}</td>
      <td data-label="Status"><${Badge} batch=${batch} />${batch.note && html`<div class="note">${batch.note}</div>`}</td>
      <td data-label="Requests">${count(batch.request_counts.total)}: <${Outcomes} batch=${batch} /></td>
      <td data-label="Tokens">${count(batch.usage.total_tokens)}</td>
      <td data-label="Cost">${usd(batch.cost_usd)}</td>
      <td data-label="Created">${when(batch.created_at)}</td>
    </tr>`;
}

export function BatchesPage({ capabilities }) {
  const [group, setGroup] = useState("");
  const [query, setQuery] = useState("");
  const [search, setSearch] = useState("");
  const list = usePages("/console/api/batches", { group, q: search });

  return html`
    <section aria-labelledby="batches-title">
      <h2 id="batches-title">Batches</h2>
      ${capabilities.role_may_submit
        ? html`<div class="actions"><${Link} class="button primary" href="/console/create">Create batch<//></div>`
        : html`<p class="info" role="status">Your role (below ${capabilities.min_role}) cannot submit batches or change your webhook. The batches you already have stay yours to manage: list them, download their results, cancel and delete them.</p>`}
      <form class="toolbar" role="search" onSubmit=${(e) => { e.preventDefault(); setSearch(query.trim()); }}>
        <label>Search by name or ID
          <input type="search" name="q" value=${query} onInput=${(e) => setQuery(e.target.value)} />
        </label>
        <button type="submit">Search</button>
      </form>
      <${GroupFilter} group=${group} onChange=${setGroup} />
      <${ErrorNote} error=${list.error} />
      <div class="table-wrap">
        <table class="batches">
          <${Caption} list=${list} />
          <thead><tr>
            <th scope="col">Name</th><th scope="col">Target</th><th scope="col">Model</th><th scope="col">Input</th>
            <th scope="col">Status</th><th scope="col">Requests</th><th scope="col">Tokens</th><th scope="col">Cost</th><th scope="col">Created</th>
          </tr></thead>
          <tbody>${list.rows.map((batch) => html`<${Row} key=${batch.id} batch=${batch} />`)}</tbody>
        </table>
      </div>
      ${!list.loading && list.rows.length === 0 && html`<p class="info">No batches${group || search ? " match" : " yet"}.</p>`}
      <${More} list=${list} />
    </section>`;
}
