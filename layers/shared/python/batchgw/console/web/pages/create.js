// Create batch: three steps, nothing runs before the last. (1) upload a JSONL file, (2) name
// it and make the choices, (3) the gateway's strict check (POST /v1/batches/preflight), then
// submit (POST /console/api/batches). Each submission keeps its Idempotency-Key in this
// browser until its outcome is known: a reload or a second tab finds the batch it made
// instead of making another; after a day without an answer the page asks before it submits
// again.

import { useEffect, useState } from "preact/hooks";
import { ApiError, call, del, download, get, post } from "../api.js";
import { count, fromLocalInput, when } from "../format.js";
import { ErrorNote, html, Link, navigate } from "../ui.js";

const PENDING = "batchgw.console.pending-submission";
const SURE_FOR_MS = 24 * 3600 * 1000;
const TYPES = [
  ["/v1/chat/completions", "Chat Completions"],
  ["/v1/embeddings", "Embeddings"],
];
const STEPS = ["Upload data", "Configure", "Check and confirm"];

function readPending() {
  try {
    return JSON.parse(localStorage.getItem(PENDING) || "null");
  } catch (_) {
    return null;
  }
}

const writePending = (pending) => localStorage.setItem(PENDING, JSON.stringify(pending));
const clearPending = () => localStorage.removeItem(PENDING);

async function send(pending) {
  return post("/console/api/batches", pending.body, { "Idempotency-Key": pending.key });
}

