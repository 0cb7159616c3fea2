#!/usr/bin/env bash
# The export's options reloaded without a restart (review17 item 9; knfsd's `exportfs -r`):
# roce-nfsd with --exports-file, then SIGHUP after the file changed (and SIGUSR1's listing of
# the NFSv4 clients, of roce-nfsd and of roced); roced hosting the service
# with the same file in its args, which it reads again when the file changes and on SIGHUP (the
# daemon goes on). MOUNT over kernel TCP on 127.0.0.1 is the probe (MNT's status and EXPORT's
# client list, from Python): the client 127.0.0.1 is refused (MNT3ERR_ACCES), the file lists it,
# SIGHUP, MNT succeeds and EXPORT lists it; a bad file leaves the options as they were. The
# process is the same throughout (no restart, so no NFSv4 grace period). Callers are squashed to
# the user running the test (no root needed; a user with supplementary groups: skip).
#   nfs_exports_reload.sh ROCED ROCE_NFSD
set -euo pipefail
roced=$(realpath "$1") nfsd=$(realpath "$2")
if [[ $(id -u) != 0 && -n $(id -G | tr ' ' '\n' | grep -vx "$(id -g)") ]]; then
  echo "SKIP: not root and in supplementary groups (the service refuses to lend them)"; exit 77
fi
work=$(mktemp -d /tmp/nfs-reload-XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
mkdir "$work/export"
squash="rw,all_squash,anonuid=$(id -u),anongid=$(id -g)"
# MOUNT calls over TCP: `mnt PORT PATH` prints MNT's mountstat3; `exports PORT` EXPORT's groups.
rpc() {
  /usr/bin/python3 - "$@" <<'PY'
import socket, struct, sys
port, proc = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port), timeout=5)
call = struct.pack(">IIIIII", 7, 0, 2, 100005, 3, 1 if proc == "mnt" else 5) + b"\0" * 16
if proc == "mnt":
    p = sys.argv[3].encode()
    call += struct.pack(">I", len(p)) + p + b"\0" * (-len(p) % 4)
s.sendall(struct.pack(">I", 0x80000000 | len(call)) + call)
rec = b""
while len(rec) < 4 or len(rec) < 4 + (struct.unpack(">I", rec[:4])[0] & 0x7fffffff):
    more = s.recv(65536)
    if not more:
        sys.exit("connection closed")
    rec += more
body = rec[4 + 24:]  # after the record mark and xid, REPLY, ACCEPTED, null verifier, SUCCESS
u32 = lambda o: struct.unpack(">I", body[o:o + 4])[0]
def string(o):
    n = u32(o)
    return body[o + 4:o + 4 + n].decode(), o + 4 + n + (-n % 4)
if proc == "mnt":
    print(u32(0))
else:
    o, out = 0, []
    while u32(o):
        d, o = string(o + 4)
        groups = []
        while u32(o):
            g, o = string(o + 4)
            groups.append(g)
        o += 4
        out.append(d + " " + ",".join(groups))
    print(";".join(out))
PY
}
expect() {  # WHAT GOT WANT LOG
  [[ $2 == "$3" ]] || { sed 's/^/log: /' "$4"; echo "FAIL: $1: got '$2', want '$3'"; exit 1; }
  echo "ok: $1: $2"
}
wait_log() {  # LOG PATTERN
  for _ in $(seq 100); do grep -q "$2" "$1" && return 0; sleep 0.1; done
  sed 's/^/log: /' "$1"; echo "FAIL: no '$2' in $1"; exit 1
}

# --- roce-nfsd, SIGHUP ---
mport=$((22000 + $$ % 4000))
printf 'export-options ro\nclients 198.18.0.1\n' > "$work/exports"
"$nfsd" --memif "$work/memif.sock" --ip 192.0.2.121 --mac 02:00:5e:00:10:01 \
  --root "$work/export" --export-options "$squash" --exports-file "$work/exports" \
  --mount-address 127.0.0.1 --mount-port "$mport" --portmap-port 0 --state-dir "$work/state" \
  --timeout 60 \
  > "$work/nfsd.txt" 2>&1 &
