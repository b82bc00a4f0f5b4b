// The microphone's AudioWorklet: resamples from the context's rate (44.1 or 48 kHz, whatever
// the file or device gives) to 16 kHz and posts 20 ms frames of PCM16 little-endian.
//
// Resampling is a windowed-sinc low-pass evaluated at each output position (a Hann window
// over +-8 output periods, cutoff 0.45 x the output rate = 7.2 kHz): plain linear
// interpolation would fold 8-22 kHz of the input down into the band the recognizer hears.
// Kernels are tabulated for 256 sub-sample phases (timing error <= 1/512 input sample).
"use strict";

const PHASES = 256;

class ParleyCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.outRate = o.outRate || 16000;
    this.frameSamples = o.frameSamples || 320;
    this.ratio = sampleRate / this.outRate; // input samples per output sample
    const fc = 0.45 * Math.min(1, 1 / this.ratio); // cutoff, cycles per input sample
    this.half = Math.ceil(8 * Math.max(1, this.ratio));
    this.taps = 2 * this.half;
    this.table = new Float32Array((PHASES + 1) * this.taps);
    for (let p = 0; p <= PHASES; p++) {
      let sum = 0;
      for (let k = 0; k < this.taps; k++) {
        const d = k - this.half + 1 - p / PHASES; // input index minus output position
        const x = 2 * fc * d;
        const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
        const v = sinc * (0.5 + 0.5 * Math.cos((Math.PI * d) / this.half));
        this.table[p * this.taps + k] = v;
        sum += v;
      }
      for (let k = 0; k < this.taps; k++) this.table[p * this.taps + k] /= sum; // unity gain at DC
    }
    this.buf = new Float32Array(16384);
    this.len = 0;
    this.pos = this.half - 1; // next output position, in input samples from buf[0]
    this.out = new Float32Array(this.frameSamples);
    this.outLen = 0;
  }

  append(channels) {
    const n = channels[0].length;
    if (this.len + n > this.buf.length) {
      const bigger = new Float32Array(2 * (this.len + n));
      bigger.set(this.buf.subarray(0, this.len));
      this.buf = bigger;
    }
    const dst = this.buf.subarray(this.len, this.len + n);
    if (channels.length === 1) {
      dst.set(channels[0]);
    } else {
      for (let i = 0; i < n; i++) {
        let s = 0;
        for (const ch of channels) s += ch[i];
        dst[i] = s / channels.length;
      }
    }
    this.len += n;
  }

  flush() {
    const n = this.frameSamples;
    const pcm = new ArrayBuffer(2 * n);
    const view = new DataView(pcm);
    let energy = 0;
    for (let i = 0; i < n; i++) {
      const v = Math.max(-1, Math.min(1, this.out[i]));
      energy += v * v;
      view.setInt16(2 * i, Math.round(v * 32767), true);
    }
    this.outLen = 0;
    this.port.postMessage({ pcm, rms: Math.sqrt(energy / n) }, [pcm]);
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true; // not connected yet: stay alive
    this.append(channels);
    for (;;) {
      const i0 = Math.floor(this.pos);
      if (i0 + this.half >= this.len) break;
      const off = Math.round((this.pos - i0) * PHASES) * this.taps;
      const start = i0 - this.half + 1;
      let acc = 0;
      for (let k = 0; k < this.taps; k++) acc += this.buf[start + k] * this.table[off + k];
      this.out[this.outLen++] = acc;
      this.pos += this.ratio;
      if (this.outLen === this.frameSamples) this.flush();
    }
    const drop = Math.floor(this.pos) - this.half + 1; // inputs no later output needs
    if (drop > 0) {
      this.buf.copyWithin(0, drop, this.len);
      this.len -= drop;
      this.pos -= drop;
    }
    return true;
  }
}

registerProcessor("parley-capture", ParleyCapture);
