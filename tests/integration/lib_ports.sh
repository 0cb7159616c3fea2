# shellcheck shell=bash
# port_base SPAN: the first of SPAN consecutive TCP ports that nothing on this host uses now,
# picked at random in 10000..31999: below Linux's ephemeral range (32768..60999), where the
# kernel takes the local ports of outgoing connections (a test's roce-ctl, curl or out-of-band
# exchange), so that none of those can hold a port a test is about to listen on.
port_base() {
  local span=${1:-1} used base p ok
  used=" $(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); printf "%s ", a[n] }')"
  for _ in $(seq 200); do
    base=$((10000 + (RANDOM * 32768 + RANDOM) % (22000 - span)))
    ok=1
    for ((p = base; p < base + span; p++)); do
      [[ $used == *" $p "* ]] && { ok=0; break; }
    done
    ((ok)) && { echo "$base"; return 0; }
  done
  echo "port_base: no $span free ports in 10000..31999" >&2
  return 1
}
