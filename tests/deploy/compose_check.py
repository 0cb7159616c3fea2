#!/usr/bin/env python3
"""Offline check of compose files (tests/deploy/manifests_check.sh): merged as compose merges
an override file (mappings merged, volumes by their target, other lists appended), then every
reference resolved: each service's networks and named volumes are declared, bind sources and
mounted files exist, depends_on names services, and nothing uses what Debian 12's
podman-compose 1.0.3 cannot run (network_mode service:X, per-network addresses). Published
ports bind a loopback address of the host, never all of them; the volume of a memif link's
socket is mounted by the appliances on that link only; clients run as a uid of their own.
  compose_check.py FILE [OVERRIDE]...
"""
import os
import sys

import yaml


def merge(base, over):
    for key, value in over.items():
        if key not in base:
            base[key] = value
        elif isinstance(value, dict) and isinstance(base[key], dict):
            merge(base[key], value)
        elif isinstance(value, list) and isinstance(base[key], list):
            if key == "volumes":
                targets = {v.split(":")[1] for v in value if ":" in v}
                base[key] = [v for v in base[key] if v.split(":")[1] not in targets] + value
            else:
                base[key] = base[key] + value
        else:
            base[key] = value
    return base


def main(files):
    model, problems = {}, []
    for f in files:
        merge(model, yaml.safe_load(open(f)))
    where = os.path.dirname(os.path.abspath(files[0]))
    services = model.get("services") or {}
    networks, volumes = model.get("networks") or {}, model.get("volumes") or {}
    for name, s in services.items():
        say = lambda msg: problems.append(f"{name}: {msg}")  # noqa: E731
        if "image" not in s:
            say("no image")
        mode = s.get("network_mode", "")
        if mode.startswith("service:"):
            say(f"network_mode {mode}: podman-compose 1.0.3 cannot share a service's namespace")
        nets = s.get("networks") or []
        if isinstance(nets, dict):
            say("networks as a mapping (addresses): podman-compose 1.0.3 takes a list only")
        for n in nets:
            if n not in networks:
                say(f"network {n} is not declared")
        for v in s.get("volumes") or []:
            src = v.split(":")[0]
            if src.startswith((".", "/")):
                if not os.path.exists(os.path.join(where, src)):
                    say(f"bind source {src} does not exist")
            elif src not in volumes:
                say(f"volume {src} is not declared")
        for port in s.get("ports") or []:
            # HOST_IP:HOST_PORT:CONTAINER_PORT only, HOST_IP a loopback address: a port given
            # without an address is published on every address of the host (docs/security.md)
            text = str(port) if not isinstance(port, dict) else f"{port.get('host_ip', '')}:{port.get('published', '')}:"
            if not text.startswith(("127.", "[::1]:", "::1:")):
                say(f"port {port} is published on every address of the host: give 127.0.0.1:")
        for d in s.get("depends_on") or []:
            if d not in services:
                say(f"depends_on {d}: no such service")
        print(f"ok service {name}: user {s.get('user')}, caps +{s.get('cap_add', [])} -{s.get('cap_drop', [])}")
    # The memif link is raw Ethernet between the appliances, outside everything roced checks for
    # its attached clients: the volume holding its socket is mounted by services whose roced
    # drives that link only, never by a client's (docs/security.md, "Deployments").
    link_volumes, link_services = {}, set()
    for name, s in services.items():
        mounts = {v.split(":")[1]: v.split(":")[0] for v in s.get("volumes") or [] if ":" in v}
        cfg = mounts.get("/etc/roce/appliance.yaml")
        if not cfg or not cfg.startswith((".", "/")):
            continue
        for port in (yaml.safe_load(open(os.path.join(where, cfg))) or {}).get("ports") or []:
            args = dict(a.split("=", 1) for a in str(port.get("devargs", "")).split(",") if "=" in a)
            if port.get("device", "").startswith("net_memif") and "socket" in args:
                vol = mounts.get(os.path.dirname(args["socket"]))
                if vol:
                    link_volumes[vol] = args["socket"]
                    link_services.add(name)
    # A client sharing roced's uid could unlink its attach socket and listen in its place for
    # the next clients: clients run as another uid (in roced's group, to connect).
    for name, s in services.items():
        mounts = {v.split(":")[1] for v in s.get("volumes") or [] if ":" in v}
        uid = str(s.get("user", "roce")).split(":")[0]
        if "/etc/roce/appliance.yaml" not in mounts and uid in ("roce", "10001", "0", "root"):
            problems.append(f"{name}: a client running as {uid}, the appliances' user")
    for name, s in services.items():
        for v in s.get("volumes") or []:
            src = v.split(":")[0]
            if src in link_volumes and name not in link_services:
                problems.append(f"{name}: mounts {src}, the memif link's socket {link_volumes[src]}")
    for p in problems:
        print(f"FAIL {p}")
    return 1 if problems or not services else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
