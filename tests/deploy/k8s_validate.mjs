// Offline checks of containers/k8s/: each overlay rendered as `kubectl apply -k` would render it
// (kustomize_lite.mjs), every object against the Kubernetes API's JSON schema (the npm package
// kubernetes-models, generated from the API's OpenAPI document; Multus's
// NetworkAttachmentDefinition, a custom resource, against its own rules), then the deployment's
// rules: Guaranteed QoS with whole CPUs (the static CPU manager policy gives such containers
// cores of their own), hugepages resources matching the configuration's EAL arguments, probes
// through roce-ctl, Prometheus scrape annotations, no privileges beyond net_af_packet's two
// capabilities (no hostPath, host namespaces, root elsewhere, writable root filesystem; a
// seccomp profile; the memif link's socket out of the clients' reach; NetworkPolicies letting in
// the metrics port only and nothing out), every attachment and
// configuration key resolved, budgets selecting a Deployment.
//   NODE_PATH=DIR/node_modules node k8s_validate.mjs OVERLAY_DIR...
// Exits 0 when every object passes; prints one line per object and one per problem.
import { basename } from "node:path";
import { render, yaml } from "./kustomize_lite.mjs";
import { createRequire } from "node:module";

const modules = process.env.NODE_PATH.split(":")[0];
const require = createRequire(modules + "/");
const problems = [];
const fail = (where, msg) => problems.push(`${where}: ${msg}`);

function model(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const path = group ? `${group}/${version}/${kind}` : `${version}/${kind}`;
  const mod = require(`${modules}/kubernetes-models/${path}.js`);  // CommonJS (4.x, node >= 14)
  return mod[kind];
}

const dns1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
function checkNad(where, doc) {
  if (!dns1123.test(doc.metadata?.name ?? "")) return fail(where, "name is not a DNS-1123 label");
  let cni;
  try {
    cni = JSON.parse(doc.spec?.config ?? "");
  } catch (e) {
    return fail(where, `spec.config is not JSON: ${e.message}`);
  }
  if (!cni.cniVersion || !cni.type) fail(where, "spec.config needs cniVersion and type");
  const need = { macvlan: ["master"], ipvlan: ["master"], "host-device": [], sriov: [] }[cni.type];
  if (!need) return fail(where, `CNI type ${cni.type}: not one this deployment documents`);
  for (const k of need) if (!cni[k]) fail(where, `${cni.type} needs ${k}`);
  if (cni.type === "host-device" && !cni.device && !cni.pciBusID) fail(where, "host-device needs device or pciBusID");
  if (cni.type === "sriov" && !doc.metadata.annotations?.["k8s.v1.cni.cncf.io/resourceName"])
    fail(where, "sriov needs the annotation k8s.v1.cni.cncf.io/resourceName");
  return cni;
}

