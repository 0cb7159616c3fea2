/// @file
/// roce-perf's rdma_cm tools: shared set-up.
#include "apps/perf/cm_tools.h"

#include <cstdio>
#include <iostream>
#include <random>

#include "controlplane/address.h"

namespace roce::perf {

namespace po = boost::program_options;
using namespace roce::runtime;

bool parse_args(int argc, char** argv, const po::options_description& d, po::variables_map& vm) {
  po::store(po::command_line_parser(argc - 1, argv + 1).options(d).run(), vm);
  po::notify(vm);
  if (vm.count("help") == 0) return true;
  std::cout << d << '\n';
  return false;
}

void ToolFlags::add_to(po::options_description& d) {
  runtime::LinkFlags::add_to(d);
  d.add_options()("timeout", po::value(&timeout_s)->default_value(timeout_s),
                  "seconds before a stalled step gives up")(
      "json", po::value(&json), "write the results as JSON to this file");
}

int cmatose_main(int argc, char** argv, const CmatoseTool& tool) {
  namespace po = boost::program_options;
  CmatoseOpts o;
  o.port = tool.port;
  po::options_description d(tool.usage);
  d.add_options()("help,h", "print this help")("server,s", po::value(&o.server),
                                               "the server's RoCE IP (we are the client)")(
      "bind,b", po::value(&o.bind), "server: address to bind to")(
      "connections,c", po::value(&o.connections)->default_value(o.connections), "connections")(
      "count,C", po::value(&o.count)->default_value(o.count), "messages per connection")(
      "size,S", po::value(&o.size)->default_value(o.size), tool.size_help)(
      "port,p", po::value(&o.port)->default_value(o.port), tool.port_help);
  o.lf.add_to(d);
  try {
    po::variables_map vm;
    if (!parse_args(argc, argv, d, vm)) return 0;
    if (o.connections == 0 || o.connections > 64) throw po::error("-c must be 1..64");
    if (o.count > 1024) throw po::error("-C must be at most 1024");
    if (o.size > tool.max_size) throw po::error(tool.max_size_why);
    if (o.port == 0 || o.port > 65535) throw po::error("-p must be 1..65535");
    o.lf.finish();
  } catch (const po::error& e) {
    std::cerr << "roce-perf: " << e.what() << "\n(try roce-perf " << tool.name << " --help)\n";
    return 2;
  }
  try {
    {
      runtime::Env env(o.lf.link);
      const CmatoseResult r = tool.run(env, o);
      const double secs = r.seconds;
      std::printf("test complete\n");
      std::printf("%u connections, %u messages of %u bytes each way in %.2f seconds\n",
                  o.connections, r.printed, o.size, secs);
      std::printf("return status 0\n");
      if (!o.lf.json.empty()) {
        std::FILE* j = std::fopen(o.lf.json.c_str(), "w");
        if (j) {
          std::fprintf(j,
                       "{\"test\":\"%s\",\"role\":\"%s\",\"connections\":%u,\"count\":%u,"
                       "\"size\":%u,\"seconds\":%g}\n",
                       tool.name, o.server.empty() ? "server" : "client", o.connections, r.recorded,
                       o.size, secs);
          std::fclose(j);
        }
      }
    }
    port::eal_cleanup();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "roce-perf: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace roce::perf
