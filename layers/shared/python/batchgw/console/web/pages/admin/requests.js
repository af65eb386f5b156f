// Requests and Recent Requests (administrators only), both from the request log
// (GET /admin/requests): the batch worker's requests, one row per attempt with its batch,
// narrowed to one batch or a stretch (?batch_id=, ?from=&to=); and the requests callers
// made directly, under the Request volume cards and chart (GET /admin/request-metrics),
// a bar of which narrows the list to its stretch.

import { useState } from "preact/hooks";
import { get } from "../../api.js";
import { count, usd, when } from "../../format.js";
import { html, Link, navigate, Pending, useLoad } from "../../ui.js";
import { usePages } from "../list.js";
import { VolumeChart } from "./chart.js";

const stretch = (from, to) => `${when(Number(from))} to ${when(Number(to))}`;

// The log's rows for ``filters``, newest first, 50 a page, read on from the last one's id.
const useLog = (filters) => usePages("/admin/requests", filters, { limit: 50, cursor: (page) => page.last_id });

function Log({ log, batches, empty }) {
  return html`
    <${Pending} state=${{ ...log, data: log.rows.length ? log.rows : null }} what="the requests" />
    ${!log.loading && !log.error && log.rows.length === 0 && html`<p class="info" role="status">${empty}</p>`}
    ${log.rows.length > 0 && html`<div class="table-wrap" tabindex="0" role="region" aria-label="Requests"><table class="requests">
      <caption class="note" aria-live="polite">${log.rows.length} shown${log.next ? ", more below" : ""}</caption>
      <thead><tr><th scope="col">Ended</th><th scope="col">User</th>${batches && html`<th scope="col">Batch</th>`}<th scope="col">Request</th><th scope="col">Model</th>
        <th scope="col">Attempt</th><th scope="col">Outcome</th><th scope="col">Status</th><th scope="col">Latency</th><th scope="col">Tokens</th><th scope="col">Cost</th></tr></thead>
      <tbody>${log.rows.map((r) => html`<tr key=${r.id} data-request=${r.id}>
        <td data-label="Ended">${when(r.ended_at)}</td><td data-label="User">${r.user_id}</td>
        ${batches && html`<td data-label="Batch"><${Link} href=${`/console/admin/requests?batch_id=${encodeURIComponent(r.batch_id)}`}>${r.batch_id}<//></td>`}
        <td data-label="Request"><code>${r.custom_id}</code></td><td data-label="Model">${r.model}${r.route ? html`<div class="note">${r.route}</div>` : ""}</td>
        <td data-label="Attempt">${r.attempt}</td><td data-label="Outcome">${r.outcome}${r.error_code ? ` (${r.error_code})` : ""}</td>
        <td data-label="Status">${r.status_code ?? "—"}</td><td data-label="Latency">${r.latency_ms == null ? "—" : `${r.latency_ms} ms`}</td>
        <td data-label="Tokens">${count((r.input_tokens || 0) + (r.output_tokens || 0))}</td><td data-label="Cost">${usd(r.cost_usd)}</td></tr>`)}</tbody>
    </table></div>`}
    ${log.next && html`<div class="actions"><button type="button" disabled=${log.loading} onClick=${log.more}>Load more</button></div>`}`;
}

function Chip({ label, onClear }) {
  return html`<span class="chip" data-chip>${label} <button type="button" onClick=${onClear} aria-label=${`Clear ${label}`}>×</button></span>`;
}

export function RequestsPage({ query }) {
  const batchId = query.get("batch_id") || "";
  const from = query.get("from") || "";
  const to = query.get("to") || "";
  const log = useLog({ source: "batch", batch_id: batchId, start_time: from, end_time: to });
  const without = (name) => {
    const params = new URLSearchParams(query);
    params.delete(name);
    if (name === "from") params.delete("to");
    const rest = params.toString();
    navigate(`/console/admin/requests${rest ? `?${rest}` : ""}`);
  };
  return html`
    <section aria-labelledby="requests-title">
      <h2 id="requests-title">Requests</h2>
      <p class="note">The requests the batch worker ran, newest first: one row per attempt, with its batch.</p>
      <div class="toolbar" role="group" aria-label="Narrowed to">
        ${batchId && html`<${Chip} label=${`Batch ${batchId}`} onClear=${() => without("batch_id")} />`}
        ${from && to && html`<${Chip} label=${`Window ${stretch(from, to)}`} onClear=${() => without("from")} />`}
        ${!batchId && !(from && to) && html`<span class="note">Every batch, the last day.</span>`}
        <button type="button" onClick=${log.reload} disabled=${log.loading}>Refresh</button>
      </div>
      <${Log} log=${log} batches=${true} empty=${batchId ? "This batch has run no request yet." : "The batch worker ran no request in this stretch."} />
    </section>`;
}

function Cards({ day, hour }) {
  const card = (title, m) => html`
    <div class="card" data-card=${title}>
      <h3>${title}</h3>
      ${m ? html`<p class="figure">${count(m.requests)} <span class="note">requests, ${count(m.error_requests)} failed</span></p>
        <p class="note">and ${count(m.batch_requests)} batch requests (${count(m.batch_error_requests)} failed)</p>` : html`<p class="note">Loading…</p>`}
    </div>`;
  return html`<div class="cards" aria-label="Request volume">${card("Last hour", hour)}${card("Last 24 hours", day)}</div>`;
}

export function RecentPage() {
  const day = useLoad(() => get("/admin/request-metrics?source=interactive&interval=hour"), []);
  const hour = useLoad(() => get(`/admin/request-metrics?source=interactive&interval=hour&start_time=${Math.floor(Date.now() / 1000) - 3600}`), []);
  const [bar, setBar] = useState(null);
  const log = useLog({ source: "interactive", start_time: bar ? bar.start_time : "", end_time: bar ? bar.end_time : "" });
  const pick = (picked) => setBar((before) => (before && picked && before.start_time === picked.start_time ? null : picked));
  const refresh = () => {
    day.reload();
    hour.reload();
    log.reload();
  };
  return html`
    <section aria-labelledby="recent-title">
      <h2 id="recent-title">Recent Requests</h2>
      <p class="note">The requests callers made directly; the batch worker's are on the Requests page, and stacked on top of each bar in violet.</p>
      <section aria-labelledby="volume-title">
        <h3 id="volume-title">Request volume</h3>
        <${Pending} state=${day} what="the request volume" />
        ${day.data && html`<${Cards} day=${day.data} hour=${hour.data} />`}
        ${day.data && html`<${VolumeChart} metrics=${day.data} picked=${bar} onPick=${pick} />`}
      </section>
      <div class="toolbar" role="group" aria-label="Narrowed to">
        ${bar ? html`<${Chip} label=${`Window ${stretch(bar.start_time, bar.end_time)}`} onClear=${() => setBar(null)} />
          <${Link} href=${`/console/admin/requests?from=${bar.start_time}&to=${bar.end_time}`}>Batch requests in this window<//>`
          : html`<span class="note">The last day.</span>`}
        <button type="button" onClick=${refresh} disabled=${log.loading}>Refresh</button>
      </div>
      <${Log} log=${log} batches=${false} empty="No request was made directly in this stretch." />
    </section>`;
}
