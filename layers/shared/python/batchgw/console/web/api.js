// Calls to the gateway from the console: the session's cookie goes along by itself; calls
// that may change something carry the session's CSRF token. Every error the API answers
// (the spec's {"error": {message, type, code, param}}) becomes an ApiError with its message.

let csrf = null;

export function setCsrf(token) {
  csrf = token;
}

export class ApiError extends Error {
  constructor(status, error) {
    super((error && error.message) || `The gateway answered ${status}.`);
    this.status = status;
    this.code = error && error.code;
    this.param = error && error.param;
  }
}

export async function call(method, path, { body, headers = {}, raw = false } = {}) {
  const init = { method, headers: { ...headers }, credentials: "same-origin" };
  if (method !== "GET" && method !== "HEAD" && csrf) init.headers["X-CSRF-Token"] = csrf;
  if (body instanceof FormData) {
    init.body = body;
  } else if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let answer;
  try {
    answer = await fetch(path, init);
  } catch (reason) {
    const failure = new ApiError(0, { message: "The gateway could not be reached. Check your connection and try again." });
    failure.network = true;
    throw failure;
  }
  if (!answer.ok) {
    let error = null;
    try {
      error = (await answer.json()).error;
    } catch (_) {
      // not JSON: the status says enough
    }
    throw new ApiError(answer.status, error);
  }
  if (raw) return answer;
  return answer.status === 204 ? null : answer.json();
}

export const get = (path) => call("GET", path);
export const post = (path, body, headers) => call("POST", path, { body, headers });
export const patch = (path, body) => call("PATCH", path, { body });
export const del = (path) => call("DELETE", path);

// A download of what a POST answers (the preflight's problems as CSV or JSONL).
export async function download(path, body, filename) {
  const answer = await call("POST", path, { body, raw: true });
  const url = URL.createObjectURL(await answer.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
