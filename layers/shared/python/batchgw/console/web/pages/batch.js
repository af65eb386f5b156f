// One batch's details (GET /console/api/batches/{id}): counts, usage, cost, its ETA and
// timestamps, what went wrong and what to do (the server's words: never an exception's), and
// webhook deliveries; cancel, delete, retry, and download the results it has; its priority
// and complete_by, changed (PATCH /v1/batches/{id}) until it ends. A processing
// batch's page asks again on its own, less often the longer nothing changes.

import { useEffect, useRef, useState } from "preact/hooks";
import { del, get, patch, post } from "../api.js";
import { count, fromLocalInput, inputMethod, localInput, usd, when } from "../format.js";
import { ErrorNote, html, Link, navigate } from "../ui.js";
import { Badge, Outcomes } from "./batches.js";

const FIRST_POLL_MS = 1000;
const PROBLEMS_SHOWN = 50;
const MOST_POLL_MS = 15000;
const TIMES = [
  ["created_at", "Created"],
  ["in_progress_at", "Started"],
  ["finalizing_at", "Finalizing"],
  ["completed_at", "Completed"],
  ["failed_at", "Failed"],
  ["expired_at", "Expired"],
  ["cancelling_at", "Cancelling"],
  ["cancelled_at", "Cancelled"],
  ["expires_at", "Window closes"],
  ["results_expires_at", "Results kept until"],
];

function Progress({ batch }) {
  const total = batch.request_counts.total;
  const ended = total - batch.outcomes.not_ended;
  return html`
    <div>
      <label for="progress">Requests ended: ${count(ended)} of ${count(total)}</label>
      <progress id="progress" max=${Math.max(total, 1)} value=${ended}>${ended} of ${total}</progress>
      ${batch.eta && html`<p class="note">Estimated to finish ${when(batch.eta.estimated_completion_at)} (${batch.eta.requests_per_minute} requests a minute so far).</p>`}
      ${!batch.eta && batch.estimated_completion_at && html`<p class="note" data-estimate>Estimated at its create to finish ${when(batch.estimated_completion_at)}.</p>`}
      ${batch.eta && batch.eta.warning && html`<p class="error" role="status">${batch.eta.warning}</p>`}
    </div>`;
}

// What went wrong and what to do: the server's issue, and a refused input's problems by line.
function Issue({ batch }) {
  const issue = batch.issue;
  if (!issue) return null;
  const problems = (batch.errors && batch.errors.data) || [];
  return html`
    <section class="issue" aria-labelledby="issue-title" data-issue>
      <h3 id="issue-title">What happened</h3>
      <p><strong>${issue.title}</strong></p>
      ${issue.message && html`<p>${issue.message}</p>`}
      ${problems.length > 0 && html`
        <ul class="problems">${problems.slice(0, PROBLEMS_SHOWN).map((e, i) => html`
          <li key=${i}>${e.line ? html`<strong>Line ${e.line}</strong>: ` : ""}${e.message}</li>`)}
        </ul>
        ${problems.length > PROBLEMS_SHOWN && html`<p class="note">The first ${PROBLEMS_SHOWN} of ${count(problems.length)} listed problems are shown.</p>`}`}
      <p class="next"><strong>What to do:</strong> ${issue.next}</p>
    </section>`;
}

const FINAL = ["completed", "failed", "expired", "cancelled"];

