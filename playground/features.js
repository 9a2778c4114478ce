// What this server offers, so the page keeps no copy of it: GET /engines (each engine's parameter schema with its
// ranges and defaults, its sample rate, whether it clones from a clip or speaks live, and the languages a request
// may name), and the encoded download formats of POST /tts, read from the OpenAPI document.

import { getJson } from "./api.js";

export async function detectFeatures() {
  const [described, openapi] = await Promise.all([
    getJson("engines"),
    getJson("openapi.json").catch(() => null), // no schema published: WAV downloads only
  ]);
  return {
    engines: Object.fromEntries(described.engines.map((engine) => [engine.name, engine])),
    languages: described.languages,
    formats: openapi ? downloadFormats(openapi) : [],
  };
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