const cpuWhole = (v) => /^[1-9][0-9]*$/.test(String(v));
function checkPod(where, meta, spec, ctx) {
  // what another tenant of the node or a compromised container could use (docs/security.md,
  // "Deployments"): a node directory is shared by every pod of every namespace that names it;
  // the node's namespaces; no seccomp profile (the kubelet's default is Unconfined); root where
  // nothing needs it
  for (const v of spec.volumes ?? []) {
    if (v.hostPath) fail(where, `volume ${v.name}: hostPath ${v.hostPath.path} (shared with every pod of the node that names it)`);
  }
  for (const k of ["hostNetwork", "hostPID", "hostIPC"]) if (spec[k]) fail(where, `${k}`);
  const podSc = spec.securityContext ?? {};
  const seccomp = podSc.seccompProfile?.type;
  if (seccomp !== "RuntimeDefault" && seccomp !== "Localhost")
    fail(where, `seccompProfile ${seccomp ?? "unset (Unconfined)"}: RuntimeDefault or Localhost`);
  for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
    const r = c.resources ?? {}, req = r.requests ?? {}, lim = r.limits ?? {};
    for (const k of new Set(["cpu", "memory", ...Object.keys(req), ...Object.keys(lim)])) {
      if (req[k] === undefined || String(req[k]) !== String(lim[k]))
        fail(where, `${c.name}: ${k} request must equal its limit (Guaranteed QoS)`);
    }
    if (!cpuWhole(lim.cpu)) fail(where, `${c.name}: cpu ${lim.cpu} is not a whole number of cores`);
    const sc = c.securityContext ?? {};
    if (sc.privileged) fail(where, `${c.name}: privileged`);
    const ctype = sc.seccompProfile?.type;
    if (ctype && ctype !== "RuntimeDefault" && ctype !== "Localhost") fail(where, `${c.name}: seccompProfile ${ctype}`);
    const uid = sc.runAsUser ?? podSc.runAsUser;
    const root = uid === 0 || (uid === undefined && !(sc.runAsNonRoot ?? podSc.runAsNonRoot));
    // net_af_packet's roced is the one container that runs as root (its capabilities, below)
    if (root && !(c.name === "roced" && (sc.capabilities?.add ?? []).length > 0))
      fail(where, `${c.name}: runs as root without needing it`);
    if (sc.readOnlyRootFilesystem !== true) fail(where, `${c.name}: root filesystem not read-only`);
    if (sc.allowPrivilegeEscalation !== false) fail(where, `${c.name}: allowPrivilegeEscalation is not false`);
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) fail(where, `${c.name}: capabilities not dropped`);
  }
  const nets = (meta.annotations?.["k8s.v1.cni.cncf.io/networks"] ?? "").split(",").filter((n) => n);
  for (const n of nets) {
    const nad = ctx.nads.get(n.trim());
    if (!nad) { fail(where, `network ${n}: no NetworkAttachmentDefinition of that name`); continue; }
    const res = nad.doc.metadata.annotations?.["k8s.v1.cni.cncf.io/resourceName"];
    const roced = spec.containers.find((c) => c.name === "roced");
    if (res && roced?.resources?.limits?.[res] === undefined) fail(where, `network ${n} needs the resource ${res}`);
  }
  for (const c of spec.containers.filter((c) => c.name === "roced")) {
    for (const p of ["readinessProbe", "livenessProbe"]) {
      const cmd = c[p]?.exec?.command ?? [];
      if (cmd[0] !== "roce-ctl") fail(where, `roced: ${p} is not roce-ctl`);
    }
    const i = c.args.indexOf("--config");
    const key = c.args[i + 1]?.replace(/^\/etc\/roce\//, "");
    const text = ctx.config?.data?.[key];
    if (!text) { fail(where, `roced: --config ${c.args[i + 1]} is not a key of the ConfigMap roce-appliance`); continue; }
    const cfg = yaml.load(text);
    const huge = c.resources?.limits?.["hugepages-2Mi"] !== undefined;
    const noHuge = (cfg.eal?.args ?? []).includes("--no-huge");
    if (huge === noHuge) fail(where, `roced: hugepages-2Mi ${huge ? "requested" : "not requested"} but ${key} ${noHuge ? "has" : "lacks"} --no-huge`);
    if (huge) {
      const m = c.volumeMounts?.find((v) => v.mountPath === "/dev/hugepages");
      const v = spec.volumes?.find((v) => v.name === m?.name);
      if (!v?.emptyDir?.medium?.startsWith("HugePages")) fail(where, "roced: no HugePages emptyDir on /dev/hugepages");
    }
    const afPacket = (cfg.ports ?? []).some((p) => p.device.startsWith("net_af_packet"));
    const caps = [...(c.securityContext?.capabilities?.add ?? [])].sort().join(",");
    if (afPacket && caps !== "NET_ADMIN,NET_RAW") fail(where, `roced: net_af_packet needs NET_RAW and NET_ADMIN only, not [${caps}]`);
    if (!afPacket && caps) fail(where, `roced: capabilities [${caps}] that ${key} does not need`);
    for (const p of cfg.ports ?? []) {
      const iface = /iface=([^,]+)/.exec(p.devargs ?? "")?.[1];
      if (p.device.startsWith("net_af_packet") && iface === "net1" && nets.length === 0)
        fail(where, `roced: ${key} drives net1 but the pod has no network attachment`);
    }
  }
}

