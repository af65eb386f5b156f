// The console: signs in with an API key (kept by the server as a session, never here),
// then shows the Batches pages. Every rule is the server's; this only shows what it decided.

import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError, del, get, post, setCsrf } from "./api.js";
import { html, Link, navigate, useLocation } from "./ui.js";
import { BatchesPage } from "./pages/batches.js";
import { BatchPage } from "./pages/batch.js";
import { CreatePage } from "./pages/create.js";
import { ResponsesPage } from "./pages/responses.js";
import { AdminBatchesPage } from "./pages/admin/batches.js";
import { ConfigPage } from "./pages/admin/config.js";
import { ConcurrencyPage } from "./pages/admin/concurrency.js";
import { PromptsPage } from "./pages/admin/prompts.js";
import { RecentPage, RequestsPage } from "./pages/admin/requests.js";
import { WebhookPage } from "./pages/webhook.js";

// --- signing in ------------------------------------------------------------------------------

function SignIn({ onSignedIn }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const session = await post("/console/session", { api_key: key.trim() });
      setKey("");
      onSignedIn(session);
    } catch (failure) {
      setError(failure.message);
    } finally {
      setBusy(false);
    }
  };
  return html`
    <main class="signin" id="main">
      <h1>batchgw console</h1>
      <form onSubmit=${submit} class="form">
        <label for="api-key">API key
          <span class="hint">Entered once: the console keeps a session, not the key, and shows its prefix only.</span>
        </label>
        <input id="api-key" type="password" autocomplete="off" required value=${key}
          onInput=${(e) => setKey(e.target.value)} />
        ${error && html`<p class="error" role="alert">${error}</p>`}
        <button class="primary" type="submit" disabled=${busy}>Sign in</button>
      </form>
    </main>`;
}

// --- the shell: side navigation by the capabilities -------------------------------------------

// The admin area's pages, in the side navigation's order: [path, label].
const ADMIN = [
  ["/console/admin/config", "Configuration"],
  ["/console/admin/concurrency", "Batch Concurrency"],
  ["/console/admin", "Batches"],
  ["/console/admin/prompts", "Prompts"],
  ["/console/admin/requests", "Requests"],
  ["/console/admin/recent", "Recent Requests"],
];

function Nav({ session, capabilities, path, onSignOut }) {
  const links = [];
  if (capabilities && capabilities.show_entry) links.push(["/console/", "Batches"]);
  if (capabilities && capabilities.show_entry && capabilities.role_may_submit) links.push(["/console/create", "Create batch"]);
  if (capabilities && capabilities.show_entry) links.push(["/console/responses", "Background responses"]);
  if (capabilities && capabilities.show_entry) links.push(["/console/webhook", "Webhook"]);
  const current = (href) => {
    if (href === "/console/") return path === "/console/" || path.startsWith("/console/batches");
    if (href === "/console/admin") return path === "/console/admin" || path === "/console/admin/";
    return path === href || path.startsWith(`${href}/`);
  };
  const item = ([href, label]) => html`<li><${Link} href=${href} aria-current=${current(href) ? "page" : undefined}>${label}<//></li>`;
  return html`
    <nav class="side" aria-label="Console">
      <h1>batchgw</h1>
      <ul>${links.map(item)}</ul>
      ${session.role === "admin" && html`<h2 class="nav-group" id="nav-admin">Admin</h2><ul aria-labelledby="nav-admin">${ADMIN.map(item)}</ul>`}
      <div class="who">
        <div>Signed in as <strong>${session.user_id}</strong> (${session.role})</div>
        <div>API key <code>${session.key_prefix}…</code></div>
        <button type="button" onClick=${onSignOut}>Sign out</button>
      </div>
    </nav>`;
}

function Unavailable({ capabilities }) {
  const why = capabilities.status === "unavailable"
    ? "Batch is not available for the moment: its store is not ready. Try again shortly."
    : "Batch is not available on this gateway.";
  return html`<section><h2>Batches</h2><p class="info" role="status">${why}</p></section>`;
}

function AdminPage({ path, query }) {
  const prompts = path.match(/^\/console\/admin\/prompts(?:\/([^/]+))?\/?$/);
  if (prompts) return html`<${PromptsPage} id=${prompts[1] ? decodeURIComponent(prompts[1]) : ""} />`;
  if (path.startsWith("/console/admin/config")) return html`<${ConfigPage} />`;
  if (path.startsWith("/console/admin/concurrency")) return html`<${ConcurrencyPage} />`;
  if (path.startsWith("/console/admin/requests")) return html`<${RequestsPage} query=${query} />`;
  if (path.startsWith("/console/admin/recent")) return html`<${RecentPage} />`;
  return html`<${AdminBatchesPage} />`;
}

function Page({ session, capabilities, path, query }) {
  if (path.startsWith("/console/admin")) {
    return session.role === "admin" ? html`<${AdminPage} path=${path} query=${query} />` : html`<p class="error">Only administrators see this page.</p>`;
  }
  if (!capabilities || capabilities.status !== "enabled") return html`<${Unavailable} capabilities=${capabilities || { status: "unavailable" }} />`;
  if (path.startsWith("/console/webhook")) return html`<${WebhookPage} capabilities=${capabilities} />`;
  if (path.startsWith("/console/responses")) return html`<${ResponsesPage} />`;
  if (path.startsWith("/console/create")) return html`<${CreatePage} capabilities=${capabilities} session=${session} />`;
  const match = path.match(/^\/console\/batches\/([^/]+)$/);
  if (match) return html`<${BatchPage} id=${decodeURIComponent(match[1])} capabilities=${capabilities} />`;
  return html`<${BatchesPage} capabilities=${capabilities} />`;
}

function App() {
  const [session, setSession] = useState(undefined); // undefined: not known yet; null: signed out
  const [capabilities, setCapabilities] = useState(null);
  const { path, query } = useLocation();

  const signedIn = async (shown) => {
    setCsrf(shown.csrf_token);
    try {
      setCapabilities(await get("/user/batch-capabilities"));
    } catch (_) {
      setCapabilities({ status: "unavailable", show_entry: false, role_may_submit: false });
    }
    setSession(shown);
  };

  useEffect(() => {
    get("/console/session").then(signedIn, (failure) => {
      if (!(failure instanceof ApiError) || failure.status !== 401) console.warn(failure);
      setSession(null);
    });
  }, []);

  const signOut = async () => {
    try {
      await del("/console/session");
    } finally {
      setCsrf(null);
      setSession(null);
      navigate("/console/");
    }
  };

  if (session === undefined) return html`<p class="loading">Loading the console…</p>`;
  if (session === null) return html`<${SignIn} onSignedIn=${signedIn} />`;
  return html`
    <a class="skip" href="#main">Skip to content</a>
    <div class="shell">
      <${Nav} session=${session} capabilities=${capabilities} path=${path} onSignOut=${signOut} />
      <main id="main" tabindex="-1"><${Page} session=${session} capabilities=${capabilities} path=${path} query=${query} /></main>
    </div>`;
}

render(html`<${App} />`, document.getElementById("app"));
