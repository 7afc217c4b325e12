// The slots panel: polls GET /slots once a second and shows each slot's state,
// its request, prefill progress, tokens generated and tokens/s, plus the queue.

import { getJSON } from "./api.js";

const POLL_MS = 1000;

export function startSlotsPanel(element, onAuthError) {
  let timer = null;

  async function refresh() {
    if (document.hidden) return;
    try {
      render(element, await getJSON("/slots"));
    } catch (error) {
      element.querySelector(".slots-summary").textContent = `slots unavailable: ${error.message}`;
      element.querySelector("tbody").replaceChildren();
      if (error.status === 401) onAuthError(error);
    }
  }

  refresh();
  timer = setInterval(refresh, POLL_MS);
  return { refresh, stop: () => clearInterval(timer) };
}

function render(element, data) {
  element.querySelector(".slots-summary").textContent =
    `${data.busy_slots} of ${data.num_slots} slots busy · ${data.queue_len} waiting`;
  const rows = data.slots.map((slot) => {
    const tr = document.createElement("tr");
    tr.className = `slot-${slot.state}`;
    const prefill = slot.state === "idle" ? "" : `${Math.min(slot.cached_tokens, slot.prompt_tokens)}/${slot.prompt_tokens}`;
    const rate = slot.tokens_per_s == null ? "" : slot.tokens_per_s.toFixed(1);
    const cells = [slot.id, slot.state, slot.request_id || "", prefill,
      slot.state === "idle" ? "" : slot.generated_tokens, rate];
    for (const value of cells) {
      const td = document.createElement("td");
      td.textContent = String(value);
      tr.append(td);
    }
    return tr;
  });
  element.querySelector("tbody").replaceChildren(...rows);
}
