// The chat page: a conversation with the served model, streamed token by token.
// Each reply shows its token ids, tokens/s and seed; "check" sends the same request
// again on its own and marks whether the answer is identical (Strata's promise:
// a request's tokens never depend on who else is served).

import { apiKey, getJSON, postJSON, streamChat } from "./api.js";
import { startSlotsPanel } from "./slots.js";

const $ = (id) => document.getElementById(id);
const MAX_SEED = 2 ** 31 - 1;

const state = {
  model: null,          // the id /v1/models lists
  messages: [],         // the conversation sent with each request (system prompt added at send time)
  image: null,          // data: URL of the image attached to the next message
  controller: null,     // AbortController of the answer being streamed
};

// ---------------------------------------------------------------- set-up

async function connect() {
  try {
    const models = await getJSON("/v1/models");
    state.model = models.data[0].id;
    $("model").textContent = state.model;
    setStatus("");
    $("key-bar").hidden = true;
  } catch (error) {
    $("model").textContent = "not connected";
    handleConnectionError(error);
  }
}

function handleConnectionError(error) {
  if (error.status === 401) askForKey(error.message);
  else setStatus(error.message);
}

function askForKey(message) {
  $("key-bar").hidden = false;
  $("key-error").textContent = apiKey.get() ? message : "";
  $("api-key").focus();
}

function setStatus(text) {
  $("status").textContent = text;
}

// ---------------------------------------------------------------- requests

function sampling() {
  const number = (id) => ($(id).value.trim() === "" ? null : Number($(id).value));
  const seed = number("seed");
  return {
    temperature: number("temperature") ?? 0.7,
    top_p: number("top-p") ?? 1,
    top_k: number("top-k") ?? 0,
    max_tokens: number("max-tokens") ?? 512,
    // Always sent, so that "check" re-runs exactly this request.
    seed: seed ?? Math.floor(Math.random() * MAX_SEED),
  };
}

function requestBody() {
  const system = $("system").value.trim();
  const messages = system ? [{ role: "system", content: system }, ...state.messages] : [...state.messages];
  return {
    model: state.model, messages, stream: true, stream_options: { include_usage: true },
    return_token_ids: true, ...sampling(),
  };
}

async function send() {
  const text = $("prompt").value.trim();
  if (!text && !state.image) return;
  if (state.controller) return;
  if (!state.model) await connect();
  if (!state.model) return;
  const content = state.image
    ? [{ type: "image_url", image_url: { url: state.image } }, ...(text ? [{ type: "text", text }] : [])]
    : text;
  state.messages.push({ role: "user", content });
  dropRegenerateButtons();
  addUserMessage(text, state.image);
  $("prompt").value = "";
  clearImage();
  await answer();
}

async function answer() {
  const body = requestBody();
  const view = addAssistantMessage();
  const reply = { text: "", ids: [], usage: null, finish: null, firstAt: null, lastAt: null, sentAt: performance.now() };
  state.controller = new AbortController();
  setBusy(true);
  try {
    for await (const chunk of streamChat(body, state.controller.signal)) {
      if (chunk.usage) reply.usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) continue;
      const piece = (choice.delta && choice.delta.content) || "";
      const ids = choice.token_ids || [];
      if (piece || ids.length) {
        reply.lastAt = performance.now();
        if (reply.firstAt === null) reply.firstAt = reply.lastAt;
      }
      reply.text += piece;
      reply.ids.push(...ids);
      if (choice.finish_reason) reply.finish = choice.finish_reason;
      view.text.textContent = reply.text;
      scrollDown();
    }
    state.messages.push({ role: "assistant", content: reply.text });
    finishReply(view, body, reply, false);
  } catch (error) {
    if (error.name === "AbortError") {
      state.messages.push({ role: "assistant", content: reply.text });
      finishReply(view, body, reply, true);
    } else {
      view.element.remove();
      addError(error);
    }
  } finally {
    state.controller = null;
    setBusy(false);
  }
}

function stop() {
  if (state.controller) state.controller.abort();
}

async function regenerate() {
  if (state.controller) return;
  const last = state.messages[state.messages.length - 1];
  if (last && last.role === "assistant") state.messages.pop();
  const views = $("messages").querySelectorAll(".msg.assistant, .msg.error");
  const lastView = views[views.length - 1];
  if (lastView && lastView === $("messages").lastElementChild) lastView.remove();
  await answer();
}

// Sends the same body again, alone and not streamed, and compares the generated token ids.
async function check(body, reply, result, button) {
  button.disabled = true;
  result.className = "check-result";
  result.textContent = "re-running alone…";
  try {
    const again = await postJSON("/v1/chat/completions", { ...body, stream: false, stream_options: undefined });
    const choice = again.choices[0];
    const ids = choice.token_ids || [];
    const same = ids.length === reply.ids.length && ids.every((id, i) => id === reply.ids[i])
      && (choice.message.content || "") === reply.text;
    if (same) {
      result.className = "check-result identical";
      result.textContent = `identical ✓ (${ids.length} tokens re-run alone)`;
    } else {
      let at = 0;
      while (at < ids.length && at < reply.ids.length && ids[at] === reply.ids[at]) at++;
      result.className = "check-result different";
      result.textContent = `different ✗ — first difference at token ${at} (${reply.ids.length} vs ${ids.length} tokens)`;
    }
  } catch (error) {
    result.className = "check-result different";
    result.textContent = `check failed: ${error.message}`;
  } finally {
    button.disabled = false;
  }
}

