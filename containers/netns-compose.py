#!/usr/bin/python3
"""Runs a compose file's services from the image's root filesystem without a container engine.

Each service becomes what an engine would make of it: its own mount, UTS, IPC and PID
namespaces over an overlay of the image's root filesystem (containers/build-rootfs.sh), a
network namespace joined to the compose networks by veth pairs on a Linux bridge (one
namespace per network holds the bridge and its gateway address), named volumes as shared
directories, bind mounts, the image's entrypoint and command as PID 1 under the service's user
with its capability bounding set, /etc/hosts naming the services, `network_mode: service:X`
as X's network namespace, and `depends_on` conditions (service_started, service_healthy by the
service's or the image's health check, service_completed_successfully). Published ports are
not forwarded: reach the services at their network addresses from the network's namespace
(`netns-compose.py exec-net NETWORK CMD...`).

  netns-compose.py [-f FILE]... [--image DIR] [--project NAME] up [--exit-code-from SERVICE]
  netns-compose.py [...] health SERVICE | exec SERVICE CMD... | exec-net NETWORK CMD... |
                         logs SERVICE | stop SERVICE | down

Files merge as compose merges them (mappings recursively, `volumes` by target path, `cap_add`
and `cap_drop` united, other values replaced). State lives in $ROCE_DEPLOY_CACHE/run/PROJECT
(default /var/tmp/roce-deploy). Needs root, iproute2, util-linux (unshare, nsenter).
"""
import argparse
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zlib

import yaml

CACHE = os.environ.get("ROCE_DEPLOY_CACHE", "/var/tmp/roce-deploy")
# An engine's default capabilities (what a service has without cap_add/cap_drop).
DEFAULT_CAPS = ["chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid",
                "setpcap", "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write",
                "setfcap"]


def die(msg):
    print(f"netns-compose: {msg}", file=sys.stderr)
    sys.exit(1)


def sh(*cmd, check=True, **kw):
    return subprocess.run(list(cmd), check=check, **kw)


# ---- the compose model ------------------------------------------------------------------------

def merge(base, over, key=None):
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base[k], v, k) if k in base else v
        return out
    if key == "volumes" and isinstance(base, list) and isinstance(over, list):
        target = lambda v: v.split(":")[1] if isinstance(v, str) else v["target"]  # noqa: E731
        out = {target(v): v for v in base}
        out.update({target(v): v for v in over})
        return list(out.values())
    if key in ("cap_add", "cap_drop") and isinstance(base, list):
        return base + [c for c in over if c not in base]
    return over


def load(files):
    model, first_dir = {}, None
    for f in files:
        with open(f) as fh:
            doc = yaml.safe_load(fh)
        if not isinstance(doc, dict) or "services" not in doc and not model:
            die(f"{f}: not a compose file (no services)")
        # compose resolves relative paths against the first file's directory
        first_dir = first_dir or os.path.dirname(os.path.abspath(f))
        model = merge(model, doc)
    for svc in model["services"].values():
        svc.setdefault("volumes", [])
    model["_dir"] = first_dir
    return model


def order(services):
    seen, out = set(), []

    def visit(n, path):
        if n in seen:
            return
        if n in path:
            die(f"dependency cycle through {n}")
        svc = services.get(n) or die(f"unknown service {n}")
        deps = svc.get("depends_on", {})
        deps = deps if isinstance(deps, dict) else {d: {} for d in deps}
        nm = svc.get("network_mode", "")
        if nm.startswith("service:"):
            deps = {**{nm[8:]: {"condition": "service_started"}}, **deps}
        for d in deps:
            visit(d, path + [n])
        seen.add(n)
        out.append(n)

    for n in services:
        visit(n, [])
    return out


def parse_volume(v, base_dir):
    if isinstance(v, dict):
        src, dst, ro = v.get("source"), v["target"], v.get("read_only", False)
    else:
        parts = v.split(":")
        src, dst = (parts[0], parts[1]) if len(parts) > 1 else (None, parts[0])
        ro = len(parts) > 2 and "ro" in parts[2].split(",")
    bind = src is not None and (src.startswith(".") or src.startswith("/"))
    if bind:
        src = os.path.normpath(os.path.join(base_dir, src))
    return src, dst, ro, bind


def duration(v, default):
    if v is None:
        return default
    v = str(v)
    for suffix, mul in (("ms", 0.001), ("s", 1), ("m", 60)):
        if v.endswith(suffix):
            return float(v[:-len(suffix)]) * mul
    return float(v)


# ---- one project's run --------------------------------------------------------------------------

