// Streamed s16le PCM → an AudioWorklet, played as it arrives; one AudioContext at the stream's own sample rate
// (the browser resamples to the output device), reused while the rate stays the same. The worklet's reports tie
// the audio clock to a place in the utterance (`position()`), and an analyser measures what plays (`level()`).

import { int16ToFloat } from "./wav.js";

const WORKLET_URL = new URL("pcm-worklet.js", import.meta.url);

export class StreamPlayer {
  // onEvent receives the worklet's {type: "progress" | "drained", played, playing, time, underruns} reports.
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.context = null;
    this.node = null;
    this.analyser = null;
    this.ready = Promise.resolve();
    this.generation = 0; // bumped by clear(): a report of an earlier utterance still in flight is dropped
    this.clock = null; // the latest report of this utterance
    this.pushed = 0; // samples of this utterance handed to the worklet
  }

  get contextState() {
    return this.context ? this.context.state : "none";
  }

  // Make (or wake) the context for this rate. Called inside the user's click, where browsers allow audio to start;
  // the worklet module loads meanwhile.
  prime(sampleRate) {
    if (this.context && this.context.sampleRate === sampleRate) {
      this.context.resume().catch(() => {});
      return;
    }
    this.context?.close();
    const context = new AudioContext({ sampleRate, latencyHint: "interactive" });
    this.context = context;
    this.node = null;
    this.ready = context.audioWorklet.addModule(WORKLET_URL).then(() => {
      const node = new AudioWorkletNode(context, "pcm-player", { numberOfInputs: 0, outputChannelCount: [1] });
      node.port.onmessage = ({ data }) => this.onReport(data);
      const analyser = new AnalyserNode(context, { fftSize: 1024 });
      node.connect(analyser).connect(context.destination);
      this.node = node;
      this.analyser = analyser;
    });
    // Not awaited: a browser may hold the context suspended until a gesture, and the samples still queue.
    context.resume().catch(() => {});
  }

  onReport(report) {
    if (report.generation !== this.generation) return;
    this.clock = report;
    this.onEvent(report);
  }

  // Ready to play a new utterance at this rate (the stream's own, which may differ from the primed guess).
  async open(sampleRate) {
    this.prime(sampleRate);
    await this.ready;
    this.clear();
  }

  // Queue s16le samples; returns how many were handed to the worklet.
  push(samples) {
    const floats = int16ToFloat(samples);
    this.node.port.postMessage({ type: "push", samples: floats }, [floats.buffer]);
    this.pushed += samples.length;
    return samples.length;
  }

  end() {
    this.node?.port.postMessage({ type: "end" });
  }

  clear() {
    this.generation += 1;
    this.clock = null;
    this.pushed = 0;
    this.node?.port.postMessage({ type: "clear", generation: this.generation });
  }

  // Seconds into the utterance of what is heard now: the last report moved on by the audio clock while the worklet
  // plays (a suspended context's clock stands still), less the output's latency; never past what was handed over.
  position() {
    const clock = this.clock;
    if (!clock || !this.context) return 0;
    const heard = this.context.currentTime - (this.context.outputLatency || 0);
    const elapsed = clock.playing ? heard - clock.time : Math.min(0, heard - clock.time);
    const played = Math.min(Math.max(0, clock.played + elapsed * this.context.sampleRate), this.pushed);
    return played / this.context.sampleRate;
  }

  // The loudness of what plays now, 0 to 1: the RMS of the analyser's window on a 60 dB scale.
  level() {
    if (!this.analyser || this.context.state !== "running") return 0;
    const window = new Float32Array(this.analyser.fftSize);
    this.analyser.getFloatTimeDomainData(window);
    const rms = Math.sqrt(window.reduce((sum, s) => sum + s * s, 0) / window.length);
    return rms > 0 ? Math.max(0, 1 + Math.log10(rms) / 3) : 0;
  }
}

// Reassembles s16le samples from network chunks, which may split a sample between two chunks.
export class PcmAssembler {
  constructor() {
    this.carry = null;
  }

  // The whole samples in `bytes` (plus a byte held over from the previous chunk), as an Int16Array.
  push(bytes) {
    let data = bytes;
    if (this.carry) {
      data = new Uint8Array(this.carry.length + bytes.length);
      data.set(this.carry);
      data.set(bytes, this.carry.length);
      this.carry = null;
    }
    const usable = data.length - (data.length % 2);
    if (usable < data.length) this.carry = data.slice(usable);
    // slice() copies into a fresh, aligned buffer; s16le matches the byte order of every platform browsers run on.
    return new Int16Array(data.slice(0, usable).buffer);
  }
}
