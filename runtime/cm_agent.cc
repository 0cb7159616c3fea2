/// @file
/// runtime::cm_agent_config (cm_agent.h).
#include "runtime/cm_agent.h"

namespace roce::runtime {

cm::CmAgentConfig cm_agent_config(Env& env) {
  return cm::agent_config(
      env.eng.config().mac, env.cm_connections, [] { return port::now_ns(); },
      [&env](wire::Ipv4Addr ip, bool ask) {
        auto mac = env.loop.neighbour().lookup(ip);
        if (!mac && ask) env.loop.resolve(ip);
        return mac;
      });
}

}  // namespace roce::runtime
