#!/usr/bin/env bash
# Offline checks of the deployment recipes (containers/): yamllint on every YAML file; the
# compose files merged and every reference resolved (compose_check.py); each appliance
# configuration they mount accepted by roced --check (the compose ones and each Kubernetes
# overlay's ConfigMap); each overlay rendered (kustomize_lite.mjs; the same objects as kubectl
# kustomize renders, where kubectl is installed) and every object validated against the API's
# schema and the deployment's rules (k8s_validate.mjs, npm's kubernetes-models installed by
# scripts/install-deps.sh).
# No network, no root. Exits 77 (skipped) when yamllint or the schema validator is missing.
#   manifests_check.sh ROCED
set -euo pipefail
roced=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/deploy/cache_dir.sh
source "$here/cache_dir.sh"
repo=$(cd "$here/../.." && pwd)
c=$repo/containers
node_modules=${ROCE_NPM_DIR:-/var/tmp/roce-deploy/npm}/node_modules
if ! command -v yamllint >/dev/null || ! command -v node >/dev/null || [[ ! -d $node_modules/kubernetes-models ]]; then
  echo "skipped: yamllint, node or kubernetes-models missing (scripts/install-deps.sh)"; exit 77
fi
# node loads js-yaml and kubernetes-models from there: not from a directory another user can change
safe_dir "$node_modules" --existing || { echo "FAIL: $node_modules is not safe to load modules from"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== hostile inputs (the cache guard, kustomize_lite.mjs)"
"$here/hostile_inputs.sh" "$node_modules"

echo "== yamllint"
yamllint -s -c "$c/yamllint.yaml" "$c"

echo "== compose files"
/usr/bin/python3 "$here/compose_check.py" "$c/compose.yaml"
/usr/bin/python3 "$here/compose_check.py" "$c/compose.yaml" "$c/compose.bridge.yaml"

echo "== appliance configurations"
for f in "$c"/config/*.yaml; do "$roced" --check --config "$f"; done
# every overlay's ConfigMap (rendered as kubectl apply -k renders it)
for o in "$c"/k8s/overlays/*/; do
  o=$(basename "$o")
  mkdir -p "$work/$o"
  NODE_PATH=$node_modules node "$here/kustomize_lite.mjs" "$c/k8s/overlays/$o" > "$work/$o.yaml"
  /usr/bin/python3 - "$work/$o.yaml" "$work/$o" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "roce-appliance":
        for key, text in doc["data"].items():
            open(f"{sys.argv[2]}/{key}", "w").write(text)
PY
  for f in "$work/$o"/*.yaml; do echo -n "$o: "; "$roced" --check --config "$f"; done
done

# the same objects as real kustomize renders, where kubectl is installed (not in Debian 12's archive)
if command -v kubectl >/dev/null; then
  for o in "$c"/k8s/overlays/*/; do
    o=$(basename "$o")
    kubectl kustomize "$c/k8s/overlays/$o" > "$work/$o.kustomize.yaml"
    /usr/bin/python3 - "$work/$o.yaml" "$work/$o.kustomize.yaml" "$o" <<'PY'
import sys, yaml
def objects(f):
    return sorted(yaml.safe_load_all(open(f)), key=lambda d: (d["kind"], d["metadata"]["name"]))
lite, real = objects(sys.argv[1]), objects(sys.argv[2])
if lite != real:
    sys.exit(f"FAIL {sys.argv[3]}: kustomize_lite.mjs and kubectl kustomize render different objects")
print(f"{sys.argv[3]}: {len(real)} objects, the same as kubectl kustomize renders")
PY
  done
else
  echo "kubectl not installed: kustomize_lite.mjs not compared with kustomize"
fi

echo "== Kubernetes objects (each overlay)"
NODE_PATH=$node_modules node "$here/k8s_validate.mjs" "$c"/k8s/overlays/*/
echo "PASS manifests"
