// Live captions in the browser: microphone -> AudioWorklet (16 kHz Int16) -> WebSocket /v1/stream.
//
// The page speaks the native protocol v1 (docs/protocol.md): it sends pcm_s16le frames of 100 ms,
// shows the revisable partial (dimmed) after the finals, and on Stop sends {"type": "eof"} so the
// server finalises what it heard. A dropped connection is retried with exponential backoff (the
// microphone keeps running; audio captured while disconnected is dropped beyond a few seconds);
// errors the server reports and close codes are shown. A ?token= in the page's URL is passed on.
"use strict";

const SAMPLE_RATE = 16000;
const MAX_BACKLOG_FRAMES = 50; // 5 s of audio kept while (re)connecting
const MAX_PARAGRAPHS = 500; // the transcript shown is bounded too
const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 15000;
// Error codes a retry cannot fix: the page stops instead of reconnecting.
const FATAL_ERRORS = new Set([
  "unauthorized",
  "origin_not_allowed",
  "model_not_enabled",
  "unsupported_encoding",
  "invalid_message",
  "invalid_json",
  "invalid_audio",
]);

const $ = (id) => document.getElementById(id);
const ui = {
  start: $("start"),
  stop: $("stop"),
  status: $("status"),
  error: $("error"),
  finals: $("finals"),
  partial: $("partial"),
  level: $("level"),
  transcript: $("transcript"),
};

const state = {
  running: false, // the user pressed Start and not Stop
  ws: null,
  ready: false, // the current socket got "ready"
  backlog: [], // audio frames waiting for a ready socket
  attempt: 0, // reconnection attempts since the last "ready"
  retryTimer: null,
  lastError: null, // the last error code of the current connection
  lastClose: null, // how the previous connection ended, while reconnecting
  sessions: 0, // sessions that became ready (a reconnect makes a new one)
  paragraph: null, // the <p> the next final goes into
  audio: null, // {context, stream, node}
};

