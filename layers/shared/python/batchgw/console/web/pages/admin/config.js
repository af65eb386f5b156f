// Configuration → Batch inference (administrators only): every batch setting with its value,
// default, where the value comes from and what it does (GET /admin/config); a change is the
// API's to judge (PATCH /admin/config/{name}: a refused value shows its message and changes
// nothing), and a reset takes the default again (DELETE /admin/config/{name}).

import { useState } from "preact/hooks";
import { del, get, patch } from "../../api.js";
import { ErrorNote, html, Pending, useLoad } from "../../ui.js";

const SOURCES = { default: "default", environment: "environment", runtime: "stored" };

const shown = (value) => (value === null ? "" : typeof value === "boolean" ? (value ? "on" : "off") : String(value));

// What the input's text sends: a number where the setting holds one, null for an empty
// optional one, the text itself otherwise (the API refuses what does not fit, with why).
function typed(text, setting) {
  const trimmed = text.trim();
  if (typeof setting.default === "boolean") return trimmed === "on";
  if (trimmed === "" && setting.default === null) return null;
  const numeric = typeof setting.default === "number" || setting.default === null;
  if (numeric && /^-?\d+(\.\d+)?$/.test(trimmed)) return Number(trimmed);
  return typeof setting.default === "string" ? text : trimmed;
}

function Setting({ setting, onChanged }) {
  const [text, setText] = useState(shown(setting.value));
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const id = `setting-${setting.name}`;
  const act = async (change) => {
    setBusy(true);
    setError(null);
    try {
      const after = await change();
      setText(shown(after.value));
      onChanged(after);
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  const save = (event) => {
    event.preventDefault();
    act(() => patch(`/admin/config/${encodeURIComponent(setting.name)}`, { value: typed(text, setting) }));
  };
  const reset = () => act(() => del(`/admin/config/${encodeURIComponent(setting.name)}`));
  const input = typeof setting.default === "boolean"
    ? html`<select id=${id} value=${text} onChange=${(e) => setText(e.target.value)}><option value="on">on</option><option value="off">off</option></select>`
    : html`<input id=${id} value=${text} size="12" onInput=${(e) => setText(e.target.value)} placeholder=${setting.default === null ? "none" : ""} />`;
  return html`
    <tr data-setting=${setting.name}>
      <th scope="row"><label for=${id}><code>${setting.name}</code></label><div class="note">${setting.description}</div></th>
      <td data-label="Value"><form class="inline" onSubmit=${save}>${input}
        <button type="submit" disabled=${busy}>Save <span class="sr-only">${setting.name}</span></button></form>
        <${ErrorNote} error=${error} /></td>
      <td data-label="Default">${shown(setting.default) || "none"}</td>
      <td data-label="Source" data-source=${setting.source}>${SOURCES[setting.source] || setting.source}</td>
      <td><button type="button" onClick=${reset} disabled=${busy || setting.source !== "runtime"}>Reset to default <span class="sr-only">${setting.name}</span></button></td>
    </tr>`;
}

export function ConfigPage() {
  const state = useLoad(() => get("/admin/config"), []);
  const [query, setQuery] = useState("");
  const settings = state.data ? state.data.data.filter((s) => s.name.toLowerCase().includes(query.trim().toLowerCase())) : [];
  const changed = () => state.reload();
  return html`
    <section aria-labelledby="config-title">
      <h2 id="config-title">Configuration: Batch inference</h2>
      <p class="note">None of these needs a restart: a change reaches every gateway process within about ten seconds.
        A stored value wins over the environment's; Reset to default forgets it.</p>
      <form class="toolbar" role="search" onSubmit=${(e) => e.preventDefault()}>
        <label>Find a setting <input type="search" value=${query} onInput=${(e) => setQuery(e.target.value)} /></label>
      </form>
      <${Pending} state=${state} what="the settings" />
      ${state.data && settings.length === 0 && html`<p class="info" role="status">No setting matches “${query}”.</p>`}
      ${settings.length > 0 && html`<div class="table-wrap" tabindex="0" role="region" aria-label="Settings"><table class="settings">
        <thead><tr><th scope="col">Setting</th><th scope="col">Value</th><th scope="col">Default</th><th scope="col">Source</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${settings.map((s) => html`<${Setting} key=${`${s.name}:${JSON.stringify(s.value)}:${s.source}`} setting=${s} onChanged=${changed} />`)}</tbody>
      </table></div>`}
    </section>`;
}
