# shellcheck shell=bash disable=SC2154
# Frame relay (apps/netfr, docs/netfr.md): a NetFR host streams 1080p RGBA frames at 60 fps and
# a cursor stream for 2 s to a client over RDMA WRITEs into the client's advertised buffers; the
# client checks every frame.
sock=$out/memif.sock link="window=16777216"
NETFR_LINK="pmd=memif,socket=$sock,role=server,ip=192.0.2.91,mac=02:00:5e:00:11:01,$link" \
  "$bin/roce-netfr-demo" host --fps 60 --seconds 2 --res 1080p > "$out/host.log" 2>&1 &
pids+=($!)
for _ in $(seq 150); do grep -qs "waiting for a client" "$out/host.log" && break; sleep 0.1; done
NETFR_LINK="pmd=memif,socket=$sock,role=client,ip=192.0.2.92,mac=02:00:5e:00:11:02,$link" \
  timeout 120 "$bin/roce-netfr-demo" client 192.0.2.91 --svg "$out/latency.svg" \
  > "$out/client.log" 2>&1 || { tr '\r' '\n' < "$out/client.log" | tail -5; echo "demo: netfr failed"; exit 1; }
tr '\r' '\n' < "$out/client.log" | grep -E "frames delivered|frame latency" | sed 's/^/           /'
grep -q "PASS netfr demo" "$out/client.log" || { echo "demo: the frame check failed"; exit 1; }
note "every frame checked; latency plot: $out/latency.svg"
