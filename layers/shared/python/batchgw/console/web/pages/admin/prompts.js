// Prompts (administrators only): a batch's stored requests with their answers, a page at a
// time (GET /admin/batch/jobs/{id}/requests; each page read is audited against the batch's
// owner). Where the gateway does not keep prompts the route answers 403 and this says why.

import { useState } from "preact/hooks";
import { get } from "../../api.js";
import { html, Link, navigate, Pending } from "../../ui.js";
import { usePages } from "../list.js";

function Entry({ entry }) {
  const answer = entry.response ? entry.response.body : entry.error;
  return html`
    <article class="prompt" data-request=${entry.custom_id}>
      <h3><code>${entry.custom_id}</code> <span class="note">${entry.model} · ${entry.status}</span></h3>
      <div class="pair">
        <div><h4>Request</h4><pre>${JSON.stringify(entry.request && entry.request.body, null, 2)}</pre></div>
        <div><h4>${entry.error ? "Error" : "Answer"}</h4><pre>${answer == null ? "Not run yet." : JSON.stringify(answer, null, 2)}</pre></div>
      </div>
    </article>`;
}

function Stored({ id }) {
  const state = usePages(`/admin/batch/jobs/${encodeURIComponent(id)}/requests`, {}, { cursor: (page) => page.last_id });
  const entries = state.rows;
  if (state.error && state.error.code === "prompts_not_stored") {
    return html`<p class="info" role="status" data-why="prompts_not_stored">This gateway does not keep prompts in its request log
      (DB_STORE_FULL_CONTENT is off), so a batch's stored requests cannot be read here. ${state.error.message}</p>`;
  }
  return html`
    <${Pending} state=${{ ...state, data: entries.length ? entries : null }} what="the stored requests" />
    ${!state.loading && !state.error && entries.length === 0 && html`<p class="info" role="status">This batch has no stored requests.</p>`}
    ${entries.map((e) => html`<${Entry} key=${e.id} entry=${e} />`)}
    ${state.next && html`<div class="actions"><button type="button" disabled=${state.loading} onClick=${state.more}>Load more</button></div>`}
    <p class="note">Each page read is audited as batch.requests.read against the batch's owner.</p>`;
}

export function PromptsPage({ id }) {
  const [text, setText] = useState(id || "");
  return html`
    <section aria-labelledby="prompts-title">
      <h2 id="prompts-title">Prompts${id ? html`: <code>${id}</code>` : ""}</h2>
      <form class="toolbar" onSubmit=${(e) => { e.preventDefault(); if (text.trim()) navigate(`/console/admin/prompts/${encodeURIComponent(text.trim())}`); }}>
        <label>Batch ID <input name="batch" value=${text} onInput=${(e) => setText(e.target.value)} /></label>
        <button type="submit">Open</button>
        ${id && html`<${Link} class="button" href=${`/console/admin/requests?batch_id=${encodeURIComponent(id)}`}>Its requests<//>`}
      </form>
      ${id ? html`<${Stored} id=${id} />` : html`<p class="info" role="status">Open a batch's stored requests from the Batches page, or give its ID.</p>`}
    </section>`;
}