pid=$!
wait_log "$work/nfsd.txt" "^roce-nfsd: serving"
root=$(realpath "$work/export")
expect "roce-nfsd: MNT $root, 127.0.0.1 not listed" "$(rpc "$mport" mnt "$root")" 13 "$work/nfsd.txt"
printf '# the build hosts and this one\nexport-options rw\nclients 198.18.0.1,127.0.0.1\n' > "$work/exports"
kill -HUP "$pid"
wait_log "$work/nfsd.txt" "^roce-nfsd: service nfs: exports reloaded"  # SIGHUP's line
expect "roce-nfsd: MNT after SIGHUP" "$(rpc "$mport" mnt "$root")" 0 "$work/nfsd.txt"
expect "roce-nfsd: EXPORT after SIGHUP" "$(rpc "$mport" exports)" "$root 198.18.0.1,127.0.0.1" "$work/nfsd.txt"
expect "roce-nfsd: MNT of a directory beneath" "$(mkdir -p "$work/export/sub"; rpc "$mport" mnt "$root/sub/")" 0 "$work/nfsd.txt"
printf 'clients 300.1.2.3\n' > "$work/exports"
kill -HUP "$pid"
wait_log "$work/nfsd.txt" "options are unchanged"
expect "roce-nfsd: MNT after a bad file" "$(rpc "$mport" mnt "$root")" 0 "$work/nfsd.txt"
# SIGUSR1: the NFSv4 clients, as knfsd's nfsdclnts lists them (none here).
kill -USR1 "$pid"
wait_log "$work/nfsd.txt" "^roce-nfsd: nfs4 clients: 0"
echo "ok: roce-nfsd lists its NFSv4 clients on SIGUSR1"
kill -INT "$pid"
wait "$pid" || true
pid=
grep -q "serving $root as $root " "$work/nfsd.txt" ||
  { cat "$work/nfsd.txt"; echo "FAIL: the export is not the root's canonical path"; exit 1; }

# --- roced hosting the service: the file looked at once a second ---
mport=$((26000 + $$ % 4000))
printf 'clients 198.18.0.1\n' > "$work/exports"
cat > "$work/roced.yaml" <<YAML
name: nfs-reload
eal:
  args: [--no-huge, --no-shconf, -m, "256", --no-pci, --file-prefix=rocedrl$$, "--log-level=*:error"]
ports:
  - name: p0
    device: net_memif0
    devargs: role=server,id=0,socket-abstract=no,socket=$work/memif2.sock
    mac: 02:00:00:00:00:01
    ipv4: 192.0.2.1/24
counters:
  telemetry: false
services:
  - test: nfs
    port: p0
    listen_port: 20049
    args: ["--root", "$work/export", "--mount-port", "$mport", "--portmap-port", "0",
           "--state-dir", "$work/state2",
           "--export-options", "$squash", "--exports-file", "$work/exports"]
YAML
"$roced" --config "$work/roced.yaml" > "$work/roced.log" 2>&1 &
pid=$!
wait_log "$work/roced.log" "service nfs: rdma_cm port 20049"
expect "roced: MNT, 127.0.0.1 not listed" "$(rpc "$mport" mnt "$root")" 13 "$work/roced.log"
printf 'clients 127.0.0.1\n' > "$work/exports"
wait_log "$work/roced.log" "exports reloaded"
expect "roced: MNT after the file changed" "$(rpc "$mport" mnt "$root")" 0 "$work/roced.log"
# SIGHUP to roced: the service reads its file again, the daemon goes on (it used to end it).
kill -HUP "$pid"
wait_log "$work/roced.log" "^roced: SIGHUP: .*(nfs).*exports reloaded"
kill -0 "$pid" 2>/dev/null || { cat "$work/roced.log"; echo "FAIL: roced ended on SIGHUP"; exit 1; }
expect "roced: MNT after SIGHUP" "$(rpc "$mport" mnt "$root")" 0 "$work/roced.log"
# SIGUSR1: roced prints what its services say (the NFS service: its NFSv4 clients), and runs on.
kill -USR1 "$pid"
wait_log "$work/roced.log" "^nfs4 clients: 0"
grep -q "^roced: services\[0\] (nfs):" "$work/roced.log" ||
  { sed 's/^/log: /' "$work/roced.log"; echo "FAIL: roced did not name the service"; exit 1; }
kill -0 "$pid" || { sed 's/^/log: /' "$work/roced.log"; echo "FAIL: roced ended on SIGUSR1"; exit 1; }
echo "ok: roced lists the hosted service's NFSv4 clients on SIGUSR1"
kill -TERM "$pid"
wait "$pid" || true
pid=
echo "PASS nfs_exports_reload"
