// AudioWorklet processor: the microphone at the AudioContext's rate -> 16 kHz mono Int16 PCM.
//
// Runs on the audio rendering thread. Each input sample block (128 frames) is mixed to mono
// and appended to a small history; every output sample is a band-limited (windowed-sinc,
// cutoff 7.6 kHz) interpolation of the input at its fractional position, so 44.1 and 48 kHz
// both come down to 16 kHz without aliasing. Every 100 ms of output is posted to the page as
// {pcm: ArrayBuffer (pcm_s16le), level: RMS in [0, 1]}, the buffer transferred, not copied.

const TARGET_RATE = 16000;
const CUTOFF_HZ = 7600;
const HALF_TAPS = 16; // kernel half-width in input samples

class PcmDownsampler extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.frameSamples = Math.round((TARGET_RATE * (opts.frameMs || 100)) / 1000);
    this.step = sampleRate / TARGET_RATE; // input samples per output sample
    this.fc = Math.min((2 * CUTOFF_HZ) / sampleRate, 1); // cutoff as a fraction of the input Nyquist
    this.passthrough = sampleRate === TARGET_RATE;
    this.buf = new Float32Array(8192); // input history; buf[0] is input sample number bufStart
    this.bufStart = 0;
    this.bufLen = 0;
    this.pos = 0; // input position (fractional sample number) of the next output sample
    this.frame = new Int16Array(this.frameSamples);
    this.frameLen = 0;
    this.energy = 0;
  }

  append(samples) {
    const keepFrom = Math.max(Math.floor(this.pos) - HALF_TAPS, this.bufStart);
    if (this.bufLen + samples.length > this.buf.length) {
      // drop what no output sample needs any more (bounded: the history never grows)
      const drop = keepFrom - this.bufStart;
      this.buf.copyWithin(0, drop, this.bufLen);
      this.bufStart += drop;
      this.bufLen -= drop;
    }
    this.buf.set(samples, this.bufLen);
    this.bufLen += samples.length;
  }

  sample(n) {
    const i = n - this.bufStart;
    return i >= 0 && i < this.bufLen ? this.buf[i] : 0;
  }

  interpolate(t) {
    const center = Math.floor(t);
    let sum = 0;
    for (let k = center - HALF_TAPS + 1; k <= center + HALF_TAPS; k++) {
      const d = t - k;
      const x = Math.PI * this.fc * d;
      const sinc = x === 0 ? 1 : Math.sin(x) / x;
      const window = 0.5 * (1 + Math.cos((Math.PI * d) / HALF_TAPS));
      sum += this.sample(k) * this.fc * sinc * window;
    }
    return sum;
  }

  emit(value) {
    const v = Math.max(-1, Math.min(1, value));
    this.energy += v * v;
    this.frame[this.frameLen++] = Math.round(v < 0 ? v * 32768 : v * 32767);
    if (this.frameLen === this.frameSamples) {
      const level = Math.sqrt(this.energy / this.frameSamples);
      const pcm = this.frame.buffer;
      this.port.postMessage({ pcm, level }, [pcm]);
      this.frame = new Int16Array(this.frameSamples);
      this.frameLen = 0;
      this.energy = 0;
    }
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0 || input[0].length === 0) return true;
    let mono = input[0];
    if (input.length > 1) {
      mono = new Float32Array(input[0].length);
      for (const channel of input) for (let i = 0; i < mono.length; i++) mono[i] += channel[i] / input.length;
    }
    if (this.passthrough) {
      for (let i = 0; i < mono.length; i++) this.emit(mono[i]);
      return true;
    }
    this.append(mono);
    const end = this.bufStart + this.bufLen;
    while (this.pos + HALF_TAPS < end) {
      this.emit(this.interpolate(this.pos));
      this.pos += this.step;
    }
    return true;
  }
}

registerProcessor("pcm-downsampler", PcmDownsampler);
