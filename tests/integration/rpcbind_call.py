#!/usr/bin/python3
"""RPCBIND version 4 SET or UNSET of one entry over rpcbind's local socket, as a host mountd
does at its start (UNSET, then SET at its own address): tests/integration/nfs_rpcbind.sh makes
a "host mountd" entry with it.

  rpcbind_call.py set|unset PROG VERS NETID UADDR [SOCKET]

Prints rpcbind's answer (true or false); exits 1 when rpcbind does not answer.
"""
import socket
import struct
import sys


def xdr_string(s):
    b = s.encode()
    return struct.pack(">I", len(b)) + b + b"\0" * ((4 - len(b) % 4) % 4)


def main():
    if len(sys.argv) < 6 or sys.argv[1] not in ("set", "unset"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    proc = 1 if sys.argv[1] == "set" else 2
    prog, vers, netid, uaddr = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    path = sys.argv[6] if len(sys.argv) > 6 else "/run/rpcbind.sock"
    # Call header: xid, CALL, RPC version 2, RPCBPROG, version 4, procedure, AUTH_NONE twice.
    body = struct.pack(">IIIIII", 0x7e57, 0, 2, 100000, 4, proc) + struct.pack(">IIII", 0, 0, 0, 0)
    body += struct.pack(">II", prog, vers) + xdr_string(netid) + xdr_string(uaddr)
    body += xdr_string("superuser")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(path)
        s.sendall(struct.pack(">I", 0x80000000 | len(body)) + body)
        data = b""
        while len(data) < 4 or len(data) < 4 + (struct.unpack(">I", data[:4])[0] & 0x7FFFFFFF):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        print("no answer: %s" % e, file=sys.stderr)
        return 1
    # Mark, xid, REPLY, MSG_ACCEPTED, verifier (flavor, length 0), SUCCESS, the boolean.
    if len(data) < 4 + 28:
        print("short answer", file=sys.stderr)
        return 1
    xid, mtype, stat, _, _, accept, result = struct.unpack(">IIIIIII", data[4:32])
    if xid != 0x7E57 or mtype != 1 or stat != 0 or accept != 0:
        print("refused: %r" % ((xid, mtype, stat, accept),), file=sys.stderr)
        return 1
    print("true" if result else "false")
    return 0


if __name__ == "__main__":
    sys.exit(main())
