// Talking to the Strata server from the chat page: the API key, JSON calls, and the
// server-sent events of a streamed chat completion. Every failure becomes an ApiError
// whose message is shown to the user (an HTTP error's OpenAI message, a lost connection).

const KEY_STORAGE = "strata-api-key";

export class ApiError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.status = status; // 0: no HTTP answer (server unreachable, connection lost, stream error)
  }
}

export const apiKey = {
  get() { return sessionStorage.getItem(KEY_STORAGE) || ""; },
  set(value) {
    if (value) sessionStorage.setItem(KEY_STORAGE, value);
    else sessionStorage.removeItem(KEY_STORAGE);
  },
};

function headers(json = false) {
  const out = {};
  if (json) out["Content-Type"] = "application/json";
  const key = apiKey.get();
  if (key) out["Authorization"] = `Bearer ${key}`;
  return out;
}

async function send(path, init) {
  try {
    return await fetch(path, init);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(`cannot reach the server at ${location.origin} (${error.message}); is strata serve running?`);
  }
}

async function errorOf(response) {
  let message = `the server answered HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch (_) { /* not JSON: keep the status line */ }
  return new ApiError(message, response.status);
}

export async function getJSON(path) {
  const response = await send(path, { headers: headers() });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

export async function postJSON(path, body, signal) {
  const response = await send(path, { method: "POST", headers: headers(true), body: JSON.stringify(body), signal });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

// Yields each chunk object of a streamed chat completion until [DONE].
export async function* streamChat(body, signal) {
  const response = await send("/v1/chat/completions",
    { method: "POST", headers: headers(true), body: JSON.stringify(body), signal });
  if (!response.ok) throw await errorOf(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    let step;
    try {
      step = await reader.read();
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new ApiError(`the connection to the server was lost mid-answer (${error.message})`);
    }
    if (step.done) break;
    buffer += step.value.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ApiError(chunk.error.message || "the server ended the answer with an error");
        yield chunk;
      }
    }
  }
  throw new ApiError("the answer stopped before it was complete: the server closed the connection");
}
