// The Batches page: the caller's batches, found by group and by name or id, a page at a
// time from the server (GET /console/api/batches; never every batch at once).

import { useEffect, useState } from "preact/hooks";
import { get } from "../api.js";
import { count, GROUP_NAMES, inputMethod, usd, when } from "../format.js";
import { ErrorNote, html, Link } from "../ui.js";

const FILTERS = [["", "All"], ...Object.entries(GROUP_NAMES)];

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
  return parts.length ? parts.map(([n, label]) => `${count(n)} ${label}`).join(" · ") : "none yet";
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
  const [rows, setRows] = useState([]);
  const [next, setNext] = useState(null);
  const [error, setError] = useState(null);
  const [loading, setLoading] = useState(true);

  const load = async (after) => {
    setLoading(true);
    setError(null);
    const params = new URLSearchParams({ limit: "20" });
    if (group) params.set("group", group);
    if (search) params.set("q", search);
    if (after) params.set("after", after);
    try {
      const page = await get(`/console/api/batches?${params}`);
      setRows((before) => (after ? [...before, ...page.data] : page.data));
      setNext(page.has_more ? page.next_after : null);
    } catch (failure) {
      setError(failure);
    } finally {
      setLoading(false);
    }
  };

  useEffect(() => {
    load(null);
  }, [group, search]);

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
      <div class="filters" role="group" aria-label="Filter by status">
        ${FILTERS.map(([value, label]) => html`
          <button type="button" aria-pressed=${group === value ? "true" : "false"} onClick=${() => setGroup(value)}>${label}</button>`)}
      </div>
      <${ErrorNote} error=${error} />
      <div class="table-wrap">
        <table class="batches">
          <caption class="note" aria-live="polite">${loading ? "Loading…" : `${rows.length} shown${next ? ", more below" : ""}`}</caption>
          <thead><tr>
            <th scope="col">Name</th><th scope="col">Target</th><th scope="col">Model</th><th scope="col">Input</th>
            <th scope="col">Status</th><th scope="col">Requests</th><th scope="col">Tokens</th><th scope="col">Cost</th><th scope="col">Created</th>
          </tr></thead>
          <tbody>${rows.map((batch) => html`<${Row} key=${batch.id} batch=${batch} />`)}</tbody>
        </table>
      </div>
      ${!loading && rows.length === 0 && html`<p class="info">No batches${group || search ? " match" : " yet"}.</p>`}
      ${next && html`<div class="actions"><button type="button" onClick=${() => load(next)} disabled=${loading}>Load more</button></div>`}
    </section>`;
}
