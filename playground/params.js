// The engine's parameters as a form, built from the JSON schema the server publishes for it in GET /engines:
// a bounded number is a slider over the server's own range, an enum a select, a boolean a checkbox, text a line.

import { $, say, state } from "./page.js";

// Shows `engine`'s parameters, keeping what the user set while the engine stays the same; an engine whose schema
// has not arrived yet shows none and is built again on the next call.
export function renderParams(engine) {
  const fields = $("params-fields");
  if (fields.dataset.engine === engine) return;
  const properties = state.features.engines[engine]?.parameters?.properties;
  fields.dataset.engine = properties ? engine : "";
  say($("params-legend"), `${engine} parameters`);
  fields.replaceChildren(...Object.entries(properties || {}).map(([name, schema]) => paramField(name, schema)));
  $("params").hidden = fields.childElementCount === 0;
}

function paramField(name, schema) {
  const wrap = document.createElement("div");
  wrap.className = "field param";
  const id = `param-${name}`;
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = schema.title || name;
  let input;
  const type = schema.type || (schema.anyOf || []).map((s) => s.type).find((t) => t && t !== "null");
  if (Array.isArray(schema.enum)) {
    input = document.createElement("select");
    input.append(...schema.enum.map((v) => new Option(String(v), String(v))));
    if (schema.default !== undefined) input.value = String(schema.default);
  } else if (type === "boolean") {
    wrap.classList.add("checkbox");
    input = document.createElement("input");
    input.type = "checkbox";
    input.checked = Boolean(schema.default);
  } else if (type === "string") {
    input = document.createElement("input");
    input.type = "text";
    if (schema.maxLength !== undefined) input.maxLength = schema.maxLength;
    input.value = schema.default ?? "";
  } else {
    input = document.createElement("input");
    const bounded = schema.minimum !== undefined && schema.maximum !== undefined;
    input.type = bounded ? "range" : "number";
    if (schema.minimum !== undefined) input.min = schema.minimum;
    if (schema.maximum !== undefined) input.max = schema.maximum;
    input.step = type === "integer" ? 1 : bounded ? (schema.maximum - schema.minimum) / 150 : "any";
    input.value = schema.default ?? schema.minimum ?? 0;
  }
  input.id = id;
  input.dataset.param = name;
  input.dataset.kind = Array.isArray(schema.enum) ? "enum" : type;
  if (schema.default !== undefined) input.dataset.default = String(schema.default);
  const described = [];
  if (schema.description) {
    const help = document.createElement("span");
    help.className = "hint";
    help.id = `${id}-help`;
    help.textContent = schema.description;
    described.push(help);
    input.setAttribute("aria-describedby", help.id);
  }
  if (input.type === "range") {
    const output = document.createElement("output");
    output.htmlFor = id;
    const show = () => (output.textContent = Number(input.value).toFixed(type === "integer" ? 0 : 2));
    input.addEventListener("input", show);
    show();
    wrap.append(label, input, output, ...described);
  } else if (input.type === "checkbox") {
    wrap.append(input, label, ...described);
  } else {
    wrap.append(label, input, ...described);
  }
  return wrap;
}

// The parameters that differ from the engine's defaults (the server fills in the rest).
export function paramValues() {
  const values = {};
  for (const input of $("params-fields").querySelectorAll("[data-param]")) {
    const kind = input.dataset.kind;
    const value =
      kind === "boolean" ? input.checked : kind === "enum" || kind === "string" ? input.value : Number(input.value);
    if (input.dataset.default === undefined || String(value) !== input.dataset.default) values[input.dataset.param] = value;
  }
  return values;
}
