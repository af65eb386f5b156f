// Your batch webhook: where the gateway signs and sends an event when a batch of yours
// ends (GET/PUT/DELETE /v1/batch_webhook), its secret shown once when made or rotated,
// and its recent deliveries (GET /v1/batch_webhook/events). Below BATCH_MIN_ROLE it can
// be read and removed, not changed.

import { useEffect, useState } from "preact/hooks";
import { ApiError, del, get, call } from "../api.js";
import { when } from "../format.js";
import { ErrorNote, html } from "../ui.js";

export function WebhookPage({ capabilities }) {
  const [hook, setHook] = useState(undefined); // undefined: loading; null: none
  const [url, setUrl] = useState("");
  const [secret, setSecret] = useState(null);
  const [events, setEvents] = useState([]);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);

  const load = async () => {
    try {
      const found = await get("/v1/batch_webhook");
      setHook(found);
      setUrl(found.url);
    } catch (failure) {
      if (failure instanceof ApiError && failure.status === 404) setHook(null);
      else setError(failure);
    }
    get("/v1/batch_webhook/events").then((page) => setEvents(page.data), setError);
  };
  useEffect(() => {
    load();
  }, []);

  const save = async (rotate) => {
    setBusy(true);
    setError(null);
    try {
      const saved = await call("PUT", "/v1/batch_webhook", { body: rotate ? { url, rotate_secret: true } : { url } });
      setSecret(saved.secret || null);
      setHook(saved);
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  const remove = async () => {
    if (!window.confirm("Remove your batch webhook? Batches that end from now on send no event.")) return;
    try {
      await del("/v1/batch_webhook");
      setHook(null);
      setSecret(null);
      setUrl("");
    } catch (failure) {
      setError(failure);
    }
  };

  if (hook === undefined && !error) return html`<p>Loading…</p>`;
  const mayChange = capabilities.role_may_submit;
  return html`
    <section aria-labelledby="webhook-title">
      <h2 id="webhook-title">Batch webhook</h2>
      <p class="note">When a batch of yours ends, the gateway sends a signed event (Standard Webhooks) to this URL.</p>
      <${ErrorNote} error=${error} />
      ${hook && html`
        <dl class="facts">
          <dt>URL</dt><dd><code>${hook.url}</code></dd>
          <dt>State</dt><dd data-webhook-state>${hook.enabled ? (hook.suspended_until ? `suspended until ${when(hook.suspended_until)}` : "enabled") : `disabled${hook.disabled_reason ? `: ${hook.disabled_reason}` : ""}`}</dd>
          <dt>Updated</dt><dd>${when(hook.updated_at)}</dd>
        </dl>`}
      ${!hook && html`<p class="info">You have no batch webhook.</p>`}
      ${secret && html`
        <div class="info" role="status">
          <p><strong>Signing secret, shown once:</strong> keep it where your receiver checks signatures. After a rotation the previous secret still signs for a while.</p>
          <pre data-secret>${secret}</pre>
        </div>`}
      ${mayChange
        ? html`<form class="form" onSubmit=${(e) => { e.preventDefault(); save(false); }}>
            <label for="webhook-url">Webhook URL <span class="hint">https, reachable from the gateway.</span></label>
            <input id="webhook-url" type="url" required value=${url} onInput=${(e) => setUrl(e.target.value)} />
            <div class="actions">
              <button class="primary" type="submit" disabled=${busy}>${hook ? "Save" : "Set up webhook"}</button>
              ${hook && html`<button type="button" disabled=${busy} onClick=${() => save(true)}>Rotate secret</button>`}
              ${hook && html`<button type="button" class="danger" onClick=${remove}>Remove webhook</button>`}
            </div>
          </form>`
        : html`<p class="info">Your role (below ${capabilities.min_role}) cannot set up or change a webhook; you may remove it.</p>
          ${hook && html`<div class="actions"><button type="button" class="danger" onClick=${remove}>Remove webhook</button></div>`}`}
      <h3>Recent deliveries</h3>
      ${events.length === 0
        ? html`<p class="note">No deliveries in the last week.</p>`
        : html`<div class="table-wrap"><table class="deliveries">
            <thead><tr><th scope="col">Batch</th><th scope="col">Event</th><th scope="col">Created</th><th scope="col">Attempts</th><th scope="col">Last status</th><th scope="col">Delivered</th></tr></thead>
            <tbody>${events.map((d) => html`<tr key=${d.id}>
              <td>${d.batch_id}</td><td>${d.type}</td><td>${when(d.created_at)}</td><td>${d.attempts}</td>
              <td>${d.last_status ?? "—"}${d.last_error ? ` (${d.last_error})` : ""}</td><td>${when(d.delivered_at)}</td></tr>`)}
            </tbody></table></div>`}
    </section>`;
}
