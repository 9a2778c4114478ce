// A microphone clip as a WAV file: MediaRecorder captures in the browser's own format (WebM/Opus in Chromium,
// which the server's libsndfile cannot read), Web Audio decodes it, and the page uploads 16-bit mono WAV.

import { floatToInt16, wavBlob } from "./wav.js";

export function canRecord() {
  return Boolean(window.isSecureContext && navigator.mediaDevices?.getUserMedia && window.MediaRecorder);
}

// Starts recording; resolves to {stop()} once the microphone is open. stop() resolves to a WAV Blob.
export async function startRecording() {
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  const recorder = new MediaRecorder(stream);
  const parts = [];
  recorder.ondataavailable = (event) => {
    if (event.data.size > 0) parts.push(event.data);
  };
  const stopped = new Promise((resolve, reject) => {
    recorder.onstop = resolve;
    recorder.onerror = (event) => reject(event.error);
  });
  recorder.start();
  return {
    async stop() {
      recorder.stop();
      try {
        await stopped;
      } finally {
        stream.getTracks().forEach((track) => track.stop());
      }
      return toWav(new Blob(parts, { type: recorder.mimeType }));
    },
  };
}

async function toWav(recording) {
  const context = new OfflineAudioContext(1, 1, 48000); // decodeAudioData resamples the clip to 48 kHz
  const audio = await context.decodeAudioData(await recording.arrayBuffer());
  const mono = new Float32Array(audio.length);
  for (let channel = 0; channel < audio.numberOfChannels; channel++) {
    const data = audio.getChannelData(channel);
    for (let i = 0; i < mono.length; i++) mono[i] += data[i] / audio.numberOfChannels;
  }
  return wavBlob([floatToInt16(mono)], audio.sampleRate);
}
