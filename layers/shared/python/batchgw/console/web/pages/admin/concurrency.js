// Batch Concurrency (administrators only): each model's batch cap beside what it runs, what
// waits, its interactive load and its batch share (GET /admin/batch/models); a cap is set or
// cleared with PATCH /admin/batch/models/{id} (empty: BATCH_MODEL_CONCURRENCY; 0 pauses).

import { useState } from "preact/hooks";
import { get, patch } from "../../api.js";
import { count } from "../../format.js";
import { ErrorNote, html, Pending, useLoad } from "../../ui.js";

function Cap({ model, onChanged }) {
  const [text, setText] = useState(model.max_concurrency == null ? "" : String(model.max_concurrency));
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const id = `cap-${model.id}`;
  const save = async (event) => {
    event.preventDefault();
    const trimmed = text.trim();
    setBusy(true);
    setError(null);
    try {
      const value = trimmed === "" ? null : /^-?\d+$/.test(trimmed) ? Number(trimmed) : trimmed;
      await patch(`/admin/batch/models/${encodeURIComponent(model.id)}`, { max_concurrency: value });
      onChanged();
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  return html`
    <form class="inline" onSubmit=${save}>
      <label class="sr-only" for=${id}>Cap of ${model.id}</label>
      <input id=${id} value=${text} size="5" inputmode="numeric" placeholder="default"
        onInput=${(e) => setText(e.target.value)} />
      <button type="submit" disabled=${busy}>Save <span class="sr-only">cap of ${model.id}</span></button>
      <${ErrorNote} error=${error} />
    </form>`;
}

export function ConcurrencyPage() {
  const state = useLoad(() => get("/admin/batch/models"), []);
  const models = state.data ? state.data.data : [];
  return html`
    <section aria-labelledby="concurrency-title">
      <h2 id="concurrency-title">Batch Concurrency</h2>
      <p class="note">A model's cap counts the batch requests of every gateway process against one limit. Empty takes
        BATCH_MODEL_CONCURRENCY; 0 pauses the model's batch work. A change reaches every process within about ten seconds.</p>
      <div class="actions"><button type="button" onClick=${state.reload} disabled=${state.loading}>Refresh</button></div>
      <${Pending} state=${state} what="the models" />
      ${state.data && models.length === 0 && html`<p class="info" role="status">No model is configured for batch work.</p>`}
      ${models.length > 0 && html`<div class="table-wrap" tabindex="0" role="region" aria-label="Models"><table class="models">
        <thead><tr><th scope="col">Model</th><th scope="col">Cap</th><th scope="col">In effect</th><th scope="col">Running</th><th scope="col">Queued</th>
          <th scope="col">Interactive in flight</th><th scope="col">Batch share</th><th scope="col">Why</th><th scope="col">Paused</th></tr></thead>
        <tbody>${models.map((m) => html`<tr key=${`${m.id}:${m.max_concurrency}`} data-model=${m.id}>
          <th scope="row">${m.id}</th>
          <td data-label="Cap"><${Cap} model=${m} onChanged=${state.reload} /></td>
          <td data-label="In effect" data-cap=${m.effective_concurrency}>${m.effective_concurrency} <span class="note">(${m.concurrency_source})</span></td>
          <td data-label="Running">${count(m.running)}</td><td data-label="Queued">${count(m.queued)}</td>
          <td data-label="Interactive in flight">${m.batch_share.interactive_in_flight ?? "unknown"}${m.batch_share.interactive_reserve ? html` <span class="note">(+${m.batch_share.interactive_reserve} reserved)</span>` : ""}</td>
          <td data-label="Batch share">${m.batch_share.slots}${m.batch_share.adaptive_limit != null ? html` <span class="note">(adaptive ${m.batch_share.adaptive_limit}${m.batch_share.adaptive_reason ? `: ${m.batch_share.adaptive_reason}` : ""})</span>` : ""}</td>
          <td data-label="Why">${m.batch_share.reason}</td><td data-label="Paused">${m.paused ? m.paused.reason : "no"}</td></tr>`)}</tbody>
      </table></div>`}
    </section>`;
}