class Project:
    def __init__(self, args):
        self.model = load(args.file)
        self.name = args.project or self.model.get("name", "compose")
        self.run = os.path.join(CACHE, "run", self.name)
        self.state_file = os.path.join(self.run, "state.json")
        self.state = {}
        if os.path.exists(self.state_file):
            with open(self.state_file) as fh:
                self.state = json.load(fh)
        # the image the project was started from, unless named
        self.image = args.image or self.state.get("image") or os.path.join(CACHE, "image")
        self.rootfs = os.path.join(self.image, "rootfs")
        cfg = os.path.join(self.image, "image.json")
        self.image_cfg = json.load(open(cfg)) if os.path.exists(cfg) else {}
        self.services = self.model["services"]

    def save(self):
        with open(self.state_file, "w") as fh:
            json.dump(self.state, fh, indent=1)

    def ns(self, service):  # network namespace names (the helper's prefix keeps them apart)
        return f"deploy-{self.name}-{service}"

    def log(self, msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    # ---- networks -------------------------------------------------------------------------------
    def networks_up(self):
        nets = self.model.get("networks") or {"default": {}}
        self.state["networks"] = {}
        for i, (name, net) in enumerate(nets.items()):
            net = net or {}
            cfgs = (net.get("ipam") or {}).get("config") or [{"subnet": f"198.19.{200 + i}.0/24"}]
            subnet = ipaddress.ip_network(cfgs[0]["subnet"])
            gw = cfgs[0].get("gateway") or str(next(subnet.hosts()))
            nsname = self.ns("net-" + name)
            sh("ip", "netns", "add", nsname)
            sh("ip", "-n", nsname, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", nsname, "addr", "add", f"{gw}/{subnet.prefixlen}", "dev", "br0")
            sh("ip", "-n", nsname, "link", "set", "br0", "up")
            sh("ip", "-n", nsname, "link", "set", "lo", "up")
            self.state["networks"][name] = {"ns": nsname, "subnet": str(subnet), "gateway": gw,
                                            "next": 2, "members": []}
        self.save()

    def attach(self, service, svc):
        nets = svc.get("networks") or {"default": None}
        if isinstance(nets, list):
            nets = {n: None for n in nets}
        nsname = self.ns(service)
        sh("ip", "netns", "add", nsname)
        sh("ip", "-n", nsname, "link", "set", "lo", "up")
        addrs = {}
        for idx, (net, opts) in enumerate(nets.items()):
            st = self.state["networks"].get(net) or die(f"{service}: unknown network {net}")
            subnet = ipaddress.ip_network(st["subnet"])
            addr = (opts or {}).get("ipv4_address")
            if not addr:
                addr = str(subnet.network_address + st["next"] + 100)
                st["next"] += 1
            host_if = f"vd{zlib.crc32(f'{self.name}/{service}/{net}'.encode()):08x}"
            sh("ip", "link", "add", host_if, "netns", st["ns"], "type", "veth", "peer", "name",
               f"eth{idx}", "netns", nsname)
            sh("ip", "-n", st["ns"], "link", "set", host_if, "master", "br0", "up")
            sh("ip", "-n", nsname, "addr", "add", f"{addr}/{subnet.prefixlen}", "dev", f"eth{idx}")
            sh("ip", "-n", nsname, "link", "set", f"eth{idx}", "up")
            st["members"].append([service, addr])
            addrs[net] = addr
        return nsname, addrs

    # ---- services -------------------------------------------------------------------------------
    def user_ids(self, user):
        if user is None:
            user = self.image_cfg.get("User") or "root"
        user = str(user)
        name = user.split(":")[0]
        if name.isdigit():
            return int(name), int(user.split(":")[1]) if ":" in user else int(name)
        for line in open(os.path.join(self.rootfs, "etc/passwd")):
            f = line.split(":")
            if f[0] == name:
                return int(f[2]), int(f[3])
        die(f"user {user} is not in the image")

    def caps(self, svc):
        caps = set(DEFAULT_CAPS)
        drop = [c.lower().removeprefix("cap_") for c in svc.get("cap_drop", [])]
        caps = set() if "all" in drop else caps - set(drop)
        caps |= {c.lower().removeprefix("cap_") for c in svc.get("cap_add", [])}
        return sorted(caps)

    def privs(self, svc):
        """setpriv's arguments: the service's user and capability bounding set."""
        uid, gid = self.user_ids(svc.get("user"))
        caps = self.caps(svc)
        bset = ",".join(["-all"] + [f"+{c}" for c in caps])
        args = ["/usr/bin/setpriv", f"--bounding-set={bset}", "--inh-caps=-all"]
        if uid != 0 or gid != 0:
            args += [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
        if any("no-new-privileges" in s for s in svc.get("security_opt", [])):
            args.append("--no-new-privs")
        return args + ["--"]

    def argv(self, svc):
        ep = svc.get("entrypoint", self.image_cfg.get("Entrypoint")) or []
        cmd = svc.get("command", self.image_cfg.get("Cmd") if "entrypoint" not in svc else None) or []
        ep = shlex.split(ep) if isinstance(ep, str) else ep
        cmd = shlex.split(cmd) if isinstance(cmd, str) else cmd
        return [str(a) for a in ep + cmd]

    def start(self, service):
        svc = self.services[service]
        d = os.path.join(self.run, service)
        for sub in ("upper", "work", "root"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        nm = svc.get("network_mode", "")
        if nm.startswith("service:"):
            nsname = self.state["services"][nm[8:]]["netns"]
            addrs = self.state["services"][nm[8:]]["addrs"]
        else:
            nsname, addrs = self.attach(service, svc)
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{a} {s}\n" for st in self.state["networks"].values() for s, a in st["members"])
        hostname = svc.get("hostname", service)
        root = os.path.join(d, "root")
        mounts = [
            f"mount -t overlay overlay -o lowerdir={self.rootfs},upperdir={d}/upper,workdir={d}/work {root}",
            f"mount -t proc proc {root}/proc",
            f"mount -t sysfs -o ro sysfs {root}/sys",
            f"mount -t tmpfs -o mode=755,nosuid tmpfs {root}/dev",
        ]
        for dev in ("null", "zero", "full", "random", "urandom", "tty"):
            mounts += [f"touch {root}/dev/{dev}", f"mount --bind /dev/{dev} {root}/dev/{dev}"]
        mounts += [f"mkdir -p {root}/dev/shm {root}/dev/pts",
                   f"mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs {root}/dev/shm",
                   f"mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs {root}/tmp"]
        for v in svc.get("volumes", []):
            src, dst, ro, bind = parse_volume(v, self.model["_dir"])
            if not bind:
                src = self.volume(src, dst)
            if not os.path.exists(src):
                die(f"{service}: bind source {src} does not exist")
            mk = f"touch {root}{dst}" if os.path.isfile(src) else f"mkdir -p {root}{dst}"
            mounts += [mk, f"mount --bind {src} {root}{dst}"]
            if ro:
                mounts.append(f"mount -o remount,bind,ro {root}{dst}")
        with open(os.path.join(d, "upper-hosts"), "w") as fh:
            fh.write(hosts)
        mounts += [f"cp {d}/upper-hosts {root}/etc/hosts", f"echo {hostname} > {root}/etc/hostname",
                   f"hostname {hostname}"]
        env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               f"HOSTNAME={hostname}", "HOME=/var/lib/roce" if self.user_ids(svc.get("user"))[0] else "HOME=/root"]
        envs = svc.get("environment") or {}
        env += [f"{k}={v}" for k, v in (envs.items() if isinstance(envs, dict) else
                                          (e.split("=", 1) for e in envs))]
        wd = svc.get("working_dir", self.image_cfg.get("WorkingDir") or "/")
        inner = (["chroot", root, "/usr/bin/env", "-i"] + env +
                 ["/bin/sh", "-c", 'cd "$0" && exec "$@"', wd] + self.privs(svc) + self.argv(svc))
        script = "set -e\n" + "\n".join(mounts) + "\nexec " + shlex.join(inner) + "\n"
        with open(os.path.join(d, "start.sh"), "w") as fh:
            fh.write(script)
        rc_file = os.path.join(d, "rc")
        if os.path.exists(rc_file):
            os.unlink(rc_file)
        # unshare's child is the container's PID 1 (the entrypoint, after the mounts' exec)
        wrapper = (f"ip netns exec {nsname} unshare --mount --uts --ipc --pid --fork "
                   f"--propagation private --kill-child=SIGKILL /bin/sh {d}/start.sh "
                   f"> {d}/log 2>&1 < /dev/null; echo $? > {rc_file}")
        p = subprocess.Popen(["/bin/sh", "-c", wrapper], start_new_session=True)
        pid1 = None
        for _ in range(100):
            pid1 = self.pid1(p.pid)
            if pid1 and os.readlink(f"/proc/{pid1}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
                break
            time.sleep(0.05)
        self.state.setdefault("services", {})[service] = {
            "netns": nsname, "addrs": addrs, "pid1": pid1, "wrapper": p.pid, "dir": d}
        self.save()
        self.log(f"{service}: started ({shlex.join(self.argv(svc))}) in {nsname}, "
                 f"{', '.join(f'{n} {a}' for n, a in addrs.items())}")

    def pid1(self, wrapper):
        """The container's PID 1: the child of unshare (ip netns exec became unshare)."""
        def children(pid):
            try:
                out = []
                for t in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{t}/children") as fh:
                        out += [int(c) for c in fh.read().split()]
                return out
            except OSError:
                return []
        for u in children(wrapper):  # sh -> unshare -> pid 1
            kids = children(u)
            if kids:
                return kids[0]
        return None

    def volume(self, name, dst):
        path = os.path.join(self.run, "volumes", name)
        if not os.path.isdir(path):
            os.makedirs(path)
            img = os.path.join(self.rootfs, dst.lstrip("/"))
            if os.path.isdir(img):  # a new named volume takes the image's directory's owner, mode
                st = os.stat(img)
                os.chown(path, st.st_uid, st.st_gid)
                os.chmod(path, st.st_mode & 0o7777)
        return path

    def running(self, service):
        st = self.state.get("services", {}).get(service)
        return bool(st) and not os.path.exists(os.path.join(st["dir"], "rc"))

    def exit_code(self, service):
        f = os.path.join(self.state["services"][service]["dir"], "rc")
        return int(open(f).read()) if os.path.exists(f) else None

    def healthcheck(self, service):
        svc = self.services[service]
        hc = svc.get("healthcheck") or {}
        test = hc.get("test") or self.image_cfg.get("Healthcheck")
        if not test or test == ["NONE"]:
            return None
        if test[0] == "CMD-SHELL":
            test = ["/bin/sh", "-c", test[1]]
        elif test[0] == "CMD":
            test = test[1:]
        return test, duration(hc.get("timeout"), 3)

    def exec_argv(self, service, argv):
        st = self.state["services"][service]
        svc = self.services[service]
        return (["nsenter", f"--target={st['pid1']}", "--mount", "--uts", "--ipc", "--net",
                 "--pid", "--root", "--wd", "/usr/bin/env", "-i",
                 "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
                + self.privs(svc) + argv)

    def healthy(self, service):
        hc = self.healthcheck(service)
        if hc is None:
            return self.running(service)
        test, timeout = hc
        try:
            r = subprocess.run(self.exec_argv(service, test), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=timeout)
            return r.returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def wait_for(self, service, dep, cond, limit=120):
        t0 = time.time()
        while time.time() - t0 < limit:
            if cond == "service_started" and self.state.get("services", {}).get(dep):
                return
            if cond == "service_healthy":
                if not self.running(dep):
                    die(f"{service}: {dep} exited ({self.exit_code(dep)}) before it was healthy:\n"
                        + self.tail(dep))
                if self.healthy(dep):
                    self.log(f"{dep}: healthy")
                    return
            if cond == "service_completed_successfully" and not self.running(dep):
                if self.exit_code(dep) == 0:
                    return
                die(f"{service}: {dep} exited with {self.exit_code(dep)}")
            time.sleep(0.3)
        die(f"{service}: {dep} not {cond} within {limit} s:\n" + self.tail(dep))

    def tail(self, service, n=30):
        f = os.path.join(self.run, service, "log")
        return "".join(open(f).readlines()[-n:]) if os.path.exists(f) else ""

    # ---- commands -------------------------------------------------------------------------------
    def up(self, exit_from):
        if self.state.get("services"):
            die(f"project {self.name} is up already (netns-compose.py down first)")
        shutil.rmtree(self.run, ignore_errors=True)
        os.makedirs(self.run)
        if not os.path.isdir(os.path.join(self.rootfs, "usr")):
            die(f"no root filesystem in {self.rootfs} (containers/build-rootfs.sh)")
        self.state = {"services": {}, "image": self.image}
        self.networks_up()
        for service in order(self.services):
            deps = self.services[service].get("depends_on", {})
            deps = deps if isinstance(deps, dict) else {d: {} for d in deps}
            for dep, opt in deps.items():
                self.wait_for(service, dep, (opt or {}).get("condition", "service_started"))
            self.start(service)
        if not exit_from:
            return 0
        while self.running(exit_from):
            time.sleep(0.2)
        rc = self.exit_code(exit_from)
        self.log(f"{exit_from}: exited with status {rc}")
        return rc

    def stop(self, service):
        st = self.state["services"][service]
        svc = self.services[service]
        grace = duration(svc.get("stop_grace_period"), 10)
        sig = getattr(signal, svc.get("stop_signal", "SIGTERM"))
        if self.running(service) and st.get("pid1"):
            try:
                os.kill(st["pid1"], sig)
            except ProcessLookupError:
                pass
            t0 = time.time()
            while self.running(service) and time.time() - t0 < grace:
                time.sleep(0.1)
            if self.running(service):
                self.log(f"{service}: still running after {grace} s, SIGKILL")
                os.kill(st["pid1"], signal.SIGKILL)
                while self.running(service):
                    time.sleep(0.1)
        return self.exit_code(service)

    def down(self):
        for service in reversed(order(self.services)):
            if service in self.state.get("services", {}):
                rc = self.stop(service)
                self.log(f"{service}: exit status {rc}")
        for service in self.state.get("services", {}):
            if not self.services.get(service, {}).get("network_mode", "").startswith("service:"):
                sh("ip", "netns", "del", self.ns(service), check=False)
        for st in self.state.get("networks", {}).values():
            sh("ip", "netns", "del", st["ns"], check=False)
        self.state = {}
        if os.path.isdir(self.run):
            self.save()
        return 0


def config(args):
    """Checks the merged model (every reference resolves) and prints it; no root needed."""
    model = load(args.file)
    services, nets = model["services"], model.get("networks") or {}
    vols = model.get("volumes") or {}
    problems = []
    for name in order(services):
        svc = services[name]
        nm = svc.get("network_mode", "")
        if nm and not nm.startswith("service:"):
            problems.append(f"{name}: network_mode {nm} is not supported here")
        for net in (svc.get("networks") or {}):
            if net not in nets:
                problems.append(f"{name}: network {net} is not declared")
        for v in svc.get("volumes", []):
            src, dst, ro, bind = parse_volume(v, model["_dir"])
            if bind and not os.path.exists(src):
                problems.append(f"{name}: bind source {src} does not exist")
            if not bind and src not in vols:
                problems.append(f"{name}: volume {src} is not declared")
        mounts = ", ".join(f"{s}:{d}{':ro' if ro else ''}" for s, d, ro, _ in
                           (parse_volume(v, model["_dir"]) for v in svc.get("volumes", [])))
        print(f"{name}: user {svc.get('user', '(image)')}, "
              f"network {nm or ','.join(svc.get('networks') or ['default'])}, "
              f"caps +{svc.get('cap_add', [])} -{svc.get('cap_drop', [])}, mounts {mounts}")
    for p in problems:
        print(f"FAIL {p}")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-f", "--file", action="append")
    ap.add_argument("--image", help="build-rootfs.sh's output: rootfs/ and image.json "
                    "(default: $ROCE_DEPLOY_CACHE/image, or what the project was started from)")
    ap.add_argument("--project", help="the project's name (default: the file's name key)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--exit-code-from", help="wait for this service and exit with its status")
    for c in ("health", "logs", "stop"):
        sub.add_parser(c).add_argument("service")
    e = sub.add_parser("exec")
    e.add_argument("service")
    e.add_argument("argv", nargs=argparse.REMAINDER)
    en = sub.add_parser("exec-net")
    en.add_argument("network")
    en.add_argument("argv", nargs=argparse.REMAINDER)
    sub.add_parser("down")
    sub.add_parser("config")
    args = ap.parse_args()
    args.file = args.file or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "compose.yaml")]
    if args.cmd == "config":
        return config(args)
    if os.geteuid() != 0:
        die("needs root (network namespaces, mounts)")
    p = Project(args)
    if args.cmd == "up":
        try:
            return p.up(args.exit_code_from)
        except SystemExit:
            p.down()
            raise
    if args.cmd == "down":
        return p.down()
    if args.cmd == "logs":
        sys.stdout.write(open(os.path.join(p.run, args.service, "log")).read())
        return 0
    if args.cmd == "health":
        ok = p.healthy(args.service)
        print(f"{args.service}: {'healthy' if ok else 'unhealthy'}")
        return 0 if ok else 1
    if args.cmd == "stop":
        rc = p.stop(args.service)
        print(f"{args.service}: exit status {rc}")
        return 0
    if args.cmd == "exec":
        return subprocess.run(p.exec_argv(args.service, args.argv)).returncode
    if args.cmd == "exec-net":
        st = p.state["networks"].get(args.network) or die(f"no network {args.network}")
        return subprocess.run(["ip", "netns", "exec", st["ns"]] + args.argv).returncode
    return 2


if __name__ == "__main__":
    sys.exit(main())
