// How the console writes times, numbers and money.

export const when = (seconds) => (seconds == null ? "—" : new Date(seconds * 1000).toLocaleString());
export const count = (n) => (n == null ? "—" : Number(n).toLocaleString());
export const usd = (n) => (n == null ? "—" : `$${Number(n).toFixed(Number(n) < 1 ? 6 : 2)}`);

export const GROUP_NAMES = {
  processing: "Processing",
  completed: "Completed",
  with_issues: "With issues",
  cancelled: "Cancelled",
};

export function inputMethod(batch) {
  if (batch.input_method === "inline") return "Direct requests";
  return batch.metadata && batch.metadata.console === "1" ? "Console upload" : "Input file";
}

// A datetime-local input's value (the browser's own time zone, to the minute) from unix
// seconds, and back (null for an empty input).
export function localInput(seconds) {
  if (seconds == null) return "";
  const at = new Date(seconds * 1000);
  at.setMinutes(at.getMinutes() - at.getTimezoneOffset());
  return at.toISOString().slice(0, 16);
}

export const fromLocalInput = (value) => (value ? Math.floor(new Date(value).getTime() / 1000) : null);
