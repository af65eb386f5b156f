// What every page shares: htm bound to Preact, routing under /console/ (history API, with
// the query a page reads its filters from), and the notes of a page's three states.

import { h } from "preact";
import { useEffect, useState } from "preact/hooks";
import htm from "htm";

export const html = htm.bind(h);

const listeners = new Set();

export function navigate(path) {
  history.pushState(null, "", path);
  listeners.forEach((f) => f());
  const main = document.getElementById("main");
  if (main) main.focus(); // a new page: its content gets the focus, as a page load would
}

window.addEventListener("popstate", () => listeners.forEach((f) => f()));

const here = () => ({ path: location.pathname, query: new URLSearchParams(location.search) });

// Where the console is: its path and the query's parameters, followed as they change.
export function useLocation() {
  const [where, setWhere] = useState(here);
  useEffect(() => {
    const follow = () => setWhere(here());
    listeners.add(follow);
    return () => listeners.delete(follow);
  }, []);
  return where;
}

export function usePath() {
  return useLocation().path;
}

export function Link({ href, children, ...rest }) {
  const onClick = (event) => {
    if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    navigate(href);
  };
  return html`<a href=${href} onClick=${onClick} ...${rest}>${children}</a>`;
}

// What ``load()`` answers, read again when ``deps`` change: { data, error, loading, reload }.
export function useLoad(load, deps) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const run = () => {
    setState((before) => ({ ...before, error: null, loading: true }));
    load().then(
      (data) => setState({ data, error: null, loading: false }),
      (error) => setState({ data: null, error, loading: false }),
    );
  };
  useEffect(run, deps);
  return { ...state, reload: run };
}

// A page's loading and error states, in one place: null once there is something to show.
export function Pending({ state, what }) {
  if (state.error) return html`<${ErrorNote} error=${state.error} />`;
  if (state.loading && state.data == null) return html`<p class="loading" role="status">Loading ${what}…</p>`;
  return null;
}

export function ErrorNote({ error }) {
  return error ? html`<p class="error" role="alert">${error.message || String(error)}</p>` : null;
}
