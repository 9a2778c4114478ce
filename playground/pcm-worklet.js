// AudioWorklet processor: plays mono float chunks posted from the page, in order, as they arrive.
//
// Messages in: {type: "push", samples: Float32Array}, {type: "end"} (no more samples for this utterance),
// {type: "clear", generation} (stop now; later reports carry this generation). Messages out, each
// {type, generation, played, playing, time, underruns}: "progress" when playback starts or runs dry and about ten
// times a second between, "drained" once an ended utterance has been played out. `time` is the context time at
// which sample `played` is rendered, so the page maps the audio clock to a place in the utterance (read-along).

const PREBUFFER_SECONDS = 0.1; // start (and restart after running dry) with this much queued, to avoid crackle

class PcmPlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.generation = 0;
    this.reset();
    this.port.onmessage = ({ data }) => {
      if (data.type === "push") {
        this.queue.push(data.samples);
        this.queued += data.samples.length;
      } else if (data.type === "end") {
        this.ended = true;
      } else if (data.type === "clear") {
        this.generation = data.generation;
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

  report(type, blockLength) {
    this.sinceReport = 0;
    this.port.postMessage({
      type,
      generation: this.generation,
      played: this.played,
      playing: this.playing,
      time: currentTime + blockLength / sampleRate, // the end of this block: where sample `played` plays
      underruns: this.underruns,
    });
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    let written = 0;
    const wasPlaying = this.playing;
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
      this.playing = false;
      this.report("drained", written);
      this.reset();
      return true;
    }
    if (this.playing && this.queued === 0) {
      this.playing = false; // ran dry mid-utterance: wait for the prebuffer again
      this.underruns += 1;
    }
    if (this.playing !== wasPlaying || (this.played > 0 && this.sinceReport >= sampleRate / 10)) {
      this.report("progress", written);
    }
    return true;
  }
}

registerProcessor("pcm-player", PcmPlayer);
