#!/usr/bin/env python3
"""ARP answer time of an address: sends COUNT ARP requests for TARGET on IFACE (a kernel
interface, raw AF_PACKET socket), one every INTERVAL seconds, and prints one line:
"arp TARGET: N/COUNT answered, p50 X ms, max Y ms" (times from our send to the reply's arrival
on the socket). Exit status 0 when every request was answered within TIMEOUT.
    arp_probe.py IFACE SENDER_IP TARGET_IP [COUNT [INTERVAL [TIMEOUT]]]"""
import select
import socket
import struct
import sys
import time


def main():
    iface, sender, target = sys.argv[1:4]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    interval = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
    timeout = float(sys.argv[6]) if len(sys.argv) > 6 else 0.5
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
    s.bind((iface, 0))
    mac = s.getsockname()[4]
    spa, tpa = socket.inet_aton(sender), socket.inet_aton(target)
    req = (b"\xff" * 6 + mac + struct.pack("!H", 0x0806) +
           struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + spa + b"\x00" * 6 + tpa)
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        s.send(req)
        end = t0 + timeout
        while True:
            left = end - time.perf_counter()
            if left <= 0 or not select.select([s], [], [], left)[0]:
                break
            f = s.recv(128)
            if len(f) >= 42 and f[12:14] == b"\x08\x06" and f[20:22] == b"\x00\x02" \
                    and f[28:32] == tpa:
                times.append((time.perf_counter() - t0) * 1e3)
                break
        time.sleep(max(0.0, interval - (time.perf_counter() - t0)))
    times.sort()
    p50 = times[len(times) // 2] if times else float("nan")
    mx = times[-1] if times else float("nan")
    print(f"arp {target}: {len(times)}/{count} answered, p50 {p50:.3f} ms, max {mx:.3f} ms")
    return 0 if len(times) == count else 1


if __name__ == "__main__":
    sys.exit(main())