// A submission whose outcome is not known yet: sent again with its key (a replay finds the
// batch), unless a day has passed, when the page can no longer be sure and asks.
function Pending({ pending, onDone }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const stale = Date.now() - pending.started_at > SURE_FOR_MS;
  const retry = async () => {
    setBusy(true);
    setError(null);
    try {
      const batch = await send(pending);
      clearPending();
      navigate(`/console/batches/${encodeURIComponent(batch.id)}`);
    } catch (failure) {
      if (failure instanceof ApiError && failure.status >= 400 && failure.status < 500 && failure.status !== 409) {
        clearPending(); // refused for good: nothing was made
        onDone();
      }
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  useEffect(() => {
    if (!stale) retry();
  }, []);
  const fresh = () => {
    writePending({ ...pending, key: crypto.randomUUID(), started_at: Date.now() });
    onDone(true);
  };
  return html`
    <section aria-labelledby="pending-title">
      <h2 id="pending-title">A submission is waiting for its answer</h2>
      <p>Batch <strong>${pending.body.name}</strong> was submitted ${when(Math.floor(pending.started_at / 1000))}.</p>
      ${stale
        ? html`<p class="error" role="alert">More than a day has passed without an answer, so the console can no longer be sure whether the batch was made. Submitting again makes a new submission, which can create and bill a second batch. Look in your batches first.</p>
            <div class="actions">
              <${Link} class="button" href="/console/">Look in your batches<//>
              <button type="button" class="danger" onClick=${fresh}>Submit again as a new batch</button>
              <button type="button" onClick=${() => { clearPending(); onDone(); }}>Forget it</button>
            </div>`
        : html`<p role="status">${busy ? "Asking the gateway for its outcome…" : "The outcome is not known yet."}</p>
            <${ErrorNote} error=${error} />
            <div class="actions"><button type="button" class="primary" disabled=${busy} onClick=${retry}>Try again (finds the batch if it was made)</button></div>`}
    </section>`;
}

function Files({ onUse, refresh }) {
  const [files, setFiles] = useState(null);
  const [error, setError] = useState(null);
  const load = () => get("/v1/files?purpose=batch&limit=50").then((page) => setFiles(page.data), setError);
  useEffect(load, [refresh]);
  const remove = async (file) => {
    if (!window.confirm(`Delete ${file.filename}? A batch already submitted from it keeps running.`)) return;
    try {
      await del(`/v1/files/${encodeURIComponent(file.id)}`);
      load();
    } catch (failure) {
      setError(failure);
    }
  };
  return html`
    <section aria-labelledby="files-title">
      <h3 id="files-title">Uploaded files</h3>
      <${ErrorNote} error=${error} />
      ${files && files.length === 0 && html`<p class="note">No uploaded files.</p>`}
      ${files && files.length > 0 && html`<div class="table-wrap"><table>
        <thead><tr><th scope="col">File</th><th scope="col">Size</th><th scope="col">Uploaded</th><th scope="col">Expires</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${files.map((f) => html`<tr key=${f.id} data-file=${f.id}>
          <td>${f.filename}<div class="note">${f.id}</div></td><td>${count(f.bytes)} bytes</td>
          <td>${when(f.created_at)}</td><td>${when(f.expires_at)}</td>
          <td><button type="button" onClick=${() => onUse(f)}>Use <span class="sr-only">${f.filename}</span></button>
              <button type="button" class="danger" onClick=${() => remove(f)}>Delete <span class="sr-only">${f.filename}</span></button></td>
        </tr>`)}</tbody></table></div>`}
    </section>`;
}

// Rows of the problems table; the downloads hold every problem the check listed.
const PROBLEM_ROWS = 200;

function Problems({ check, body }) {
  // The check lists up to 1,000 problems and counts the rest (problems_unlisted): the page
  // says the true count, shows the first ones and how many more there are.
  const listed = check.problems.length;
  const total = listed + (check.problems_unlisted || 0);
  const uncounted = check.problems_truncated && !check.problems_unlisted ? "+" : "";
  const shown = Math.min(listed, PROBLEM_ROWS);
  const more = total - shown;
  return html`
    <div>
      <p class="error" role="alert">The file has ${count(total)}${uncounted} problem${total === 1 && !uncounted ? "" : "s"}: nothing can be submitted until they are fixed.</p>
      <div class="actions">
        <button type="button" onClick=${() => download("/v1/batches/preflight?format=csv", body, "preflight-problems.csv")}>Download as CSV</button>
        <button type="button" onClick=${() => download("/v1/batches/preflight?format=jsonl", body, "preflight-problems.jsonl")}>Download as JSONL</button>
      </div>
      <div class="table-wrap"><table class="problems">
        <thead><tr><th scope="col">Line</th><th scope="col">custom_id</th><th scope="col">Field</th><th scope="col">Problem</th></tr></thead>
        <tbody>${check.problems.slice(0, shown).map((p, i) => html`<tr key=${i} data-line=${p.line ?? ""}>
          <td>${p.line ?? "—"}</td><td>${p.custom_id ?? "—"}</td><td>${p.field ?? "—"}</td><td>${p.message} <span class="note">(${p.code})</span></td></tr>`)}
        </tbody></table></div>
      ${(more > 0 || uncounted) && html`<p class="note problems-more">The first ${count(shown)} are listed, and ${count(more)}${uncounted} more${listed > shown ? ` (the downloads list the first ${count(listed)})` : ""}.</p>`}
    </div>`;
}

function Valid({ check }) {
  return html`
    <div>
      <p class="info" role="status">Every line passed the check: ${count(check.requests)} requests.</p>
      <dl class="facts">
        <dt>Target</dt><dd>${(TYPES.find(([e]) => e === check.endpoint) || [0, check.endpoint])[1]}</dd>
        <dt>Model</dt><dd><code>${check.model}</code></dd>
        <dt>Window</dt><dd>${check.completion_window || "no limit"}</dd>
        <dt>Billing</dt><dd>${check.billing ? `${check.billing.how}: $${check.billing.input_per_mtok_usd} in and $${check.billing.output_per_mtok_usd} out per million tokens` : "no price is set for this model"}</dd>
        <dt>Estimated finish</dt><dd data-estimate>${check.estimated_completion_at ? `${when(check.estimated_completion_at)}, if submitted now (at the model's recent pace, beside the batches queued on it)` : "no estimate yet: the model has no recent batch answers"}</dd>
        <dt>Results kept</dt><dd>${check.results_retention_days} days</dd>
        <dt>Stored size</dt><dd>${count(check.stored_bytes)} bytes</dd>
      </dl>
      <h4>First stored requests</h4>
      <pre>${check.first_requests.map((r) => JSON.stringify(r)).join("\n")}</pre>
    </div>`;
}

export function CreatePage({ capabilities, session }) {
  const [pending, setPending] = useState(readPending());
  const [step, setStep] = useState(0);
  const [file, setFile] = useState(null);
  const [scan, setScan] = useState(null); // the check with no choices: what the file says
  const [endpoint, setEndpoint] = useState("");
  const [models, setModels] = useState([]);
  const [form, setForm] = useState({ name: "", description: "", model: "", temperature: "", max_tokens: "", priority: "0", complete_by: "" });
  const [check, setCheck] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [uploads, setUploads] = useState(0);

  const run = async (work) => {
    setBusy(true);
    setError(null);
    try {
      await work();
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };

  const use = (chosen, type = "") =>
    run(async () => {
      setFile(chosen);
      setEndpoint(type);
      setCheck(null);
      setScan(await post("/v1/batches/preflight", type ? { input_file_id: chosen.id, endpoint: type } : { input_file_id: chosen.id }));
    });

  useEffect(() => {
    get("/console/api/models").then((page) => setModels(page.data), setError);
    // Copy as new batch (?copy=<batch>) or an exported file (?file=<file>): the page opens on
    // that file and those settings; copying runs nothing and does not extend the file's life.
    const asked = new URLSearchParams(location.search);
    if (asked.get("copy")) {
      run(async () => {
        const source = await get(`/console/api/batches/${encodeURIComponent(asked.get("copy"))}`);
        const copy = source.copy;
        if (!copy) throw new Error("This batch cannot be copied yet: only a Chat or Embeddings batch made from a file can.");
        const c = copy.choices || {};
        setForm({
          ...form,
          name: copy.name ? `Copy of ${copy.name}` : "",
          description: copy.description || "",
          model: c.model || "",
          temperature: c.temperature == null ? "" : String(c.temperature),
          max_tokens: c.max_tokens == null ? "" : String(c.max_tokens),
        });
        if (c.endpoint) setEndpoint(c.endpoint);
        if (copy.input_file_id) await use({ id: copy.input_file_id, filename: copy.filename }, c.endpoint || "");
        else setError(new Error("The batch's source file has been deleted or has expired: upload it again; the settings are kept."));
      });
    } else if (asked.get("file")) {
      run(async () => use(await get(`/v1/files/${encodeURIComponent(asked.get("file"))}`)));
    }
  }, []);

  if (pending) return html`<${Pending} pending=${pending} onDone=${() => setPending(readPending())} />`;
  if (!capabilities.role_may_submit) {
    return html`<p class="info">Your role (below ${capabilities.min_role}) cannot submit batches.</p>`;
  }

  const target = endpoint || (scan && scan.endpoint) || "";
  const isChat = target === "/v1/chat/completions";
  const body = () => {
    const b = { input_file_id: file.id };
    if (endpoint) b.endpoint = endpoint;
    if (form.model) b.model = form.model;
    if (isChat && form.temperature !== "") b.temperature = Number(form.temperature);
    if (isChat && form.max_tokens !== "") b.max_tokens = Number(form.max_tokens);
    return b;
  };
  const upload = (event) => {
    event.preventDefault();
    const input = event.target.elements.file;
    if (!input.files.length) return setError(new Error("Choose a JSONL file to upload."));
    const data = new FormData();
    data.append("purpose", "batch");
    data.append("file", input.files[0]);
    run(async () => {
      const uploaded = await call("POST", "/v1/files", { body: data });
      setUploads((n) => n + 1);
      await use(uploaded);
    });
  };

  const needsType = scan && scan.problems.some((p) => p.code === "endpoint_needed");
  const fatal = scan && scan.problems.filter((p) => ["mixed_types", "url_contradicts_body", "invalid_url", "endpoint_contradicts_file"].includes(p.code));
  const mustChoose = scan && scan.problems.some((p) => p.code === "model_choice_required");

  const checkNow = () => run(async () => setCheck(await post("/v1/batches/preflight", body())));
  const submit = () =>
    run(async () => {
      const next = {
        key: crypto.randomUUID(),
        started_at: Date.now(),
        body: {
          ...body(),
          name: form.name.trim(),
          description: form.description.trim() || undefined,
          priority: form.priority === "" ? undefined : Number(form.priority),
          complete_by: fromLocalInput(form.complete_by) ?? undefined,
          check: check.check,
        },
      };
      writePending(next);
      try {
        const batch = await send(next);
        clearPending();
        navigate(`/console/batches/${encodeURIComponent(batch.id)}`);
      } catch (failure) {
        const known = failure instanceof ApiError && failure.status >= 400 && failure.status < 500 && failure.status !== 409;
        if (known || (failure.status === 409 && failure.code === "check_outdated")) {
          clearPending(); // refused: nothing was made
          if (failure.code === "check_outdated") setCheck(null);
          throw failure;
        }
        setPending(readPending()); // the outcome is not known: the page asks for it again
      }
    });

  const field = (name) => ({ value: form[name], onInput: (e) => setForm({ ...form, [name]: e.target.value }) });
  const choices = models.filter((m) => !target || m.endpoints.includes(target));

  return html`
    <section aria-labelledby="create-title">
      <h2 id="create-title">Create batch</h2>
      <ol class="steps">${STEPS.map((label, i) => html`<li aria-current=${i === step ? "step" : undefined}>${i + 1}. ${label}</li>`)}</ol>
      <p class="note">Runs under your API key <code>${session.key_prefix}…</code>. Nothing runs until you confirm the last step; uploading and checking cost nothing.</p>
      <${ErrorNote} error=${error} />

      ${step === 0 && html`
        <form class="form" onSubmit=${upload}>
          <label for="file">JSONL file
            <span class="hint">One request per line: custom_id and body (url and method may be left out).</span>
          </label>
          <input id="file" name="file" type="file" accept=".jsonl,.json,application/jsonl,text/plain" />
          <div class="actions"><button class="primary" type="submit" disabled=${busy}>Upload</button></div>
        </form>
        ${file && scan && html`
          <div class="info" role="status">
            <p><strong>${file.filename}</strong> (${file.id}): ${scan.endpoint ? `${(TYPES.find(([e]) => e === scan.endpoint) || [0, scan.endpoint])[1]} requests, as ${scan.endpoint_from === "url" ? "the lines' url says" : "the bodies say"}` : "the type is not known yet"}.</p>
            ${scan.models_named && scan.models_named.length > 0 && html`<p>Models named in the file: ${scan.models_named.join(", ")}</p>`}
          </div>
          ${fatal.length > 0 && html`<${Problems} check=${{ ...scan, problems: fatal, problems_unlisted: 0, problems_truncated: false }} body=${{ input_file_id: file.id }} />`}
          ${needsType && html`<fieldset><legend>No line says which type: choose one</legend>
            ${TYPES.map(([value, label]) => html`<label><input type="radio" name="type" value=${value} checked=${endpoint === value} onChange=${() => setEndpoint(value)} /> ${label}</label>`)}
          </fieldset>`}
          <div class="actions"><button class="primary" type="button" disabled=${busy || fatal.length > 0 || (needsType && !endpoint)} onClick=${() => setStep(1)}>Next: configure</button></div>`}
        <${Files} onUse=${use} refresh=${uploads} />`}

      ${step === 1 && html`
        <form class="form" onSubmit=${(e) => { e.preventDefault(); setCheck(null); setStep(2); checkNow(); }}>
          <label for="name">Name</label>
          <input id="name" required maxlength="256" ...${field("name")} />
          <label for="description">Description <span class="hint">Optional.</span></label>
          <textarea id="description" maxlength="512" ...${field("description")}></textarea>
          <label for="model">Model
            <span class="hint">${mustChoose ? "The file names several models, or one you cannot use: choose one for every request." : "Keep the file's model, or choose one for every request."}</span></label>
          <select id="model" required=${mustChoose} value=${form.model} onChange=${(e) => setForm({ ...form, model: e.target.value })}>
            <option value="">${mustChoose ? "Choose a model" : "Keep the file's model"}</option>
            ${choices.map((m) => html`<option value=${m.id}>${m.id}</option>`)}
          </select>
          ${isChat && html`
            <label for="temperature">Temperature <span class="hint">Optional: for every request.</span></label>
            <input id="temperature" type="number" step="0.1" min="0" max="2" ...${field("temperature")} />
            <label for="max_tokens">max_tokens <span class="hint">Optional: for every request.</span></label>
            <input id="max_tokens" type="number" step="1" min="1" ...${field("max_tokens")} />`}
          <label for="priority">Priority <span class="hint">Higher runs first: -10 to 10 (0 by default). The gateway does not order work by it yet.</span></label>
          <input id="priority" type="number" step="1" min="-10" max="10" ...${field("priority")} />
          <label for="complete_by">Complete by <span class="hint">Optional: when you want the batch done, no later than its window's end.</span></label>
          <input id="complete_by" type="datetime-local" ...${field("complete_by")} />
          <div class="actions">
            <button type="button" onClick=${() => setStep(0)}>Back</button>
            <button class="primary" type="submit" disabled=${busy}>Next: check</button>
          </div>
        </form>`}

      ${step === 2 && html`
        <div>
          ${busy && !check && html`<p role="status">Checking every line…</p>`}
          ${check && !check.valid && html`<${Problems} check=${check} body=${body()} />`}
          ${check && check.valid && html`<${Valid} check=${check} />`}
          <div class="actions">
            <button type="button" onClick=${() => setStep(1)}>Back</button>
            <button type="button" onClick=${checkNow} disabled=${busy}>Check again</button>
            <button type="button" class="primary" disabled=${busy || !check || !check.valid} onClick=${submit}>Submit batch</button>
          </div>
        </div>`}
    </section>`;
}
