// Live captions in the browser: microphone -> AudioWorklet (16 kHz Int16) -> WebSocket /v1/stream.
//
// The page speaks the native protocol v1 (docs/protocol.md): it sends pcm_s16le frames of 100 ms,
// shows the revisable partial (dimmed) after the finals, and on Stop sends {"type": "eof"} so the
// server finalises what it heard. A lost connection is repaired as the Python client repairs it
// (docs/protocol.md, "Resume"): the page keeps the audio no final covers yet (audio-backlog.js, at
// most MAX_BUFFER_S), reconnects with backoff for at most RECONNECT_S, resumes its session with
// the token from `ready` and the seq of the last final it shows (acknowledging each final), and
// sends on from the frame the server holds; the finals it missed are replayed. When the session
// cannot be resumed (`resume_failed`) or the server shut down (`closed` with reason `shutdown`),
// a new session gets the audio after the last final (after what the old one received), and its
// times are moved on so the captions go on as one transcript. The state is shown in the status
// line; errors a retry cannot fix stop the page. A ?token= in the page's URL is passed on.
"use strict";

const SAMPLE_RATE = 16000;
const MAX_BUFFER_S = 120; // audio held to send again; past it the oldest goes (and the page says so)
const RECONNECT_S = 60; // how long a lost connection is retried before the page gives up
const STALL_MS = 10000; // the socket sent nothing for this long while data waited: the network is stalled
const MAX_PARAGRAPHS = 500; // the transcript shown is bounded too
const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 5000;
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
  finishing: false, // Stop asked for the eof: the page goes on until the server closes after it
  ws: null,
  live: false, // the current socket got "ready" or "resumed": audio goes out as it is captured
  backlog: null, // AudioBacklog: the audio no final covers yet
  token: "", // the session's resume token ("": the next connection starts a new session)
  lastSeq: -1, // the seq of the last final shown from the current session
  sessionFrame: 0, // where the current session's audio begins (sample frames of the page's stream)
  restartAt: 0, // a new session sends the audio from here on (after a shutdown)
  closedReason: null, // the reason of the current session's "closed"
  lostAt: null, // when the connection was lost (performance.now()), while repairing it
  attempt: 0, // connection attempts since it was lost
  retryTimer: null,
  lastError: null, // the last error code of the current connection
  lastClose: null, // how the lost connection ended, while repairing it
  droppedShown: 0, // the seconds of dropped audio the page told the user of
  buffered: 0, // the socket's bufferedAmount after the last send
  movedAt: 0, // when the socket was last seen sending (performance.now())
  sessions: 0, // sessions that became ready
  resumes: 0, // sessions resumed
  paragraph: null, // the <p> the next final goes into
  audio: null, // {context, stream, node}
};

function streamUrl() {
  const page = new URLSearchParams(location.search);
  const query = state.token
    ? new URLSearchParams({ resume: state.token, last_seq: String(state.lastSeq) })
    : new URLSearchParams({ sample_rate: String(SAMPLE_RATE), encoding: "pcm_s16le", channels: "1" });
  for (const name of state.token ? ["token"] : ["token", "language", "task", "label", "endpointing_ms"]) {
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

// A final of the current session; `offset`: seconds of the stream before the session began.
function addFinal(message, offset) {
  if (message.text) {
    if (!state.paragraph) {
      state.paragraph = document.createElement("p");
      ui.finals.appendChild(state.paragraph);
      while (ui.finals.childElementCount > MAX_PARAGRAPHS) ui.finals.firstElementChild.remove();
    }
    const span = document.createElement("span");
    span.className = "final";
    span.textContent = (state.paragraph.childElementCount ? " " : "") + message.text;
    span.dataset.start = (message.start + offset).toFixed(3);
    span.dataset.end = (message.end + offset).toFixed(3);
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
  state.live = false;
  state.lastError = null;
  state.closedReason = null;
  if (state.lostAt === null) setStatus("connecting…", "busy");
  else setStatus(`reconnecting (attempt ${state.attempt}${state.token ? ", resuming" : ""})…`, "busy");
  const ws = new WebSocket(streamUrl());
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  ws.onmessage = (event) => onMessage(ws, event);
  ws.onclose = (event) => onClose(ws, event); // an "error" event is always followed by "close"
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
    case "ready": // a new session: its audio starts after the last final (or what a shut-down one received)
      state.token = message.resume_token || "";
      state.lastSeq = -1;
      state.sessionFrame = Math.max(state.restartAt, state.backlog.start);
      state.paragraph = null;
      state.sessions += 1;
      goLive(state.sessionFrame, `listening (${message.model})`);
      break;
    case "resumed": // the same session: it holds audio_frames of it, and replays the finals after lastSeq
      state.resumes += 1;
      goLive(state.sessionFrame + message.audio_frames, "listening; session resumed");
      break;
    case "partial":
      setPartial(message.text);
      break;
    case "final":
      onFinal(ws, message);
      break;
    case "error":
      state.lastError = message.code;
      if (message.code === "resume_failed") state.token = ""; // gone: a new session takes the audio on
      showError(`${message.code}: ${message.message}`);
      break;
    case "closed": // the session is over; after a shutdown, a new one goes on from what it received
      state.token = "";
      state.closedReason = message.reason;
      if (message.reason === "shutdown") {
        state.restartAt = state.sessionFrame + Math.round(message.audio_seconds * SAMPLE_RATE);
      }
      break;
    case "status":
      if (message.lag > 1 && state.running) {
        setStatus(`listening (captions ${message.lag.toFixed(1)} s behind)`, "live");
      }
      break;
    default: // speech_started, speech_ended: nothing to show
      break;
  }
}

// The connection serves the session: send the audio from stream frame `from` on (and the eof
// after it if Stop asked for one); from now on audio goes out as it is captured.
function goLive(from, text) {
  document.body.dataset.sessions = String(state.sessions);
  document.body.dataset.resumes = String(state.resumes);
  const after = state.lastClose ? `; reconnected after ${state.lastClose}` : "";
  state.live = true;
  state.attempt = 0;
  state.lostAt = null;
  state.lastClose = null;
  showError("");
  for (const chunk of state.backlog.since(from)) state.ws.send(chunk);
  if (state.finishing) state.ws.send(JSON.stringify({ type: "eof" }));
  state.buffered = state.ws.bufferedAmount;
  state.movedAt = performance.now();
  setStatus(state.finishing ? "finishing…" : text + after, state.finishing ? "busy" : "live");
  const dropped = state.backlog.droppedS;
  if (dropped > state.droppedShown) {
    showError(`${dropped.toFixed(1)} s of audio were lost: more than ${MAX_BUFFER_S} s waited to be sent`);
    state.droppedShown = dropped;
  }
}

function onFinal(ws, message) {
  if (message.seq <= state.lastSeq) return; // shown already
  state.lastSeq = message.seq;
  state.backlog.release(state.sessionFrame + Math.round(message.end * SAMPLE_RATE));
  if (state.token && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "ack", seq: message.seq }));
  addFinal(message, state.sessionFrame / SAMPLE_RATE);
}

