/// @file
/// roce-echo-client: the other end of the `echo` service (echo_hosted.cc), a libroce program
/// attached to a roced (Context::attach): connects to SERVER's rdma_cm PORT, sends COUNT
/// messages of SIZE bytes one after the other, and checks that each comes back byte for byte.
///   roce-echo-client --attach SOCKET [--port 7471] [-n 8] [-s 256] SERVER
/// Exit status 0 when every echo matched, 1 otherwise.
#include <roce/client.h>
#include <roce/conn.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace po = boost::program_options;
using namespace roce;

namespace {

std::optional<Ipv4Addr> parse_ip(const std::string& s) {
  unsigned a, b, c, d;
  char tail;
  if (std::sscanf(s.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 || b > 255 ||
      c > 255 || d > 255)
    return std::nullopt;
  return Ipv4Addr{(a << 24) | (b << 16) | (c << 8) | d};
}

int fail(const std::string& m) {
  std::fprintf(stderr, "roce-echo-client: %s\n", m.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket, server;
  unsigned port = 7471, count = 8, size = 256;
  double timeout_s = 10;
  bool selective_repeat = false;
  po::options_description desc(
      "Usage: roce-echo-client --attach SOCKET [options] SERVER\n\nOptions");
  desc.add_options()("help,h", "print this help")("attach", po::value(&socket),
                                                  "the roced to attach to (its attach.socket)")(
      "port,p", po::value(&port), "the echo service's rdma_cm port (7471)")(
      "count,n", po::value(&count), "messages (8)")(
      "size,s", po::value(&size), "bytes per message (256)")("timeout", po::value(&timeout_s),
                                                             "seconds for the whole exchange (10)")(
      "selective-repeat", po::bool_switch(&selective_repeat),
      "offer selective repeat in the CM's ECE (the service must accept it)");
  po::options_description hidden;
  hidden.add_options()("server", po::value(&server));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description pos;
  pos.add("server", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "roce-echo-client: " << e.what() << "\n(try --help)\n";
    return 2;
  }
  if (vm.count("help") || socket.empty() || server.empty() || size == 0 || port > 65535) {
    std::cout << desc << '\n';
    return vm.count("help") ? 0 : 2;
  }
  const auto ip = parse_ip(server);
  if (!ip) return fail("'" + server + "' is not an IPv4 address");

  auto ctx = client::Context::attach(socket);
  if (!ctx) return fail("cannot attach to " + socket + ": " + std::strerror(errno));
  conn::Options eo;
  eo.selective_repeat = selective_repeat;
  conn::Endpoint ep(*ctx, eo);
  // Two halves of one region: what we send, where the echo lands.
  client::Buffer* buf = ctx->alloc_buffer(2 * std::size_t{size});
  client::Mr* mr =
      buf ? ctx->reg_mr(ep.pd(), buf->addr, buf->length, verbs::kAccessLocalWrite) : nullptr;
  if (mr == nullptr) return fail(std::string("no registered memory: ") + std::strerror(errno));
  auto* out = static_cast<std::uint8_t*>(buf->addr);
  std::uint8_t* in = out + size;

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<conn::Event> events;
  std::vector<conn::Completion> wcs;
  const auto post_recv = [&](conn::ConnId c) {
    client::Sge sge{reinterpret_cast<std::uintptr_t>(in), size, mr->lkey};
    client::RecvWr wr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ep.post_recv(c, wr);
  };

  conn::QpSizes qs;
  qs.send = qs.recv = 4;
  const conn::ConnId c = ep.connect(*ip, static_cast<std::uint16_t>(port), qs);
  if (c == 0) return fail(std::string("connect: ") + std::strerror(errno));
  if (post_recv(c) != 0) return fail("post_recv failed");
  bool up = false;
  while (!up) {
    if (std::chrono::steady_clock::now() > deadline) return fail("no connection (timeout)");
    events.clear();
    wcs.clear();
    ep.poll(events, wcs);
    for (const auto& e : events) {
      if (e.kind == conn::Event::kEstablished) up = true;
      if (e.kind == conn::Event::kRejected) return fail("the service refused the connection");
      if (e.kind == conn::Event::kUnreachable || e.kind == conn::Event::kConnectError)
        return fail("the service is unreachable");
    }
  }
  for (unsigned i = 0; i < count; ++i) {
    for (unsigned k = 0; k < size; ++k) out[k] = static_cast<std::uint8_t>(i * 31 + k * 7 + 1);
    std::memset(in, 0, size);
    client::Sge sge{reinterpret_cast<std::uintptr_t>(out), size, mr->lkey};
    client::SendWr wr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = client::WrOpcode::kSend;
    wr.send_flags = verbs::kSendSignaled;
    if (ep.post_send(c, wr) != 0) return fail("post_send failed");
    bool sent = false, echoed = false;
    while (!sent || !echoed) {
      if (std::chrono::steady_clock::now() > deadline)
        return fail("message " + std::to_string(i) + ": no echo (timeout)");
      events.clear();
      wcs.clear();
      ep.poll(events, wcs);
      for (const auto& e : events)
        if (e.kind == conn::Event::kDisconnected) return fail("the service disconnected");
      for (const auto& w : wcs) {
        if (!w.ok())
          return fail("message " + std::to_string(i) + ": completion with error " +
                      std::to_string(static_cast<int>(w.wc.status)));
        if (w.wc.opcode == client::WcOpcode::kSend) sent = true;
        if (w.wc.opcode == client::WcOpcode::kRecv) {
          if (w.wc.byte_len != size)
            return fail("message " + std::to_string(i) + ": " + std::to_string(w.wc.byte_len) +
                        " bytes came back, not " + std::to_string(size));
          echoed = true;
        }
      }
    }
    if (std::memcmp(in, out, size) != 0)
      return fail("message " + std::to_string(i) + ": the echo differs from what was sent");
    if (i + 1 < count && post_recv(c) != 0) return fail("post_recv failed");
  }
  std::printf("roce-echo-client: %u messages of %u bytes echoed, every byte checked\n", count,
              size);
  ep.disconnect(c);
  return 0;
}
