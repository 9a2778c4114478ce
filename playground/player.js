// Streamed s16le PCM → an AudioWorklet, played as it arrives; one AudioContext at the stream's own sample rate
// (the browser resamples to the output device), reused while the rate stays the same.

import { int16ToFloat } from "./wav.js";

const WORKLET_URL = new URL("pcm-worklet.js", import.meta.url);

export class StreamPlayer {
  // onEvent receives the worklet's {type: "progress" | "drained", played, underruns} messages.
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.context = null;
    this.node = null;
    this.ready = Promise.resolve();
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
      node.port.onmessage = ({ data }) => this.onEvent(data);
      node.connect(context.destination);
      this.node = node;
    });
    // Not awaited: a browser may hold the context suspended until a gesture, and the samples still queue.
    context.resume().catch(() => {});
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
    return samples.length;
  }

  end() {
    this.node?.port.postMessage({ type: "end" });
  }

  clear() {
    this.node?.port.postMessage({ type: "clear" });
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
