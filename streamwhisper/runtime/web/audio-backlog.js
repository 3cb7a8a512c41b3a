// The audio the page may have to send again: 16 kHz pcm_s16le frames of its stream, by sample frame.
//
// app.js keeps here the audio it captured that no final covers yet, and the audio it could not
// send while its connection was down. After a resume it sends again from the frame the server
// says it holds; after a new session, from the end of the last final (or from where a shut-down
// session stopped). At most `maxS` seconds are held: past that the oldest audio is dropped and
// counted in `droppedS` (streamwhisper/audio_backlog.py does the same for the Python client).
"use strict";

class AudioBacklog {
  constructor(sampleRate, maxS) {
    this.sampleRate = sampleRate;
    this.maxFrames = Math.max(1, Math.round(maxS * sampleRate));
    this.chunks = []; // Int16Array, oldest first
    this.start = 0; // the frame (counted from the stream's first) of the first sample held
    this.held = 0; // frames held
    this.droppedS = 0; // audio dropped at the bound, in seconds
  }

  // The frame after the last one held (all the audio captured so far).
  get end() {
    return this.start + this.held;
  }

  append(pcm) {
    const chunk = new Int16Array(pcm);
    this.chunks.push(chunk);
    this.held += chunk.length;
    const over = this.held - this.maxFrames;
    if (over > 0) {
      this.forget(over);
      this.droppedS += over / this.sampleRate;
    }
  }

  // Forget the audio before `frame` (a final covers it).
  release(frame) {
    this.forget(Math.min(Math.max(frame - this.start, 0), this.held));
  }

  // The audio from `frame` on (from `start` when `frame` was dropped), as Int16Array chunks.
  since(frame) {
    let skip = Math.max(frame - this.start, 0);
    const out = [];
    for (const chunk of this.chunks) {
      if (skip >= chunk.length) skip -= chunk.length;
      else {
        out.push(skip ? chunk.subarray(skip) : chunk);
        skip = 0;
      }
    }
    return out;
  }

  forget(frames) {
    this.start += frames;
    this.held -= frames;
    while (frames > 0) {
      const first = this.chunks[0];
      if (first.length <= frames) {
        this.chunks.shift();
        frames -= first.length;
      } else {
        this.chunks[0] = first.subarray(frames);
        frames = 0;
      }
    }
  }
}