// The memif link is raw Ethernet between the appliances, outside everything roced checks for
// its attached clients: the claim holding its socket is mounted by appliances on that link only
// (docs/security.md, "Deployments").
function checkLinkClaims(overlay, docs, ctx) {
  const pods = docs.filter((d) => d.kind === "Deployment" || d.kind === "Job")
    .map((d) => ({ where: `${overlay}: ${d.kind}/${d.metadata?.name}`, spec: d.spec.template.spec }));
  const claimAt = (spec, c, dir) => {
    const m = (c.volumeMounts ?? []).find((v) => v.mountPath === dir);
    return spec.volumes?.find((v) => v.name === m?.name)?.persistentVolumeClaim?.claimName;
  };
  const links = new Map(), onLink = new Set();
  for (const p of pods) {
    for (const c of p.spec.containers.filter((c) => c.name === "roced")) {
      const key = c.args?.[c.args.indexOf("--config") + 1]?.replace(/^\/etc\/roce\//, "");
      const cfg = yaml.load(ctx.config?.data?.[key] ?? "") ?? {};
      for (const port of cfg.ports ?? []) {
        const sock = /(?:^|,)socket=([^,]+)/.exec(port.devargs ?? "")?.[1];
        if (!port.device?.startsWith("net_memif") || !sock) continue;
        const claim = claimAt(p.spec, c, sock.replace(/\/[^/]*$/, ""));
        if (claim) { links.set(claim, sock); onLink.add(p.where); }
      }
    }
  }
  for (const p of pods) {
    if (onLink.has(p.where)) continue;
    for (const v of p.spec.volumes ?? []) {
      const claim = v.persistentVolumeClaim?.claimName;
      if (links.has(claim)) fail(p.where, `mounts the claim ${claim}, the memif link's socket ${links.get(claim)}`);
    }
  }
}

// Every pod behind a NetworkPolicy of both directions: into an appliance only its Prometheus
// port (the attach and memif sockets are files, the dataplane of af-packet/hardware-nic a Multus
// interface that policies do not cover), nothing out of any pod (roced and the clients speak
// over sockets and the dataplane), so a hostile pod of the cluster reaches nothing else and a
// compromised roced reaches nothing (docs/security.md, "Deployments").
function selects(sel, labels) {
  const ok = Object.entries(sel?.matchLabels ?? {}).every(([k, v]) => labels?.[k] === v);
  return ok && (sel?.matchExpressions ?? []).every((e) =>
    e.operator === "In" ? e.values.includes(labels?.[e.key]) : e.operator === "Exists" ? labels?.[e.key] !== undefined : false);
}
function checkPolicies(overlay, docs) {
  const policies = docs.filter((d) => d.kind === "NetworkPolicy");
  for (const d of docs.filter((d) => d.kind === "Deployment" || d.kind === "Job")) {
    const where = `${overlay}: ${d.kind}/${d.metadata?.name}`;
    const labels = d.spec.template.metadata?.labels ?? {};
    const mine = policies.filter((p) => selects(p.spec?.podSelector, labels));
    const types = new Set(mine.flatMap((p) => p.spec.policyTypes ?? []));
    if (!types.has("Ingress") || !types.has("Egress")) { fail(where, "no NetworkPolicy for both Ingress and Egress selects its pods"); continue; }
    const roced = d.spec.template.spec.containers.some((c) => c.name === "roced");
    for (const p of mine) {
      if ((p.spec.egress ?? []).length) fail(where, `NetworkPolicy ${p.metadata.name} lets traffic out`);
      for (const r of p.spec.ingress ?? []) {
        const ports = r.ports ?? [];
        if (!roced || ports.length === 0 || ports.some((x) => String(x.port) !== "9464" || (x.protocol ?? "TCP") !== "TCP"))
          fail(where, `NetworkPolicy ${p.metadata.name} lets in more than TCP 9464 of an appliance`);
      }
    }
  }
}

let objects = 0;
for (const dir of process.argv.slice(2)) {
  const overlay = basename(dir);
  let docs;
  try {
    docs = render(dir);
  } catch (e) {
    fail(overlay, e.message);
    continue;
  }
  const ctx = { nads: new Map(), config: docs.find((d) => d.kind === "ConfigMap" && d.metadata.name === "roce-appliance") };
  for (const doc of docs.filter((d) => d.kind === "NetworkAttachmentDefinition"))
    ctx.nads.set(doc.metadata.name, { doc });
  checkLinkClaims(overlay, docs, ctx);
  checkPolicies(overlay, docs);
  for (const doc of docs) {
    const where = `${overlay}: ${doc.kind}/${doc.metadata?.name}`;
    objects++;
    if (doc.apiVersion === "k8s.cni.cncf.io/v1" && doc.kind === "NetworkAttachmentDefinition") {
      checkNad(where, doc);
    } else {
      let M;
      try {
        M = model(doc.apiVersion, doc.kind);
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
    }
    if (doc.kind === "Deployment") {
      const t = doc.spec.template;
      const a = t.metadata?.annotations ?? {};
      if (a["prometheus.io/scrape"] !== "true" || a["prometheus.io/port"] !== "9464")
        fail(where, "no Prometheus scrape annotations for port 9464");
      checkPod(where, t.metadata ?? {}, t.spec, ctx);
    }
    if (doc.kind === "Job") {
      const spec = doc.spec.template.spec;
      checkPod(where, doc.spec.template.metadata ?? {}, spec, ctx);
      // a client sharing roced's uid could unlink its attach socket and listen in its place
      for (const c of spec.containers) {
        const uid = c.securityContext?.runAsUser ?? spec.securityContext?.runAsUser;
        if (uid === undefined || uid === 0 || uid === 10001) fail(where, `${c.name}: a client running as uid ${uid ?? "of the image (10001)"}, the appliances'`);
      }
    }
    if (doc.kind === "PodDisruptionBudget") {
      const sel = doc.spec.selector?.matchLabels ?? {};
      const hit = docs.some((d) => d.kind === "Deployment" &&
        Object.entries(sel).every(([k, v]) => d.spec.template.metadata?.labels?.[k] === v));
      if (!hit) fail(where, "selects no Deployment's pods");
    }
    if (!problems.some((p) => p.startsWith(where + ":"))) console.log(`ok ${where}`);
  }
}
for (const p of problems) console.log(`FAIL ${p}`);
console.log(`${objects} objects, ${problems.length} problems`);
process.exit(problems.length || objects === 0 ? 1 : 0);