// ---------------------------------------------------------------- the conversation view

function addUserMessage(text, image) {
  const element = messageElement("user");
  if (image) {
    const img = document.createElement("img");
    img.src = image;
    img.alt = "attached image";
    element.append(img);
  }
  const body = document.createElement("div");
  body.className = "text";
  body.textContent = text;
  element.append(body);
  scrollDown();
}

function addAssistantMessage() {
  const element = messageElement("assistant");
  element.classList.add("streaming");
  const text = document.createElement("div");
  text.className = "text";
  element.append(text);
  scrollDown();
  return { element, text };
}

function addError(error) {
  const element = messageElement("error");
  element.textContent = `error: ${error.message || error}`;
  dropRegenerateButtons();
  const retry = button("Retry", () => regenerate());
  retry.className = "regenerate";
  element.append(" ", retry);
  if (error.status === 401) askForKey(error.message);
  scrollDown();
}

function finishReply(view, body, reply, stopped) {
  view.element.classList.remove("streaming");
  const tokens = reply.usage ? reply.usage.completion_tokens : reply.ids.length;
  const decodeSeconds = reply.firstAt !== null && reply.lastAt > reply.firstAt ? (reply.lastAt - reply.firstAt) / 1000 : 0;
  const meta = document.createElement("div");
  meta.className = "meta";
  const facts = [`${tokens} tokens`];
  if (decodeSeconds > 0 && tokens > 1) facts.push(`${((tokens - 1) / decodeSeconds).toFixed(1)} tokens/s`);
  if (reply.firstAt !== null) facts.push(`first token ${Math.round(reply.firstAt - reply.sentAt)} ms`);
  facts.push(`seed ${body.seed}`);
  facts.push(stopped ? "stopped" : `finish: ${reply.finish}`);
  const info = document.createElement("span");
  info.className = "stats";
  info.textContent = facts.join(" · ");
  meta.append(info);

  const copy = button("Copy", async () => {
    await copyText(reply.text);
    copy.textContent = "Copied";
    setTimeout(() => (copy.textContent = "Copy"), 1500);
  });
  copy.className = "copy";
  dropRegenerateButtons();       // only the last reply can be regenerated
  const regen = button("Regenerate", () => regenerate());
  regen.className = "regenerate";
  meta.append(copy, regen);
  if (!stopped) {
    const result = document.createElement("span");
    result.className = "check-result";
    const checkButton = button("Check", () => check(body, reply, result, checkButton));
    checkButton.className = "check";
    checkButton.title = "re-run this request alone and compare the tokens";
    meta.append(checkButton, result);
  }
  const ids = document.createElement("details");
  ids.innerHTML = "<summary>token ids</summary>";
  const list = document.createElement("div");
  list.className = "token-ids";
  list.textContent = reply.ids.join(" ");
  ids.append(list);
  view.element.append(meta, ids);
  scrollDown();
}

function dropRegenerateButtons() {
  for (const b of document.querySelectorAll(".regenerate")) b.remove();
}

function messageElement(role) {
  const element = document.createElement("div");
  element.className = `msg ${role}`;
  $("messages").append(element);
  return element;
}

function button(label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (_) {          // no clipboard permission (plain http on another host): the old way
    const area = document.createElement("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
}

function scrollDown() {
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  for (const b of document.querySelectorAll(".regenerate")) b.disabled = busy;
}

// ---------------------------------------------------------------- images

function attachImage(file) {
  if (!file) return;
  const reader = new FileReader();
  reader.onload = () => {
    state.image = reader.result;       // a data: URL, as the API expects
    $("attachment-preview").src = state.image;
    $("attachment").hidden = false;
  };
  reader.onerror = () => addError(new Error(`could not read ${file.name}`));
  reader.readAsDataURL(file);
}

function clearImage() {
  state.image = null;
  $("image-input").value = "";
  $("attachment").hidden = true;
}

// ---------------------------------------------------------------- wiring

function wire() {
  $("composer").addEventListener("submit", (event) => { event.preventDefault(); send(); });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); send(); }
  });
  $("stop").addEventListener("click", stop);
  $("clear").addEventListener("click", () => {
    stop();
    state.messages = [];
    $("messages").replaceChildren();
  });
  $("image-input").addEventListener("change", (event) => attachImage(event.target.files[0]));
  $("attachment-remove").addEventListener("click", clearImage);
  $("key-button").addEventListener("click", () => askForKey(""));
  $("key-bar").addEventListener("submit", (event) => {
    event.preventDefault();
    apiKey.set($("api-key").value.trim());
    $("api-key").value = "";
    connect().then(() => slots.refresh());
  });
}

wire();
const slots = startSlotsPanel($("slots"), (error) => askForKey(error.message));
connect();
