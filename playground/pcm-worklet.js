// AudioWorklet processor: plays mono float chunks posted from the page, in order, as they arrive.
//
// Messages in: {type: "push", samples: Float32Array}, {type: "end"} (no more samples for this utterance),
// {type: "clear"} (stop now). Messages out: {type: "progress", played, underruns} about ten times a second and
// {type: "drained", played, underruns} once an ended utterance has been played out.

const PREBUFFER_SECONDS = 0.1; // start (and restart after running dry) with this much queued, to avoid crackle

class PcmPlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.reset();
    this.port.onmessage = ({ data }) => {
      if (data.type === "push") {
        this.queue.push(data.samples);
        this.queued += data.samples.length;
      } else if (data.type === "end") {
        this.ended = true;
      } else if (data.type === "clear") {
        this.reset();
      }
    };
  }

  reset() {
    this.queue = [];
    this.offset = 0; // read position in queue[0]
    this.queued = 0; // samples waiting
    this.playing = false;
    this.ended = false;
    this.played = 0;
    this.underruns = 0;
    this.sinceReport = 0;
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    let written = 0;
    if (!this.playing && this.queued > 0 && (this.queued >= PREBUFFER_SECONDS * sampleRate || this.ended)) {
      this.playing = true;
    }
    while (this.playing && written < out.length && this.queue.length > 0) {
      const head = this.queue[0];
      const n = Math.min(out.length - written, head.length - this.offset);
      out.set(head.subarray(this.offset, this.offset + n), written);
      written += n;
      this.offset += n;
      this.queued -= n;
      if (this.offset === head.length) {
        this.queue.shift();
        this.offset = 0;
      }
    }
    out.fill(0, written);
    this.played += written;
    this.sinceReport += out.length;
    if (this.ended && this.queued === 0) {
      this.port.postMessage({ type: "drained", played: this.played, underruns: this.underruns });
      this.reset();
      return true;
    }
    if (this.playing && this.queued === 0) {
      this.playing = false; // ran dry mid-utterance: wait for the prebuffer again
      this.underruns += 1;
    }
    if (this.played > 0 && this.sinceReport >= sampleRate / 10) {
      this.sinceReport = 0;
      this.port.postMessage({ type: "progress", played: this.played, underruns: this.underruns });
    }
    return true;
  }
}

registerProcessor("pcm-player", PcmPlayer);
