#!/usr/bin/env bash
# rdma-core's own test suite (tests/ of an rdma-core checkout, v44 as Debian 12 ships) run by
# Debian's python3 with Debian's python3-pyverbs against the appliance's device, roce0 with GID
# index 0 (its RoCE v2 GID). The tests put both QPs on that one device and address the port's
# own GID: the engine's self-delivery carries them (dataplane/port/self_delivery.h).
#   MODE in-process: the suite's process drives its own port, net_af_packet on a veth pair in a
#     namespace of its own (LD_PRELOAD=libroce-verbs.so, ROCE_LINK).
#   MODE attached: the suite attaches to a roced on net_memif (lib_appliance.sh); each test's
#     two contexts are two clients of the same port.
# Fails when a test that EXPECTED lists (one id a line, "test_mod.Class.test") does not pass;
# prints the counts and every test's outcome (WORK/outcomes.txt).
#   run.sh MODE LIBROCE_VERBS RDMACM_DIR ROCED WORK EXPECTED [CHECKOUT]
# The checkout (holding tests/run_tests.py): $RDMA_CORE_TESTS_DIR, else CHECKOUT; exit 77 when
# there is none.
set -euo pipefail
mode=$1 lib=$(realpath "$2") rdmacm=$(realpath "$3") roced=$(realpath "$4") work=$5
expected=$(realpath "$6")
here=$(dirname "$(realpath "$0")")
src=${RDMA_CORE_TESTS_DIR:-${7:-}}
if [[ -z $src || ! -f $src/tests/run_tests.py ]]; then
  echo "skipped: no rdma-core checkout with tests/run_tests.py (RDMA_CORE_TESTS_DIR='$src')"
  exit 77
fi
src=$(realpath "$src")
py=/usr/bin/python3  # Debian's: python3-pyverbs is built for it
if ! "$py" -c 'import pyverbs.device' 2>/dev/null; then
  echo "skipped: $py cannot import pyverbs (Debian's python3-pyverbs)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
log=$work/suite.log
export LD_PRELOAD=$lib LD_LIBRARY_PATH=$rdmacm
suite=("$py" "$src/tests/run_tests.py" --dev roce0 --gid 0 -v)
pids=()
case $mode in
  in-process)
    if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then
      echo "skipped: needs root and iproute2 (a namespace with a veth pair)"; exit 77
    fi
    ns=roce-rcs-$$
    trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
    ip netns add "$ns"
    ip -n "$ns" link add rcs0 type veth peer name rcs1
    ip -n "$ns" link set lo up
    ip -n "$ns" link set rcs0 up
    ip -n "$ns" link set rcs1 up
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=0
    rc=0
    (cd "$src" && ip netns exec "$ns" env \
      ROCE_LINK="--pmd af_packet --iface rcs0 --ip 192.0.2.141 --mac 02:00:00:00:01:41" \
      timeout 900 "${suite[@]}") > "$log" 2>&1 || rc=$?
    ;;
  attached)
    tag=rcs$$
    # shellcheck source=tests/integration/lib_appliance.sh
    source "$here/../../integration/lib_appliance.sh"
    trap 'stop_all $?' EXIT
    appliance a server 02:00:5e:00:01:42 192.0.2.142 0
    rc=0
    (cd "$src" && ROCE_ATTACH=$work/a.sock timeout 900 "${suite[@]}") > "$log" 2>&1 || rc=$?
    kill -0 "$pid_a" 2>/dev/null || { tail -n 20 "$work/a.log"; echo "FAIL: roced died"; exit 1; }
    ;;
  *) echo "usage: run.sh in-process|attached ..."; exit 2 ;;
esac
tail -n 4 "$log"
echo "suite's exit status: $rc (failures of tests that do not apply to this device count there)"
"$py" "$here/results.py" "$log" --expect "$expected" --list "$work/outcomes.txt"
