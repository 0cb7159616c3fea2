// The C test's fake network (tests/unit/lnet/fake_context.h) behind a C interface.
#include "tests/unit/lnet/fake_context.h"

extern "C" {
void* lnet_fake_new(int complete_sends) {
  auto* c = new roce::lnet::FakeContext;
  c->port_.gid = roce::ipv4_mapped(c->port_.ipv4);
  c->complete_sends = complete_sends != 0;
  return c;
}
void lnet_fake_free(void* c) { delete static_cast<roce::lnet::FakeContext*>(c); }
/// A message of `len` bytes into the oldest posted receive: 0, or -1 when none is posted.
int lnet_fake_deliver(void* c, unsigned len) {
  auto* f = static_cast<roce::lnet::FakeContext*>(c);
  const std::uint64_t id = f->oldest_recv();
  if (id == 0) return -1;
  f->deliver(id, len, 0, false);
  return 0;
}
}
extern "C" {
/// A message of `len` bytes at `offset` into the oldest posted receive, the buffer kept queued
/// (`still`: a multi-message buffer with room left). 0, or -1 when none is posted.
int lnet_fake_deliver_at(void* c, unsigned len, unsigned offset, int still) {
  auto* f = static_cast<roce::lnet::FakeContext*>(c);
  const std::uint64_t id = f->oldest_recv();
  if (id == 0) return -1;
  f->deliver(id, len, offset, still != 0);
  return 0;
}
}
