// Offline checks of containers/k8s/: every object against the Kubernetes API's JSON schema
// (the npm package kubernetes-models, generated from the API's OpenAPI document), then the
// deployment's own rules: Guaranteed QoS with whole CPUs, probes through roce-ctl, Prometheus
// scrape annotations, hugepages in the hugepages variant only, no privileges.
//   NODE_PATH=DIR/node_modules node k8s_validate.mjs FILE...
// Exits 0 when every object passes; prints one line per object and one per problem.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { basename } from "node:path";

const modules = process.env.NODE_PATH.split(":")[0];
const require = createRequire(modules + "/");
const yaml = require("js-yaml");
const problems = [];
const fail = (where, msg) => problems.push(`${where}: ${msg}`);

async function model(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const path = group ? `${group}/${version}/${kind}` : `${version}/${kind}`;
  const mod = require(`${modules}/kubernetes-models/${path}.js`);  // CommonJS (4.x, node >= 14)
  return mod[kind];
}

const cpuWhole = (v) => /^[1-9][0-9]*$/.test(String(v));
function checkPod(where, spec, huge) {
  const all = [...(spec.initContainers ?? []), ...spec.containers];
  for (const c of all) {
    const r = c.resources ?? {}, req = r.requests ?? {}, lim = r.limits ?? {};
    for (const k of ["cpu", "memory"]) {
      if (req[k] === undefined || String(req[k]) !== String(lim[k]))
        fail(where, `${c.name}: ${k} request must equal its limit (Guaranteed QoS)`);
    }
    if (!cpuWhole(lim.cpu)) fail(where, `${c.name}: cpu ${lim.cpu} is not a whole number of cores`);
    const hp = lim["hugepages-2Mi"];
    if (c.name === "roced" && huge && !hp) fail(where, "roced: no hugepages-2Mi in the hugepages variant");
    if (hp && !huge) fail(where, `${c.name}: hugepages in the --no-huge variant`);
    const sc = c.securityContext ?? {};
    if (sc.privileged) fail(where, `${c.name}: privileged`);
    if (sc.allowPrivilegeEscalation !== false) fail(where, `${c.name}: allowPrivilegeEscalation is not false`);
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) fail(where, `${c.name}: capabilities not dropped`);
  }
  for (const c of spec.containers.filter((c) => c.name === "roced")) {
    for (const p of ["readinessProbe", "livenessProbe"]) {
      const cmd = c[p]?.exec?.command ?? [];
      if (cmd[0] !== "roce-ctl") fail(where, `roced: ${p} is not roce-ctl`);
    }
    const args = c.args.join(" ");
    if (huge === args.includes("nohuge")) fail(where, `roced: ${args} is the wrong configuration`);
  }
}

let objects = 0;
for (const file of process.argv.slice(2)) {
  const huge = !basename(file).includes("nohuge");
  for (const doc of yaml.loadAll(readFileSync(file, "utf8"))) {
    if (!doc) continue;
    const where = `${basename(file)}: ${doc.kind}/${doc.metadata?.name}`;
    objects++;
    let M;
    try {
      M = await model(doc.apiVersion, doc.kind);
    } catch (e) {
      fail(where, `unknown apiVersion/kind ${doc.apiVersion} ${doc.kind}`);
      continue;
    }
    try {
      new M(doc).validate();
    } catch (e) {
      fail(where, `schema: ${e.message}`);
      continue;
    }
    if (doc.kind === "Deployment" || doc.kind === "DaemonSet") {
      const t = doc.spec.template;
      const a = t.metadata?.annotations ?? {};
      if (a["prometheus.io/scrape"] !== "true" || a["prometheus.io/port"] !== "9464")
        fail(where, "no Prometheus scrape annotations for port 9464");
      checkPod(where, t.spec, huge);
    }
    if (doc.kind === "Job") checkPod(where, doc.spec.template.spec, false);
    if (!problems.some((p) => p.startsWith(where + ":"))) console.log(`ok ${where}`);
  }
}
for (const p of problems) console.log(`FAIL ${p}`);
console.log(`${objects} objects, ${problems.length} problems`);
process.exit(problems.length || objects === 0 ? 1 : 0);
