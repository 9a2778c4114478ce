// What this server offers beyond the base API, read from its OpenAPI document, so the page never requests a route
// that is absent (a 404 is a wasted round trip and a console error): GET /engines (each engine's parameter
// schema), encoded download formats on POST /tts, and the live WebSocket (an engine whose /engines entry says
// `live: true`).

import { getJson } from "./api.js";

// Engines as the page knows them when the server has no GET /engines: protocol.py's TTSRequest parameters.
export const DEFAULT_ENGINES = {
  kokoro: {
    name: "kokoro",
    sample_rate: 24000,
    clone: false,
    packs: true,
    live: false,
    parameters: {
      type: "object",
      properties: {
        speed: { type: "number", title: "Speed", minimum: 0.5, maximum: 2, default: 1, description: "Speaking rate." },
      },
    },
  },
  voxcpm: {
    name: "voxcpm",
    sample_rate: 48000,
    clone: true,
    packs: false,
    live: false,
    parameters: {
      type: "object",
      properties: {
        cfg_value: { type: "number", title: "Guidance", minimum: 0.5, maximum: 10, default: 2, description: "Guidance scale." },
        inference_timesteps: {
          type: "integer", title: "Diffusion steps", minimum: 1, maximum: 100, default: 10,
          description: "More is slower and finer.",
        },
        normalize: { type: "boolean", title: "Normalise numbers and symbols", default: false },
        denoise: { type: "boolean", title: "Denoise the prompt audio", default: false },
      },
    },
  },
  qwen: { name: "qwen", sample_rate: 24000, clone: true, packs: false, live: false, parameters: { type: "object", properties: {} } },
};

export async function detectFeatures() {
  const features = { engines: { ...DEFAULT_ENGINES }, enginesRoute: false, formats: [] };
  let openapi;
  try {
    openapi = await getJson("openapi.json");
  } catch {
    return features; // no schema published: the base API only
  }
  const paths = openapi.paths || {};
  features.formats = downloadFormats(openapi);
  if ("/engines" in paths) {
    const listed = await getJson("engines");
    const entries = Array.isArray(listed) ? listed : Array.isArray(listed.engines) ? listed.engines : Object.values(listed.engines || {});
    features.engines = Object.fromEntries(entries.map((engine) => [engine.name, engine]));
    features.enginesRoute = true;
  }
  return features;
}

// The encoded formats POST /tts can return (its `format` field's enum), less the two the page has already:
// WAV is built from the streamed samples, raw PCM is no file to download.
function downloadFormats(openapi) {
  const body = openapi.paths?.["/tts"]?.post?.requestBody?.content?.["application/json"]?.schema;
  const format = resolve(openapi, body)?.properties?.format;
  return enumValues(openapi, format).filter((f) => f !== "wav" && f !== "pcm");
}

function resolve(openapi, schema) {
  if (!schema?.$ref) return schema;
  const path = schema.$ref.replace(/^#\//, "").split("/");
  return resolve(openapi, path.reduce((node, key) => node?.[key], openapi));
}

function enumValues(openapi, schema) {
  const node = resolve(openapi, schema);
  if (!node) return [];
  if (Array.isArray(node.enum)) return node.enum.filter((v) => typeof v === "string");
  return [...(node.anyOf || []), ...(node.oneOf || []), ...(node.allOf || [])].flatMap((s) => enumValues(openapi, s));
}
