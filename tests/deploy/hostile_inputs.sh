#!/usr/bin/env bash
# The deployment scripts against hostile input (manifests_check.sh runs it; docs/security.md,
# "Deployments"):
#   1. safe_dir (cache_dir.sh) refuses a cache directory another user could change: one of
#      another owner (as root), one writable by others, one under a directory writable by others
#      without the sticky bit, a symbolic link; it accepts (and makes) one of ours under a
#      sticky directory;
#   2. kustomize_lite.mjs refuses what kustomize refuses or what would make the validator see
#      other objects than kubectl applies: a JSON pointer through __proto__ or constructor, a
#      resource or patch file outside the kustomization's directory, an absolute path.
# No network; node and js-yaml for part 2 (skipped without them).
#   hostile_inputs.sh NODE_MODULES_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/deploy/cache_dir.sh
source "$here/cache_dir.sh"
node_modules=${1:-}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
chmod 0755 "$t"
bad=0
refused() {  # refused WHAT DIR [--existing]
  if safe_dir "${@:2}" 2>"$t/err"; then echo "FAIL safe_dir accepted $1"; bad=1
  else echo "ok safe_dir refuses $1: $(cat "$t/err")"; fi
}

echo "== 1. cache directories"
mkdir -m 1777 "$t/sticky"
mkdir -m 0777 "$t/sticky/open"
refused "a directory writable by others" "$t/sticky/open"
mkdir -m 0777 "$t/opendir"
refused "a directory under one writable by others without the sticky bit" "$t/opendir/cache"
mkdir -m 0755 "$t/real"
ln -s "$t/real" "$t/sticky/link"
refused "a symbolic link" "$t/sticky/link"
refused "a directory under a symbolic link" "$t/sticky/link/npm"
if [[ $(id -u) == 0 ]]; then
  mkdir -m 0755 "$t/sticky/theirs"
  chown 65534 "$t/sticky/theirs"
  refused "a directory of another user" "$t/sticky/theirs"
  refused "a directory of another user (--existing)" "$t/sticky/theirs" --existing
  refused "a directory under another user's" "$t/sticky/theirs/npm"
fi
refused "a missing directory (--existing)" "$t/sticky/none" --existing
if safe_dir "$t/sticky/ours/npm" 2>"$t/err" && [[ -d $t/sticky/ours/npm ]]; then
  echo "ok safe_dir makes and accepts a directory of ours under a sticky one"
else
  echo "FAIL safe_dir refused a directory of ours: $(cat "$t/err")"; bad=1
fi

echo "== 2. kustomize_lite.mjs"
if ! command -v node >/dev/null || [[ ! -d $node_modules/js-yaml ]]; then
  echo "skipped: node or js-yaml missing"
else
  # a base with one object, and one overlay per hostile kustomization
  mkdir -p "$t/k/base"
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: b\n' > "$t/k/base/cm.yaml"
  printf 'resources: [cm.yaml]\n' > "$t/k/base/kustomization.yaml"
  echo "secret: outside" > "$t/outside.yaml"
  overlay() {  # overlay NAME KUSTOMIZATION [PATCH]
    mkdir -p "$t/k/$1"
    printf '%s\n' "$2" > "$t/k/$1/kustomization.yaml"
    [[ -z ${3:-} ]] || printf '%s\n' "$3" > "$t/k/$1/patch.yaml"
  }
  patch_of() { printf 'resources: [../base]\npatches:\n  - path: patch.yaml\n    target: {kind: ConfigMap}'; }
  overlay proto "$(patch_of)" '[{op: add, path: /__proto__/polluted, value: yes}]'
  overlay proto2 "$(patch_of)" '[{op: add, path: /metadata/__proto__, value: {polluted: yes}}]'
  overlay ctor "$(patch_of)" '[{op: add, path: /data/constructor/prototype/polluted, value: yes}]'
  overlay file-outside 'resources: [../../outside.yaml]'
  overlay absolute "resources: [$t/outside.yaml]"
  overlay patch-outside "$(printf 'resources: [../base]\npatches:\n  - path: ../../outside.yaml\n    target: {kind: ConfigMap}')"
  overlay fine "$(patch_of)" '[{op: add, path: /data/c, value: d}]'
  for o in proto proto2 ctor file-outside absolute patch-outside; do
    if out=$(KL=$here/kustomize_lite.mjs DIR=$t/k/$o NODE_PATH=$node_modules node --input-type=module -e '
      const { render } = await import(process.env.KL);
      try { render(process.env.DIR); } catch (e) { console.log(e.message); process.exit(3); }
      if ({}.polluted !== undefined) { console.log("Object.prototype polluted"); process.exit(1); }
      process.exit(0);' - 2>&1); then
      echo "FAIL kustomize_lite accepted $o"; bad=1
    elif [[ $? == 3 ]]; then echo "ok kustomize_lite refuses $o: ${out#"$t"/}"
    else echo "FAIL kustomize_lite $o: $out"; bad=1; fi
  done
  if NODE_PATH=$node_modules node "$here/kustomize_lite.mjs" "$t/k/fine" | grep -q '^  c: d$'; then
    echo "ok kustomize_lite renders a patch within its directory"
  else echo "FAIL kustomize_lite did not render the good overlay"; bad=1; fi
fi
[[ $bad == 0 ]] && echo "PASS hostile inputs"
exit $bad