// Its priority and complete_by, and a form to change them while it has not ended (the
// server checks the ranges and answers in its own words).
function Schedule({ batch, onSaved }) {
  const [editing, setEditing] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const open = !FINAL.includes(batch.status);
  const save = async (event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await patch(`/v1/batches/${encodeURIComponent(batch.id)}`, {
        priority: Number(editing.priority),
        complete_by: fromLocalInput(editing.complete_by),
      });
      setEditing(null);
      onSaved();
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  return html`
    <dl class="facts" data-schedule>
      <dt>Priority</dt><dd data-priority>${batch.priority ?? 0}</dd>
      <dt>Complete by</dt><dd data-complete-by>${batch.complete_by == null ? "No time set (the window's end)" : when(batch.complete_by)}</dd>
    </dl>
    <p class="note">The gateway does not order work by these yet.</p>
    ${open && !editing && html`<div class="actions"><button type="button" onClick=${() => setEditing({ priority: String(batch.priority ?? 0), complete_by: localInput(batch.complete_by) })}>Change priority</button></div>`}
    ${editing && html`
      <form class="form" onSubmit=${save}>
        <${ErrorNote} error=${error} />
        <label for="priority">Priority <span class="hint">Higher runs first: -10 to 10 (an administrator: -100 to 100).</span></label>
        <input id="priority" type="number" step="1" required value=${editing.priority} onInput=${(e) => setEditing({ ...editing, priority: e.target.value })} />
        <label for="complete-by">Complete by <span class="hint">Optional: when you want it done, no later than the window's end. Empty: no time.</span></label>
        <input id="complete-by" type="datetime-local" value=${editing.complete_by} onInput=${(e) => setEditing({ ...editing, complete_by: e.target.value })} />
        <div class="actions">
          <button type="button" onClick=${() => { setEditing(null); setError(null); }}>Cancel</button>
          <button type="submit" class="primary" disabled=${busy}>Save</button>
        </div>
      </form>`}`;
}

function Deliveries({ deliveries }) {
  if (!deliveries.length) return html`<p class="note">No webhook deliveries about this batch.</p>`;
  return html`
    <div class="table-wrap"><table>
      <thead><tr><th scope="col">Event</th><th scope="col">Created</th><th scope="col">Attempts</th><th scope="col">Last status</th><th scope="col">Delivered</th></tr></thead>
      <tbody>${deliveries.map((d) => html`<tr key=${d.id}>
        <td>${d.type}</td><td>${when(d.created_at)}</td><td>${d.attempts}</td>
        <td>${d.last_status ?? "—"}${d.last_error ? ` (${d.last_error})` : ""}</td><td>${when(d.delivered_at)}</td></tr>`)}
      </tbody></table></div>`;
}

export function BatchPage({ id, capabilities }) {
  const [batch, setBatch] = useState(null);
  const [retried, setRetried] = useState(null);
  // One key per page: a second click, or an answer lost on the way, finds the same retry.
  const retryKey = useRef(`console-retry-${crypto.randomUUID()}`);
  const [error, setError] = useState(null);
  const [notice, setNotice] = useState(null);
  const [busy, setBusy] = useState(false);
  const [exported, setExported] = useState(null);
  const [saved, setSaved] = useState(0); // a change of its schedule: read the batch again
  const wait = useRef(FIRST_POLL_MS);
  const seen = useRef(null);

  useEffect(() => {
    let stopped = false;
    let timer = null;
    const tick = async () => {
      try {
        const shown = await get(`/console/api/batches/${encodeURIComponent(id)}`);
        if (stopped) return;
        setBatch(shown);
        setError(null);
        const mark = JSON.stringify([shown.status, shown.request_counts]);
        wait.current = mark === seen.current ? Math.min(wait.current * 2, MOST_POLL_MS) : FIRST_POLL_MS;
        seen.current = mark;
        if (shown.group === "processing") timer = setTimeout(tick, wait.current);
      } catch (failure) {
        if (stopped) return;
        setError(failure);
        if (failure.status !== 404) timer = setTimeout(tick, (wait.current = Math.min(wait.current * 2, MOST_POLL_MS)));
      }
    };
    tick();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [id, notice, saved]);

  const exportUnfinished = async () => {
    setBusy(true);
    setError(null);
    try {
      const file = await post(`/console/api/batches/${encodeURIComponent(id)}/export-unfinished`);
      setExported(file);
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };

  const retry = async () => {
    setBusy(true);
    setError(null);
    try {
      const child = await post(`/v1/batches/${encodeURIComponent(id)}/retry`, {}, { "Idempotency-Key": retryKey.current });
      setRetried(child);
      setNotice(`Retry started: ${child.id}`);
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };

  const act = async (what) => {
    setBusy(true);
    setError(null);
    try {
      if (what === "cancel") {
        await post(`/v1/batches/${encodeURIComponent(id)}/cancel`);
        setNotice("Cancel asked: requests already running finish; no new one starts.");
      } else {
        if (!window.confirm("Delete this batch with its requests and results? This cannot be undone.")) return;
        await del(`/v1/batches/${encodeURIComponent(id)}`);
        navigate("/console/");
      }
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };

  if (!batch) return html`<section><h2>Batch</h2>${error ? html`<${ErrorNote} error=${error} />` : html`<p>Loading…</p>`}</section>`;
  const usage = batch.usage;
  const finished = batch.group !== "processing";
  const mayRetry = batch.may.retry && capabilities && capabilities.role_may_submit;
  return html`
    <section aria-labelledby="batch-title">
      <p><${Link} href="/console/">← All batches<//></p>
      <h2 id="batch-title">${batch.name || batch.id}</h2>
      ${batch.description && html`<p>${batch.description}</p>`}
      <p><${Badge} batch=${batch} /> <span class="note" data-status=${batch.status}>${batch.status}</span>
        ${batch.note && html` — <span class="note">${batch.note}</span>`}</p>
      ${notice && !retried && html`<p class="info" role="status">${notice}</p>`}
      ${retried && html`<p class="info" role="status">Retry started as a new batch of the requests that did not succeed: <${Link} href=${`/console/batches/${encodeURIComponent(retried.id)}`}>${retried.id}<//>.</p>`}
      <${Issue} batch=${batch} />
      <${ErrorNote} error=${error} />
      <div class="actions">
        ${batch.may.cancel && html`<button type="button" class="danger" disabled=${busy} onClick=${() => act("cancel")}>Cancel batch</button>`}
        ${batch.may.download && html`<a class="button primary" href=${`/v1/batches/${encodeURIComponent(batch.id)}/output.jsonl`} download>Download results</a>`}
        ${finished && batch.error_file_id && html`<a class="button" href=${`/v1/files/${encodeURIComponent(batch.error_file_id)}/content`} download>Download error file</a>`}
        ${mayRetry && html`<button type="button" class="primary" disabled=${busy} onClick=${retry}>Retry batch</button>`}
        ${batch.copy && html`<${Link} class="button" href=${`/console/create?copy=${encodeURIComponent(batch.id)}`}>Copy as new batch<//>`}
        ${batch.may.export_unfinished && html`<button type="button" disabled=${busy} onClick=${exportUnfinished}>Export unfinished requests</button>`}
        <button type="button" class="danger" disabled=${busy} onClick=${() => act("delete")}>Delete batch</button>
      </div>
      ${exported && html`<p class="info" role="status">Exported ${count(exported.requests)} unfinished requests as <strong>${exported.filename}</strong> (${exported.id}).
        <${Link} href=${`/console/create?file=${encodeURIComponent(exported.id)}`}>Fix and submit them as a new batch<//></p>`}
      ${!finished && html`<p class="note">Results can be downloaded once the batch has finished.</p>`}
      ${finished && !batch.may.download && html`<p class="note">No results file was written for this batch: it stopped before its requests were done.</p>`}
      ${(!finished || batch.request_counts.total > 0) && html`<${Progress} batch=${batch} />`}
      <h3>Details</h3>
      <dl class="facts">
        <dt>ID</dt><dd><code>${batch.id}</code></dd>
        <dt>Target</dt><dd>${batch.target}</dd>
        <dt>Model</dt><dd>${batch.models.join(", ") || "—"}</dd>
        <dt>Input</dt><dd>${inputMethod(batch)}${batch.input_file_id ? ` (${batch.input_file_id})` : ""}</dd>
        <dt>Requests</dt><dd>${count(batch.request_counts.total)}: <${Outcomes} batch=${batch} /></dd>
        <dt>Tokens</dt><dd>${count(usage.input_tokens)} in, ${count(usage.output_tokens)} out</dd>
        <dt>Cost</dt><dd>${usd(batch.cost_usd)}${batch.cost_unknown_attempts ? ` and ${batch.cost_unknown_attempts} attempts of unknown cost` : ""}</dd>
        <dt>Window</dt><dd>${batch.completion_window}</dd>
        ${TIMES.filter(([k]) => batch[k]).map(([k, label]) => html`<dt>${label}</dt><dd>${when(batch[k])}</dd>`)}
        ${batch.parent_batch_id && html`<dt>Retries</dt><dd><${Link} href=${`/console/batches/${encodeURIComponent(batch.parent_batch_id)}`}>${batch.parent_batch_id}<//></dd>`}
        ${batch.retry_batch_ids && batch.retry_batch_ids.length > 0 && html`<dt>Retried by</dt><dd>${batch.retry_batch_ids.map((child, i) => html`${i ? ", " : ""}<${Link} href=${`/console/batches/${encodeURIComponent(child)}`}>${child}<//>`)}</dd>`}
      </dl>
      <h3>Scheduling</h3>
      <${Schedule} batch=${batch} onSaved=${() => setSaved((n) => n + 1)} />
      <h3>Webhook deliveries</h3>
      <${Deliveries} deliveries=${batch.webhook_deliveries || []} />
    </section>`;
}