// Whether the page is done: nothing to send, or the server closed the session after the eof.
function finished() {
  if (state.running) return false;
  if (!state.finishing) return true;
  const reason = state.closedReason;
  return reason !== null && (reason !== "shutdown" || state.backlog.end <= state.restartAt);
}

function onClose(ws, event) {
  if (ws !== state.ws) return;
  state.ws = null;
  state.live = false;
  setPartial("");
  const detail = `connection closed (code ${event.code}${event.reason ? `: ${event.reason}` : ""})`;
  if (FATAL_ERRORS.has(state.lastError)) {
    halt(`${ui.error.textContent} — ${detail}; not retrying`);
    return;
  }
  if (finished()) {
    halt("", event.code === 1000 ? "stopped" : `stopped: ${detail}`);
    return;
  }
  const now = performance.now();
  if (state.lostAt === null) state.lostAt = now;
  if (now - state.lostAt > RECONNECT_S * 1000) {
    halt(`${detail}; could not reconnect within ${RECONNECT_S} s`);
    return;
  }
  const backoff = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** state.attempt);
  const delay = state.attempt ? backoff * (0.75 + Math.random() / 2) : 0;
  state.attempt += 1;
  state.lastClose = detail;
  const error = state.lastError ? `${ui.error.textContent} — ` : "";
  showError(`${error}${detail}; reconnecting${delay ? ` in ${(delay / 1000).toFixed(1)} s` : ""}`);
  setStatus("reconnecting…", "error");
  state.retryTimer = setTimeout(connect, delay);
}

// Audio captured: held until a final covers it, and sent now when the connection is live.
function capture(pcm) {
  state.backlog.append(pcm);
  const ws = state.ws;
  if (!state.live || ws.readyState !== WebSocket.OPEN) return; // sent from the backlog once (re)connected
  const now = performance.now();
  if (ws.bufferedAmount === 0 || ws.bufferedAmount < state.buffered) state.movedAt = now;
  if (now - state.movedAt > STALL_MS) {
    // nothing leaves: give the connection up (the session is resumed, or a new one gets the audio)
    state.live = false;
    ws.close(4000, "stalled");
    return;
  }
  ws.send(pcm);
  state.buffered = ws.bufferedAmount;
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
      if (state.running) capture(event.data.pcm);
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
  if (state.running || state.finishing) return;
  Object.assign(state, {
    running: true,
    backlog: new AudioBacklog(SAMPLE_RATE, MAX_BUFFER_S),
    token: "",
    lastSeq: -1,
    sessionFrame: 0,
    restartAt: 0,
    lostAt: null,
    attempt: 0,
    lastClose: null,
    droppedShown: 0,
  });
  ui.start.disabled = true;
  ui.stop.disabled = false;
  showError("");
  setStatus("starting the microphone…", "busy");
  try {
    await startAudio();
  } catch (error) {
    halt(`microphone: ${error.message || error.name || error}`);
    return;
  }
  connect();
}

// Stop capturing: the server finalises what it heard (the page goes on until it closes, 1000).
function stop() {
  state.running = false;
  ui.stop.disabled = true;
  stopAudio();
  if (!state.ws && !state.retryTimer) {
    halt("");
    return;
  }
  state.finishing = true;
  setStatus("finishing…", "busy");
  if (state.live) state.ws.send(JSON.stringify({ type: "eof" })); // else goLive sends it after the audio
}

// The end: no more audio, no more connections; `error` and `status` are shown.
function halt(error, status = "stopped") {
  state.running = false;
  state.finishing = false;
  stopAudio();
  clearTimeout(state.retryTimer);
  state.retryTimer = null;
  const ws = state.ws;
  state.ws = null;
  state.live = false;
  if (ws) ws.close();
  ui.start.disabled = false;
  ui.stop.disabled = true;
  if (error) showError(error);
  setStatus(status, "");
}

ui.start.addEventListener("click", start);
ui.stop.addEventListener("click", stop);
setStatus("press Start and allow the microphone", "");
