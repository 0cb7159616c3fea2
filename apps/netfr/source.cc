/// @file
/// roce-netfr-source: NetFR's frame source (host_service.h) as a program, in-process on a
/// link of its own or attached to a roced; roced hosts the same class.
///   roce-netfr-source --link LINK | --attach SOCKET [--attach-port NAME]
///                     [--sessions N] [--port N] [--width N] [--height N] [--frames N] [--fps F]
/// It prints "listening" once its rdma_cm ports are open, serves clients one at a time, and
/// after N sessions (0: never) prints its counters and "PASS netfr-source".
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/netfr/host_service.h"
#include "apps/netfr/local_stack.h"

int main(int argc, char** argv) {
  std::string link, attach, attach_port;
  std::uint64_t sessions = 0;
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: needs a value\n", k.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (k == "--link")
      link = v;
    else if (k == "--attach")
      attach = v;
    else if (k == "--attach-port")
      attach_port = v;
    else if (k == "--sessions")
      sessions = std::strtoull(v.c_str(), nullptr, 0);
    else {
      rest.push_back(k);
      rest.push_back(v);
    }
  }
  if (link.empty() == attach.empty()) {
    std::fprintf(stderr,
                 "usage: %s --link LINK | --attach SOCKET [--attach-port NAME] [--sessions N] "
                 "[--port N] [--width N] [--height N] [--frames N] [--fps F]\n",
                 argv[0]);
    return 2;
  }
  try {
    const auto o = roce::netfr::HostServiceOptions::from_args(rest);
    roce::netfr::LocalContext lc;
    if (attach.empty()) {
      std::string err;
      lc = roce::netfr::open_local_context(link, err);
      if (!lc.ctx) throw std::runtime_error(err);
    } else {
      lc.ctx = roce::client::Context::attach(attach, attach_port);
      if (!lc.ctx) throw std::runtime_error("cannot attach to " + attach);
    }
    {
      roce::netfr::HostService svc(*lc.ctx, o);
      std::printf("netfr-source: listening on rdma_cm ports %u and %u (%s)\n", o.port, o.port + 1,
                  attach.empty() ? "in-process" : "attached");
      std::fflush(stdout);
      unsigned idle = 0;
      while (sessions == 0 || svc.sessions() < sessions) {
        if (svc.poll())
          idle = 0;
        else if (++idle >= 64) {
          idle = 0;
          sched_yield();
        }
        if (!lc.ctx->connected()) throw std::runtime_error("roced went away");
      }
      std::printf("%s\n", svc.report().c_str());
      if (lc.report) std::printf("stack: %s\n", lc.report().c_str());
    }
    lc.ctx.reset();
    lc.keep.reset();
  } catch (const std::exception& e) {
    std::printf("FAIL netfr-source: %s\n", e.what());
    return 1;
  }
  std::printf("PASS netfr-source\n");
  return 0;
}
