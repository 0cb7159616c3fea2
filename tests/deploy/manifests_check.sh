#!/usr/bin/env bash
# Offline checks of the deployment recipes (containers/): yamllint on every YAML file; the
# compose files merged and every reference resolved (compose_check.py); each appliance
# configuration they mount accepted by roced --check (the compose ones and the ConfigMap's);
# each Kubernetes object validated against the API's schema and the deployment's rules
# (k8s_validate.mjs, npm's kubernetes-models installed by scripts/install-deps.sh).
# No network, no root. Exits 77 (skipped) when yamllint or the schema validator is missing.
#   manifests_check.sh ROCED
set -euo pipefail
roced=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
c=$repo/containers
node_modules=${ROCE_NPM_DIR:-/var/tmp/roce-deploy/npm}/node_modules
if ! command -v yamllint >/dev/null || ! command -v node >/dev/null || [[ ! -d $node_modules/kubernetes-models ]]; then
  echo "skipped: yamllint, node or kubernetes-models missing (scripts/install-deps.sh)"; exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== yamllint"
yamllint -s -c "$c/yamllint.yaml" "$c"

echo "== compose files"
/usr/bin/python3 "$here/compose_check.py" "$c/compose.yaml"
/usr/bin/python3 "$here/compose_check.py" "$c/compose.yaml" "$c/compose.bridge.yaml"

echo "== appliance configurations"
for f in "$c"/config/*.yaml; do "$roced" --check --config "$f"; done
/usr/bin/python3 - "$c/k8s/configmap.yaml" "$work" <<'PY'
import sys, yaml
cm = yaml.safe_load(open(sys.argv[1]))
for key, text in cm["data"].items():
    open(f"{sys.argv[2]}/{key}", "w").write(text)
PY
for f in "$work"/*.yaml; do "$roced" --check --config "$f"; done
# the Deployments name ConfigMap keys that exist
for k in $(grep -ho 'etc/roce/[a-z-]*\.yaml' "$c"/k8s/appliance*.yaml | sort -u); do
  [[ -f $work/${k#etc/roce/} ]] || { echo "FAIL: $k is not a key of the ConfigMap"; exit 1; }
done

echo "== Kubernetes objects"
NODE_PATH=$node_modules node "$here/k8s_validate.mjs" "$c"/k8s/*.yaml
echo "PASS manifests"
