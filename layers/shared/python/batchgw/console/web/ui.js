// What every page shares: htm bound to Preact, and routing under /console/ (history API).

import { h } from "preact";
import { useEffect, useState } from "preact/hooks";
import htm from "htm";

export const html = htm.bind(h);

const listeners = new Set();

export function navigate(path) {
  history.pushState(null, "", path);
  listeners.forEach((f) => f(path));
  const main = document.getElementById("main");
  if (main) main.focus(); // a new page: its content gets the focus, as a page load would
}

window.addEventListener("popstate", () => listeners.forEach((f) => f(location.pathname)));

export function usePath() {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    listeners.add(setPath);
    return () => listeners.delete(setPath);
  }, []);
  return path;
}

export function Link({ href, children, ...rest }) {
  const onClick = (event) => {
    if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    navigate(href);
  };
  return html`<a href=${href} onClick=${onClick} ...${rest}>${children}</a>`;
}

export function ErrorNote({ error }) {
  return error ? html`<p class="error" role="alert">${error.message || String(error)}</p>` : null;
}
