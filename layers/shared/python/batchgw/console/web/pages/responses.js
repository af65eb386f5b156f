// The Background responses page: the caller's background responses (POST /v1/responses
// with background), newest first, a page at a time from the server (GET /v1/responses).

import { when } from "../format.js";
import { ErrorNote, html } from "../ui.js";
import { Caption, More, usePages } from "./list.js";

function Row({ response }) {
  const usage = response.usage;
  return html`
    <tr data-response=${response.id}>
      <td data-label="ID"><code>${response.id}</code></td>
      <td data-label="Model">${response.model || "—"}</td>
      <td data-label="Status"><span class="badge" data-status=${response.status}>${response.status.replace("_", " ")}</span>
        ${response.error && html`<div class="note">${response.error.message}</div>`}</td>
      <td data-label="Tokens">${usage ? usage.total_tokens : "—"}</td>
      <td data-label="Created">${when(response.created_at)}</td>
    </tr>`;
}

export function ResponsesPage() {
  const list = usePages("/v1/responses", {}, { cursor: (page) => page.last_id });
  return html`
    <section aria-labelledby="responses-title">
      <h2 id="responses-title">Background responses</h2>
      <p class="note">Responses created with <code>background: true</code>, run as batch work. Retrieve one with its ID for its output.</p>
      <${ErrorNote} error=${list.error} />
      <table class="responses">
        <${Caption} list=${list} />
        <thead><tr><th scope="col">ID</th><th scope="col">Model</th><th scope="col">Status</th><th scope="col">Tokens</th><th scope="col">Created</th></tr></thead>
        <tbody>${list.rows.map((response) => html`<${Row} key=${response.id} response=${response} />`)}</tbody>
      </table>
      <${More} list=${list} />
    </section>`;
}
