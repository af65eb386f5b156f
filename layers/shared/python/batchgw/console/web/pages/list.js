// What the list pages share (the Batches page, the admin's Batches, Requests and Prompts): a list read a page at a time from
// the server (its filters in the query), and the filter by the spec's four groups.

import { useEffect, useState } from "preact/hooks";
import { get } from "../api.js";
import { GROUP_NAMES } from "../format.js";
import { html } from "../ui.js";

const FILTERS = [["", "All"], ...Object.entries(GROUP_NAMES)];

// The rows of ``path`` for ``filters`` (empty values left out), ``limit`` a page; ``more()``
// reads the next page on from the last one (``cursor``: where a page says the next starts).
export function usePages(path, filters, { limit = 20, cursor = (page) => page.next_after } = {}) {
  const [rows, setRows] = useState([]);
  const [next, setNext] = useState(null);
  const [error, setError] = useState(null);
  const [loading, setLoading] = useState(true);
  const load = async (after) => {
    setLoading(true);
    setError(null);
    const params = new URLSearchParams({ limit: String(limit) });
    Object.entries(filters).forEach(([name, value]) => value && params.set(name, value));
    if (after) params.set("after", after);
    try {
      const page = await get(`${path}?${params}`);
      setRows((before) => (after ? [...before, ...page.data] : page.data));
      setNext(page.has_more ? cursor(page) : null);
    } catch (failure) {
      setError(failure);
    } finally {
      setLoading(false);
    }
  };
  useEffect(() => {
    load(null);
  }, [path, JSON.stringify(filters)]);
  return { rows, next, error, loading, more: () => load(next), reload: () => load(null) };
}

export function GroupFilter({ group, onChange }) {
  return html`
    <div class="filters" role="group" aria-label="Filter by status">
      ${FILTERS.map(([value, label]) => html`
        <button type="button" aria-pressed=${group === value ? "true" : "false"} onClick=${() => onChange(value)}>${label}</button>`)}
    </div>`;
}

export function Caption({ list }) {
  return html`<caption class="note" aria-live="polite">${list.loading ? "Loading…" : `${list.rows.length} shown${list.next ? ", more below" : ""}`}</caption>`;
}

export function More({ list }) {
  return list.next ? html`<div class="actions"><button type="button" onClick=${list.more} disabled=${list.loading}>Load more</button></div>` : null;
}