function streamUrl() {
  const page = new URLSearchParams(location.search);
  const query = new URLSearchParams({ sample_rate: String(SAMPLE_RATE), encoding: "pcm_s16le", channels: "1" });
  for (const name of ["token", "language", "task", "label", "endpointing_ms"]) {
    if (page.get(name)) query.set(name, page.get(name));
  }
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/v1/stream?${query}`;
}

function setStatus(text, kind = "") {
  ui.status.textContent = text;
  ui.status.dataset.kind = kind;
}

function showError(text) {
  ui.error.textContent = text;
  ui.error.hidden = !text;
}

// -- transcript ---------------------------------------------------------------------------------

function addFinal(message) {
  if (message.text) {
    if (!state.paragraph) {
      state.paragraph = document.createElement("p");
      ui.finals.appendChild(state.paragraph);
      while (ui.finals.childElementCount > MAX_PARAGRAPHS) ui.finals.firstElementChild.remove();
    }
    const span = document.createElement("span");
    span.className = "final";
    span.textContent = (state.paragraph.childElementCount ? " " : "") + message.text;
    span.dataset.start = message.start;
    span.dataset.end = message.end;
    state.paragraph.appendChild(span);
  }
  if (message.endpoint) state.paragraph = null; // the utterance ended: the next one starts a paragraph
  ui.partial.textContent = "";
  scrollDown();
}

function setPartial(text) {
  ui.partial.textContent = text;
  scrollDown();
}

function scrollDown() {
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

// -- socket -------------------------------------------------------------------------------------

function connect() {
  clearTimeout(state.retryTimer);
  state.retryTimer = null;
  state.ready = false;
  state.lastError = null;
  setStatus(state.attempt ? `reconnecting (attempt ${state.attempt + 1})…` : "connecting…", "busy");
  const ws = new WebSocket(streamUrl());
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  ws.onmessage = (event) => onMessage(ws, event);
  ws.onclose = (event) => onClose(ws, event);
}

function onMessage(ws, event) {
  if (ws !== state.ws || typeof event.data !== "string") return;
  let message;
  try {
    message = JSON.parse(event.data);
  } catch {
    return;
  }
  switch (message.type) {
    case "ready":
      state.ready = true;
      state.attempt = 0;
      state.sessions += 1;
      document.body.dataset.sessions = String(state.sessions);
      showError("");
      if (!state.running) setStatus("finishing…", "busy");
      else if (state.lastClose) setStatus(`listening (${message.model}); reconnected after ${state.lastClose}`, "live");
      else setStatus(`listening (${message.model})`, "live");
      state.lastClose = null;
      flushBacklog();
      break;
    case "partial":
      setPartial(message.text);
      break;
    case "final":
      addFinal(message);
      break;
    case "error":
      state.lastError = message.code;
      showError(`${message.code}: ${message.message}`);
      break;
    case "status":
      if (message.lag > 1) setStatus(`listening (captions ${message.lag.toFixed(1)} s behind)`, "live");
      break;
    default: // closed, speech_started, speech_ended: nothing to show
      break;
  }
}

function onClose(ws, event) {
  if (ws !== state.ws) return;
  state.ws = null;
  state.ready = false;
  setPartial("");
  state.paragraph = null;
  const detail = `connection closed (code ${event.code}${event.reason ? `: ${event.reason}` : ""})`;
  if (!state.running) {
    setStatus(event.code === 1000 ? "stopped" : `stopped: ${detail}`, "");
    return;
  }
  if (FATAL_ERRORS.has(state.lastError)) {
    const error = ui.error.textContent;
    showError(`${error ? `${error} — ` : ""}${detail}; not retrying`);
    stop(false);
    return;
  }
  state.lastClose = detail;
  const delay = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** state.attempt) * (0.75 + Math.random() / 2);
  state.attempt += 1;
  const error = state.lastError ? `${ui.error.textContent} — ` : "";
  showError(`${error}${detail}; reconnecting in ${(delay / 1000).toFixed(1)} s`);
  setStatus("disconnected", "error");
  state.retryTimer = setTimeout(connect, delay);
}

function sendAudio(pcm) {
  if (state.ready && state.ws && state.ws.readyState === WebSocket.OPEN) {
    state.ws.send(pcm);
    return;
  }
  state.backlog.push(pcm);
  if (state.backlog.length > MAX_BACKLOG_FRAMES) state.backlog.shift(); // the oldest audio goes
}

function flushBacklog() {
  const frames = state.backlog;
  state.backlog = [];
  for (const pcm of frames) sendAudio(pcm);
}

// -- microphone ---------------------------------------------------------------------------------

async function startAudio() {
  if (!navigator.mediaDevices || !window.AudioWorkletNode) {
    throw new Error("this page needs a secure context (https:// or localhost) and a browser with AudioWorklet");
  }
  const stream = await navigator.mediaDevices.getUserMedia({
    // Raw audio: Whisper is trained on unprocessed speech; suppression and AGC artefacts hurt it.
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  const context = new AudioContext();
  try {
    await context.audioWorklet.addModule("pcm-worklet.js");
    const source = context.createMediaStreamSource(stream);
    const node = new AudioWorkletNode(context, "pcm-downsampler", { processorOptions: { frameMs: 100 } });
    node.port.onmessage = (event) => {
      ui.level.value = Math.min(1, event.data.level * 4);
      if (state.running) sendAudio(event.data.pcm);
    };
    source.connect(node);
    await context.resume();
    state.audio = { context, stream, node };
  } catch (error) {
    stream.getTracks().forEach((track) => track.stop());
    await context.close();
    throw error;
  }
}

function stopAudio() {
  const audio = state.audio;
  state.audio = null;
  if (!audio) return;
  audio.node.port.onmessage = null;
  audio.node.disconnect();
  audio.stream.getTracks().forEach((track) => track.stop());
  audio.context.close();
  ui.level.value = 0;
}

// -- buttons ------------------------------------------------------------------------------------

async function start() {
  if (state.running) return;
  state.running = true;
  state.attempt = 0;
  state.lastClose = null;
  state.backlog = [];
  ui.start.disabled = true;
  ui.stop.disabled = false;
  showError("");
  setStatus("starting the microphone…", "busy");
  try {
    await startAudio();
  } catch (error) {
    showError(`microphone: ${error.message || error.name || error}`);
    stop(false);
    return;
  }
  connect();
}

// Stop capturing; with `finish`, the server finalises what it heard before it closes (1000).
function stop(finish = true) {
  state.running = false;
  ui.start.disabled = false;
  ui.stop.disabled = true;
  stopAudio();
  clearTimeout(state.retryTimer);
  state.retryTimer = null;
  const ws = state.ws;
  if (finish && ws && ws.readyState === WebSocket.OPEN) {
    flushBacklog();
    setStatus("finishing…", "busy");
    ws.send(JSON.stringify({ type: "eof" }));
  } else {
    if (ws) ws.close();
    state.ws = null;
    if (!ui.status.textContent.startsWith("stopped")) setStatus("stopped", "");
  }
  state.backlog = [];
}

ui.start.addEventListener("click", start);
ui.stop.addEventListener("click", () => stop(true));
setStatus("press Start and allow the microphone", "");
