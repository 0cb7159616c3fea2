/// The registry of hosted service kinds (runtime/service.h): what roced and the configuration
/// reader learn from it, --check through each kind's check(), and the programming errors it
/// refuses.
#include <gtest/gtest.h>

#include <stdexcept>

#include "runtime/service.h"

namespace roce::runtime {
namespace {

class Idle final : public HostedService {
 public:
  void start() override {}
  bool poll() override { return false; }
  void stop() override {}
};

ServiceKind kind(const std::string& name) {
  ServiceKind k;
  k.name = name;
  k.description = "a kind of the test";
  k.make = [](ServiceEnv&) -> std::unique_ptr<HostedService> { return std::make_unique<Idle>(); };
  return k;
}

// Registered as an application registers its kinds: at namespace scope, before main().
const RegisterService kB{[] {
  ServiceKind k = kind("test_b");
  k.keys = {{"depth", "receives per connection (4)"}, {"size", "bytes (64)"}};
  k.default_port = 7000;
  k.check = [](const ctl::ServiceConfig& sc) {
    sc.option_uint("depth", 4, 1, 16);
    if (!sc.args.empty()) throw std::runtime_error("takes no args");
  };
  return k;
}()};
const RegisterService kA{kind("test_a")};

TEST(ServiceRegistry, KnowsWhatWasRegisteredBeforeMain) {
  const ServiceRegistry& r = ServiceRegistry::instance();
  ASSERT_NE(r.find("test_a"), nullptr);
  ASSERT_NE(r.find("test_b"), nullptr);
  EXPECT_EQ(r.find("test_c"), nullptr);
  const auto all = r.kinds();
  ASSERT_EQ(all.size(), 2u) << "only this binary's kinds: roced's come from the applications";
  EXPECT_EQ(all[0]->name, "test_a") << "by name";
  EXPECT_EQ(all[1]->name, "test_b");
}

TEST(ServiceRegistry, CatalogIsWhatTheReaderNeeds) {
  const ctl::ServiceKinds c = ServiceRegistry::instance().catalog();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].name, "test_b");
  EXPECT_EQ(c[1].keys, (std::vector<std::string>{"depth", "size"}));
  EXPECT_EQ(c[1].default_port, 7000);
  EXPECT_EQ(c[0].default_port, 18515);
  // The reader with that catalog: the kind's keys accepted, another refused.
  const std::string base =
      "ports:\n  - {name: p0, device: x, mac: 02:00:00:00:00:01, ipv4: 192.0.2.1}\nservices:\n";
  const auto cfg = ctl::parse_config(base + "  - {kind: test_b, depth: 8}\n", "t.yaml", c);
  EXPECT_EQ(cfg.services[0].listen_port, 7000);
  EXPECT_THROW(ctl::parse_config(base + "  - {kind: test_a, depth: 8}\n", "t.yaml", c),
               ctl::ConfigError);
}

TEST(ServiceRegistry, DescribeListsKindsAndKeys) {
  const std::string d = ServiceRegistry::instance().describe();
  EXPECT_NE(d.find("test_b: a kind of the test (listen_port 7000)\n"), std::string::npos) << d;
  EXPECT_NE(d.find("    depth: receives per connection (4)\n"), std::string::npos) << d;
}

TEST(ServiceRegistry, CheckNamesTheService) {
  const ServiceRegistry& r = ServiceRegistry::instance();
  const std::string base =
      "ports:\n  - {name: p0, device: x, mac: 02:00:00:00:00:01, ipv4: 192.0.2.1}\nservices:\n"
      "  - {kind: test_a}\n";
  EXPECT_NO_THROW(
      r.check(ctl::parse_config(base + "  - {kind: test_b, depth: 3}\n", "t.yaml", r.catalog())));
  try {
    r.check(ctl::parse_config(base + "  - {kind: test_b, args: [-x]}\n", "t.yaml", r.catalog()));
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "services[1] (test_b): takes no args");
  }
  try {  // the reader's error names the place and the key: not prefixed again
    r.check(ctl::parse_config(base + "  - {kind: test_b, depth: 99}\n", "t.yaml", r.catalog()));
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "t.yaml:5:27: services[1].depth = 99 is out of range [1, 16]");
  }
}

TEST(ServiceRegistry, ProgrammingErrorsAbort) {
  EXPECT_DEATH(ServiceRegistry::instance().add(kind("test_a")), "registered twice");
  ServiceKind nomake = kind("test_z");
  nomake.make = nullptr;
  EXPECT_DEATH(ServiceRegistry::instance().add(nomake), "has no make");
}

TEST(ServiceState, Names) {
  Idle s;
  EXPECT_EQ(s.state(), ServiceState::kStarting);
  s.set_state(ServiceState::kFailed, "why");
  EXPECT_STREQ(to_string(s.state()), "failed");
  EXPECT_EQ(s.state_reason(), "why");
}

}  // namespace
}  // namespace roce::runtime
