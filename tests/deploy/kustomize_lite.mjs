// Renders a kustomization offline, for the deployment tests (no kubectl or kustomize on the
// development machines): the subset that containers/k8s/ uses, and an error on anything else,
// so that a kustomization using more cannot pass unchecked.
//   resources: files inside the kustomization's directory, or directories holding a
//              kustomization.yaml (rendered first, in order), as kustomize's default load
//              restrictor allows: a file outside (../x.yaml, /etc/x) is an error
//   patches:   JSON 6902 operations (add, remove, replace) from `path` (inside the directory)
//              or an inline `patch`, applied to every object matching `target` (kind, and name
//              when given); a pointer through __proto__, constructor or prototype is an error
//              (it would change JavaScript's objects, not the manifest: docs/security.md)
//   NODE_PATH=DIR/node_modules node kustomize_lite.mjs DIR     # the objects as a YAML stream
import { readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { join, relative, resolve, isAbsolute } from "node:path";
import { pathToFileURL } from "node:url";

const modules = (process.env.NODE_PATH ?? "").split(":")[0];
const require = createRequire(modules + "/");
export const yaml = require("js-yaml");

const known = new Set(["apiVersion", "kind", "resources", "patches"]);

function pointer(path) {
  if (!path.startsWith("/")) throw new Error(`JSON pointer ${path} does not start with /`);
  const keys = path.slice(1).split("/").map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"));
  for (const k of keys) {
    if (k === "__proto__" || k === "constructor" || k === "prototype")
      throw new Error(`JSON pointer ${path}: ${k} is not supported by kustomize_lite`);
  }
  return keys;
}

// a file named by a kustomization: inside its directory, as kustomize's load restrictor wants
function inside(dir, name, what) {
  const p = resolve(dir, String(name));
  const rel = relative(dir, p);
  if (rel === "" || rel.startsWith("..") || isAbsolute(rel))
    throw new Error(`${join(dir, "kustomization.yaml")}: ${what} ${name} is outside ${dir}`);
  return p;
}

function apply(doc, op, where) {
  const keys = pointer(op.path);
  const last = keys.pop();
  let parent = doc;
  for (const k of keys) {
    if (Array.isArray(parent)) parent = parent[Number(k)];
    else parent = parent !== null && typeof parent === "object" && Object.hasOwn(parent, k) ? parent[k] : undefined;
    if (parent === undefined) throw new Error(`${where}: ${op.op} ${op.path}: no such path`);
  }
  const isArr = Array.isArray(parent);
  const idx = last === "-" ? parent.length : Number(last);
  const has = isArr ? idx < parent.length : Object.hasOwn(parent, last);
  switch (op.op) {
    case "add":
      if (isArr) parent.splice(idx, 0, op.value);
      else parent[last] = op.value;
      break;
    case "replace":
      if (!has) throw new Error(`${where}: replace ${op.path}: no such path`);
      if (isArr) parent[idx] = op.value;
      else parent[last] = op.value;
      break;
    case "remove":
      if (!has) throw new Error(`${where}: remove ${op.path}: no such path`);
      if (isArr) parent.splice(idx, 1);
      else delete parent[last];
      break;
    default:
      throw new Error(`${where}: operation ${op.op} is not supported here`);
  }
}

export function render(dir) {
  const kfile = join(dir, "kustomization.yaml");
  const k = yaml.load(readFileSync(kfile, "utf8"));
  for (const key of Object.keys(k)) {
    if (!known.has(key)) throw new Error(`${kfile}: field ${key} is not supported by kustomize_lite`);
  }
  const objects = [];
  for (const r of k.resources ?? []) {
    const p = resolve(dir, String(r));
    if (statSync(p).isDirectory()) objects.push(...render(p));
    else objects.push(...yaml.loadAll(readFileSync(inside(dir, r, "resource"), "utf8")).filter((d) => d));
  }
  for (const [i, patch] of (k.patches ?? []).entries()) {
    const where = `${kfile}: patches[${i}]`;
    const ops = yaml.load(patch.path ? readFileSync(inside(dir, patch.path, "patch"), "utf8") : patch.patch);
    if (!Array.isArray(ops)) throw new Error(`${where}: only JSON 6902 patches (a list of operations)`);
    const t = patch.target ?? {};
    const hits = objects.filter((o) => o.kind === t.kind && (!t.name || o.metadata?.name === t.name));
    if (!t.kind || hits.length === 0) throw new Error(`${where}: target matches no object`);
    for (const o of hits) for (const op of ops) apply(o, op, `${where} ${o.kind}/${o.metadata.name}`);
  }
  const seen = new Set();
  for (const o of objects) {
    const id = `${o.kind}/${o.metadata?.name}`;
    if (seen.has(id)) throw new Error(`${kfile}: ${id} twice`);
    seen.add(id);
  }
  return objects;
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    process.stdout.write(render(resolve(process.argv[2])).map((o) => yaml.dump(o, { lineWidth: 110 })).join("---\n"));
  } catch (e) {
    console.error(`FAIL kustomize_lite: ${e.message}`);
    process.exit(1);
  }
}
