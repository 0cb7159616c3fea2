#!/bin/bash
# The layout's rules (docs/architecture.md "What may include what"), checked on the sources:
#   scripts/check-layout.sh [SOURCE_DIR] [ATTACHED_BINARY...]
# Prints every broken rule with the file and line and exits 1 if any; each ATTACHED_BINARY (a
# program that links libroce only, e.g. roce-attach-example-c) must carry none of the engine's
# code. Run by CTest as `layout_rules`.
set -u
root=${1:-$(dirname "$0")/..}
shift || true
cd "$root" || exit 2
fail=0
broken() {
  echo "layout: $1"
  fail=1
}

# Sources of the project, tests and build trees aside unless a rule says otherwise.
sources() { git ls-files -- "$@" 2>/dev/null | grep -E '\.(c|cc|h|hpp)$'; }

# The quoted project includes of a file: "path/to/x.h" -> path/to/x.h, one per line with its
# line number (N:path).
includes() { grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$1" | sed -E 's/^([0-9]+):.*"([^"]+)".*/\1:\2/'; }

# 1. Public headers (include/roce/) include the standard library and each other only.
for f in $(sources include); do
  while IFS=: read -r n inc; do
    [ -n "$inc" ] && broken "$f:$n: a public header includes \"$inc\" (only <roce/...> and the standard library)"
  done < <(includes "$f")
done

# 2. Public headers are included as <roce/x.h>, never by a path into the tree.
while IFS= read -r hit; do
  broken "$hit: include the public API as <roce/...>"
done < <(git grep -nE '#[[:space:]]*include[[:space:]]+"(include/roce|client/include|client/lnet/include)/' -- '*.c' '*.cc' '*.h')

# 3. Layers include downwards only: dataplane < controlplane < client < runtime < verbs < apps.
layer_rule() {  # FOLDER: the folders it must not include
  local dir=$1
  shift
  for f in $(sources "$dir"); do
    while IFS=: read -r n inc; do
      for bad in "$@"; do
        case "$inc" in "$bad"/*) broken "$f:$n: $dir/ includes \"$inc\" ($bad/ stands above it)" ;; esac
      done
    done < <(includes "$f")
  done
}
layer_rule dataplane controlplane client runtime verbs apps fpga
layer_rule controlplane client runtime verbs apps
layer_rule client runtime verbs apps fpga
layer_rule verbs apps
layer_rule_runtime() {  # runtime/ may use apps/common/ (the capture writer), no application
  for f in $(sources runtime); do
    while IFS=: read -r n inc; do
      case "$inc" in
        apps/common/*) ;;
        apps/*) broken "$f:$n: runtime/ includes \"$inc\" (an application stands above it)" ;;
        verbs/*) broken "$f:$n: runtime/ includes \"$inc\" (verbs/ stands above it)" ;;
      esac
    done < <(includes "$f")
  done
}
layer_rule_runtime

# 4. No application includes another application's files (apps/common is shared), and no file
#    outside the benchmark includes apps/perf/ (its own tests aside).
for f in $(sources apps); do
  app=$(echo "$f" | cut -d/ -f2)
  while IFS=: read -r n inc; do
    case "$inc" in
      apps/common/* | apps/"$app"/*) ;;
      apps/*) broken "$f:$n: apps/$app includes another application's \"$inc\"" ;;
    esac
  done < <(includes "$f")
done
for f in $(sources controlplane dataplane client runtime verbs fpga include); do
  while IFS=: read -r n inc; do
    case "$inc" in apps/perf/*) broken "$f:$n: includes the benchmark's \"$inc\"" ;; esac
  done < <(includes "$f")
done

# 5. The rdma_cm active side's source port is chosen in one place (cm::ephemeral_port).
while IFS= read -r hit; do
  broken "$hit: an rdma_cm source port chosen by hand (use cm::ephemeral_port)"
done < <(git grep -nE '(32768|kFirstSrcPort)[[:space:]]*\+[[:space:]]*[a-z_0-9]+\(\)[[:space:]]*%' -- \
  '*.cc' '*.c' '*.h' ':!tests/' ':!controlplane/cm/mad.cc')

# 6. A program that links libroce alone carries no engine.
for bin in "$@"; do
  if nm -C "$bin" 2>/dev/null | grep -qE ' roce::engine::Engine::'; then
    broken "$bin links the engine (an attached program must need libroce only)"
  fi
done

[ $fail -eq 0 ] && echo "layout: every rule holds"
exit $fail
