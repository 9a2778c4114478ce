// Jobs: this key's jobs (GET /jobs) with their progress, refreshed while one is queued or running, and a finished
// job's audio played from a blob (an <audio> element cannot send the API key itself).

import { errorFrom, request } from "./api.js";
import { $, recordError, say } from "./page.js";

const REFRESH_MS = 3000;
let timer = null;

function progress(job) {
  const made = `${job.chars_done}/${job.chars_total} characters, ${job.chapters_done}/${job.chapters_total} chapters`;
  const active = job.state === "queued" || job.state === "running";
  const eta = active && job.eta_s != null ? `, about ${Math.round(job.eta_s)} s left` : "";
  return `${job.state}: ${made}, ${job.audio_seconds.toFixed(1)} s of audio${eta}`;
}

async function play(job, audio) {
  const response = await request(`jobs/${job.job_id}/audio`);
  if (!response.ok) throw await errorFrom(response);
  audio.src = URL.createObjectURL(await response.blob());
  audio.hidden = false;
  await audio.play().catch(() => {}); // a refused autoplay leaves the controls to the user
}

function render(jobs) {
  say($("jobs-empty"), jobs.length ? "" : "No jobs for this key yet: POST /jobs makes one (see the API docs).");
  $("jobs-list").replaceChildren(
    ...jobs.map((job) => {
      const item = document.createElement("li");
      item.dataset.jobId = job.job_id;
      item.dataset.state = job.state;
      const text = document.createElement("span");
      text.className = "job-progress";
      text.textContent = progress(job);
      item.append(`${job.job_id.slice(0, 8)} (${job.format}) `, text);
      if (job.state === "done") {
        const button = document.createElement("button");
        button.type = "button";
        button.textContent = "Play";
        const audio = document.createElement("audio");
        audio.controls = true;
        audio.hidden = true;
        button.addEventListener("click", () => play(job, audio).catch((error) => recordError("jobs", error)));
        item.append(" ", button, audio);
      }
      return item;
    }),
  );
}

export async function loadJobs() {
  clearTimeout(timer);
  try {
    const response = await request("jobs?limit=20");
    if (!response.ok) throw await errorFrom(response);
    const { jobs } = await response.json();
    render(jobs);
    if (jobs.some((job) => job.state === "queued" || job.state === "running")) timer = setTimeout(loadJobs, REFRESH_MS);
  } catch (error) {
    recordError("jobs", error);
  }
}

export function initJobs() {
  $("jobs-refresh").addEventListener("click", loadJobs);
}
