// verbs/provider/ex_api.cc against a fake bridge: post_send captures the ibv_send_wr chains the
// ibv_wr_* builder hands over (with copies of their SGEs and inline bytes), poll_cq replays
// ibv_wc arrays. Semantics from rdma-core's ibv_wr_post(3) and ibv_create_cq_ex(3).
#include "verbs/provider/ex_api.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "verbs/provider/bridge.h"

namespace {

struct Captured {
  ibv_send_wr wr;  // sg_list/next as handed over (pointers not followed after the call)
  std::vector<ibv_sge> sges;
  std::string inline_bytes;  // the bytes behind the SGEs of an IBV_SEND_INLINE request
};

struct FakeBridge {
  std::vector<std::vector<Captured>> posts;  // one chain per post_send call
  int post_rc = 0;                           // what post_send answers
  int post_bad_index = -1;                   // *bad_wr: this request of the chain
  std::atomic<int> inside_post{0};
  std::atomic<int> overlaps{0};
  std::map<ibv_cq*, std::deque<ibv_wc>> cq;  // completions poll_cq replays
  int poll_rc = 0;                           // < 0: poll_cq fails with it
  std::vector<int> poll_max;                 // the max of each poll_cq call
};
FakeBridge* g_fake = nullptr;

}  // namespace

namespace roce::verbs_compat {

int post_send(ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  if (g_fake->inside_post.fetch_add(1) != 0) g_fake->overlaps++;
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<Captured> chain;
  int i = 0;
  for (ibv_send_wr* w = wr; w; w = w->next, ++i) {
    if (g_fake->post_rc && i == g_fake->post_bad_index) *bad_wr = w;
    Captured c{*w, {}, {}};
    for (int k = 0; k < w->num_sge; ++k) {
      c.sges.push_back(w->sg_list[k]);
      if (w->send_flags & IBV_SEND_INLINE)
        c.inline_bytes.append(reinterpret_cast<const char*>(w->sg_list[k].addr),
                              w->sg_list[k].length);
    }
    chain.push_back(c);
  }
  g_fake->posts.push_back(chain);
  g_fake->inside_post.fetch_sub(1);
  return g_fake->post_rc;
}

int poll_cq(ibv_cq* cq, int max, ibv_wc* out) {
  g_fake->poll_max.push_back(max);
  if (g_fake->poll_rc < 0) return g_fake->poll_rc;
  auto& q = g_fake->cq[cq];
  int n = 0;
  while (n < max && !q.empty()) {
    out[n++] = q.front();
    q.pop_front();
  }
  return n;
}

}  // namespace roce::verbs_compat

namespace {

using namespace roce::verbs_compat;

constexpr std::uint64_t kAllOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV;

ibv_qp_cap caps(std::uint32_t wr, std::uint32_t sge, std::uint32_t inl) {
  ibv_qp_cap c{};
  c.max_send_wr = wr;
  c.max_send_sge = sge;
  c.max_inline_data = inl;
  return c;
}

class ExApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = &fake;
    std::memset(&qpx, 0, sizeof qpx);
    qpx.qp_base.qp_type = IBV_QPT_RC;
    init_qp_ex(&qpx, kAllOps, caps(64, 4, 64));
  }
  void TearDown() override {
    fini_qp_ex(&qpx);
    g_fake = nullptr;
  }
  const std::vector<Captured>& last_post() { return fake.posts.back(); }

  FakeBridge fake;
  ibv_qp_ex qpx;
};

TEST_F(ExApiTest, EveryBuilderBecomesItsSendWr) {
  ibv_wr_start(&qpx);
  qpx.wr_id = 1;
  qpx.wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(&qpx);
  ibv_wr_set_sge(&qpx, 0x11, 0x1000, 8);
  qpx.wr_id = 2;
  qpx.wr_flags = IBV_SEND_SOLICITED;
  ibv_wr_send_imm(&qpx, htonl(0xabcd));
  ibv_wr_set_sge(&qpx, 0x11, 0x1008, 8);
  qpx.wr_id = 3;
  qpx.wr_flags = IBV_SEND_FENCE;
  ibv_wr_send_inv(&qpx, 0x77);
  ibv_wr_set_sge(&qpx, 0x11, 0x1010, 8);
  qpx.wr_id = 4;
  ibv_wr_rdma_write(&qpx, 0x22, 0x2000);
  ibv_wr_set_sge(&qpx, 0x11, 0x1018, 16);
  qpx.wr_id = 5;
  ibv_wr_rdma_write_imm(&qpx, 0x23, 0x2100, htonl(7));
  ibv_wr_set_sge(&qpx, 0x11, 0x1028, 16);
  qpx.wr_id = 6;
  ibv_wr_rdma_read(&qpx, 0x24, 0x2200);
  ibv_wr_set_sge(&qpx, 0x11, 0x1038, 32);
  qpx.wr_id = 7;
  ibv_wr_atomic_cmp_swp(&qpx, 0x25, 0x2300, 10, 20);
  ibv_wr_set_sge(&qpx, 0x11, 0x1058, 8);
  qpx.wr_id = 8;
  ibv_wr_atomic_fetch_add(&qpx, 0x26, 0x2400, 5);
  ibv_wr_set_sge(&qpx, 0x11, 0x1060, 8);
  qpx.wr_id = 9;
  qpx.wr_flags = 0;
  ibv_wr_local_inv(&qpx, 0x99);
  ASSERT_EQ(ibv_wr_complete(&qpx), 0);

  ASSERT_EQ(fake.posts.size(), 1u);
  const auto& c = last_post();
  ASSERT_EQ(c.size(), 9u);
  for (std::size_t i = 0; i < c.size(); ++i) {
    EXPECT_EQ(c[i].wr.wr_id, i + 1);
    EXPECT_EQ(c[i].wr.next != nullptr, i + 1 < c.size());
  }
  EXPECT_EQ(c[0].wr.opcode, IBV_WR_SEND);
  EXPECT_EQ(c[0].wr.send_flags, unsigned{IBV_SEND_SIGNALED});
  ASSERT_EQ(c[0].sges.size(), 1u);
  EXPECT_EQ(c[0].sges[0].lkey, 0x11u);
  EXPECT_EQ(c[0].sges[0].addr, 0x1000u);
  EXPECT_EQ(c[0].sges[0].length, 8u);
  EXPECT_EQ(c[1].wr.opcode, IBV_WR_SEND_WITH_IMM);
  EXPECT_EQ(c[1].wr.imm_data, htonl(0xabcd));
  EXPECT_EQ(c[1].wr.send_flags, unsigned{IBV_SEND_SOLICITED});
  EXPECT_EQ(c[2].wr.opcode, IBV_WR_SEND_WITH_INV);
  EXPECT_EQ(c[2].wr.invalidate_rkey, 0x77u);
  EXPECT_EQ(c[2].wr.send_flags, unsigned{IBV_SEND_FENCE});
  EXPECT_EQ(c[3].wr.opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(c[3].wr.wr.rdma.rkey, 0x22u);
  EXPECT_EQ(c[3].wr.wr.rdma.remote_addr, 0x2000u);
  EXPECT_EQ(c[3].sges[0].length, 16u);
  EXPECT_EQ(c[4].wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(c[4].wr.wr.rdma.rkey, 0x23u);
  EXPECT_EQ(c[4].wr.wr.rdma.remote_addr, 0x2100u);
  EXPECT_EQ(c[4].wr.imm_data, htonl(7));
  EXPECT_EQ(c[5].wr.opcode, IBV_WR_RDMA_READ);
  EXPECT_EQ(c[5].wr.wr.rdma.rkey, 0x24u);
  EXPECT_EQ(c[5].wr.wr.rdma.remote_addr, 0x2200u);
  EXPECT_EQ(c[5].sges[0].length, 32u);
  EXPECT_EQ(c[6].wr.opcode, IBV_WR_ATOMIC_CMP_AND_SWP);
  EXPECT_EQ(c[6].wr.wr.atomic.rkey, 0x25u);
  EXPECT_EQ(c[6].wr.wr.atomic.remote_addr, 0x2300u);
  EXPECT_EQ(c[6].wr.wr.atomic.compare_add, 10u);
  EXPECT_EQ(c[6].wr.wr.atomic.swap, 20u);
  EXPECT_EQ(c[7].wr.opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
  EXPECT_EQ(c[7].wr.wr.atomic.rkey, 0x26u);
  EXPECT_EQ(c[7].wr.wr.atomic.remote_addr, 0x2400u);
  EXPECT_EQ(c[7].wr.wr.atomic.compare_add, 5u);
  EXPECT_EQ(c[8].wr.opcode, IBV_WR_LOCAL_INV);
  EXPECT_EQ(c[8].wr.invalidate_rkey, 0x99u);
  EXPECT_EQ(c[8].wr.num_sge, 0);
}

TEST_F(ExApiTest, WrIdAndFlagsAreReadWhenTheBuilderIsCalled) {
  ibv_wr_start(&qpx);
  qpx.wr_id = 41;
  qpx.wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(&qpx);
  qpx.wr_id = 42;  // after the builder: for the next request only
  qpx.wr_flags = 0;
  ibv_wr_set_sge(&qpx, 1, 0x10, 4);
  ibv_wr_send(&qpx);
  ASSERT_EQ(ibv_wr_complete(&qpx), 0);
  ASSERT_EQ(last_post().size(), 2u);
  EXPECT_EQ(last_post()[0].wr.wr_id, 41u);
  EXPECT_EQ(last_post()[0].wr.send_flags, unsigned{IBV_SEND_SIGNALED});
  EXPECT_EQ(last_post()[1].wr.wr_id, 42u);
  EXPECT_EQ(last_post()[1].wr.send_flags, 0u);
  EXPECT_EQ(last_post()[1].wr.num_sge, 0);
}

TEST_F(ExApiTest, SgeListIsCopiedAndAZeroLengthSgeMeansNoData) {
  std::vector<ibv_sge> list = {{0x100, 10, 1}, {0x200, 20, 2}, {0x300, 30, 3}};
  ibv_wr_start(&qpx);
  ibv_wr_rdma_write(&qpx, 5, 0x5000);
  ibv_wr_set_sge_list(&qpx, list.size(), list.data());
  list[0].addr = 0xdead;  // the caller's array is free again after the setter
  ibv_wr_send(&qpx);
  ibv_wr_set_sge(&qpx, 9, 0x900, 0);
  ibv_wr_send(&qpx);
  ibv_wr_set_sge(&qpx, 9, 0x900, 12);
  ibv_wr_set_sge_list(&qpx, 0, nullptr);  // a later setter replaces the data
  ASSERT_EQ(ibv_wr_complete(&qpx), 0);
  const auto& c = last_post();
  ASSERT_EQ(c.size(), 3u);
  ASSERT_EQ(c[0].sges.size(), 3u);
  EXPECT_EQ(c[0].sges[0].addr, 0x100u);
  EXPECT_EQ(c[0].sges[1].length, 20u);
  EXPECT_EQ(c[0].sges[2].lkey, 3u);
  EXPECT_EQ(c[1].wr.num_sge, 0);
  EXPECT_EQ(c[1].wr.sg_list, nullptr);
  EXPECT_EQ(c[2].wr.num_sge, 0);
}

TEST_F(ExApiTest, InlineDataIsCopiedAtTheCall) {
  char buf[64];
  std::memset(buf, 'a', sizeof buf);
  ibv_wr_start(&qpx);
  ibv_wr_send(&qpx);
  ibv_wr_set_inline_data(&qpx, buf, 16);
  std::memset(buf, 'b', sizeof buf);  // reused at once, as IBV_SEND_INLINE allows
  ibv_wr_rdma_write(&qpx, 3, 0x3000);
  ibv_data_buf list[] = {{buf, 4}, {const_cast<char*>("xyz"), 3}, {nullptr, 0}};
  ibv_wr_set_inline_data_list(&qpx, 3, list);
  std::memset(buf, 'c', sizeof buf);
  // Enough further inline requests that the builder's byte store grows (and moves).
  for (int i = 0; i < 40; ++i) {
    ibv_wr_send(&qpx);
    std::memset(buf, 'A' + i % 26, sizeof buf);
    ibv_wr_set_inline_data(&qpx, buf, 1 + i % 64);
  }
  ASSERT_EQ(ibv_wr_complete(&qpx), 0);
  const auto& c = last_post();
  ASSERT_EQ(c.size(), 42u);
  EXPECT_TRUE(c[0].wr.send_flags & IBV_SEND_INLINE);
  EXPECT_EQ(c[0].inline_bytes, std::string(16, 'a'));
  EXPECT_EQ(c[1].wr.opcode, IBV_WR_RDMA_WRITE);
  EXPECT_TRUE(c[1].wr.send_flags & IBV_SEND_INLINE);
  EXPECT_EQ(c[1].inline_bytes, "bbbbxyz");
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(c[2 + i].inline_bytes, std::string(1 + i % 64, static_cast<char>('A' + i % 26))) << i;
}

TEST_F(ExApiTest, UdAddressOnUdQpsOnly) {
  ibv_qp_ex ud{};
  ud.qp_base.qp_type = IBV_QPT_UD;
  init_qp_ex(&ud, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, caps(16, 1, 0));
  auto* ah = reinterpret_cast<ibv_ah*>(0x1234);
  ibv_wr_start(&ud);
  ud.wr_id = 5;
  ibv_wr_send(&ud);
  ibv_wr_set_ud_addr(&ud, ah, 0xabcdef, 0x11111111);
  ibv_wr_set_sge(&ud, 1, 0x100, 64);
  ibv_wr_send_imm(&ud, htonl(3));
  ibv_wr_set_ud_addr(&ud, ah, 2, 3);
  ibv_wr_set_sge(&ud, 1, 0x200, 64);
  ASSERT_EQ(ibv_wr_complete(&ud), 0);
  const auto& c = last_post();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr.wr.ud.ah, ah);
  EXPECT_EQ(c[0].wr.wr.ud.remote_qpn, 0xabcdefu);
  EXPECT_EQ(c[0].wr.wr.ud.remote_qkey, 0x11111111u);
  EXPECT_EQ(c[1].wr.wr.ud.remote_qpn, 2u);

  // A UD send without an address: refused whole, nothing posted.
  std::size_t posts = fake.posts.size();
  ibv_wr_start(&ud);
  ibv_wr_send(&ud);
  ibv_wr_set_ud_addr(&ud, ah, 2, 3);
  ibv_wr_send(&ud);
  ibv_wr_set_sge(&ud, 1, 0x200, 64);
  EXPECT_EQ(ibv_wr_complete(&ud), EINVAL);
  EXPECT_EQ(fake.posts.size(), posts);
  // The builders UD has not (rdma-core leaves them null).
  EXPECT_EQ(ud.wr_rdma_write, nullptr);
  EXPECT_EQ(ud.wr_rdma_read, nullptr);
  EXPECT_EQ(ud.wr_atomic_fetch_add, nullptr);
  fini_qp_ex(&ud);

  // On an RC QP the UD address would land on the RDMA fields: ignored.
  ibv_wr_start(&qpx);
  ibv_wr_rdma_write(&qpx, 0x22, 0x2000);
  ibv_wr_set_ud_addr(&qpx, ah, 2, 3);
  ASSERT_EQ(ibv_wr_complete(&qpx), 0);
  EXPECT_EQ(last_post()[0].wr.wr.rdma.remote_addr, 0x2000u);
  EXPECT_EQ(last_post()[0].wr.wr.rdma.rkey, 0x22u);
}

TEST_F(ExApiTest, AbortDiscardsTheBatch) {
  ibv_wr_start(&qpx);
  ibv_wr_send(&qpx);
  ibv_wr_set_sge(&qpx, 1, 0x10, 4);
  ibv_wr_abort(&qpx);
  EXPECT_TRUE(fake.posts.empty());
  ibv_wr_start(&qpx);  // the critical section was left
  qpx.wr_id = 77;
  ibv_wr_send(&qpx);
  ASSERT_EQ(ibv_wr_complete(&qpx), 0);
  ASSERT_EQ(fake.posts.size(), 1u);
  ASSERT_EQ(last_post().size(), 1u);
  EXPECT_EQ(last_post()[0].wr.wr_id, 77u);
}

TEST_F(ExApiTest, EmptyBatchPostsNothing) {
  ibv_wr_start(&qpx);
  EXPECT_EQ(ibv_wr_complete(&qpx), 0);
  EXPECT_TRUE(fake.posts.empty());
}

TEST_F(ExApiTest, BuilderErrorsFailTheWholeBatch) {
  ibv_sge five[5] = {};
  char data[65] = {};
  struct Case {
    const char* what;
    int want;
    std::function<void()> build;
  };
  // A setter before any builder.
  ibv_wr_start(&qpx);
  ibv_wr_set_sge(&qpx, 1, 0x10, 4);
  ibv_wr_send(&qpx);
  EXPECT_EQ(ibv_wr_complete(&qpx), EINVAL);
  std::vector<Case> cases = {
      {"more SGEs than max_send_sge", ENOSPC,
       [&] {
         ibv_wr_send(&qpx);
         ibv_wr_set_sge_list(&qpx, 5, five);
       }},
      {"an SGE list at null", EINVAL,
       [&] {
         ibv_wr_send(&qpx);
         ibv_wr_set_sge_list(&qpx, 2, nullptr);
       }},
      {"more inline bytes than max_inline_data", ENOSPC,
       [&] {
         ibv_wr_send(&qpx);
         ibv_wr_set_inline_data(&qpx, data, 65);
       }},
      {"an inline list over max_inline_data", ENOSPC,
       [&] {
         ibv_wr_send(&qpx);
         ibv_data_buf l[] = {{data, 40}, {data, 40}};
         ibv_wr_set_inline_data_list(&qpx, 2, l);
       }},
      {"an inline length of SIZE_MAX", ENOSPC,
       [&] {
         ibv_wr_send(&qpx);
         ibv_data_buf l[] = {{data, 1}, {data, SIZE_MAX}};
         ibv_wr_set_inline_data_list(&qpx, 2, l);
       }},
      {"inline bytes at null", EINVAL,
       [&] {
         ibv_wr_send(&qpx);
         ibv_wr_set_inline_data(&qpx, nullptr, 8);
       }},
      {"an inline list at null", EINVAL,
       [&] {
         ibv_wr_send(&qpx);
         ibv_wr_set_inline_data_list(&qpx, 3, nullptr);
       }},
      {"more requests than max_send_wr", ENOSPC,
       [&] {
         for (int i = 0; i < 65; ++i) ibv_wr_send(&qpx);
       }},
  };
  for (const Case& c : cases) {
    ibv_wr_start(&qpx);
    ibv_wr_rdma_write(&qpx, 1, 0x10);  // a good request first: not posted either
    c.build();
    ibv_wr_send(&qpx);  // calls after the failure are ignored
    EXPECT_EQ(ibv_wr_complete(&qpx), c.want) << c.what;
    EXPECT_TRUE(fake.posts.empty()) << c.what;
  }
  // The QP is usable again.
  ibv_wr_start(&qpx);
  ibv_wr_send(&qpx);
  EXPECT_EQ(ibv_wr_complete(&qpx), 0);
  EXPECT_EQ(fake.posts.size(), 1u);
}

TEST_F(ExApiTest, OpcodeNotOfTheQpTypeIsRefused) {
  ibv_qp_ex uc{};
  uc.qp_base.qp_type = IBV_QPT_UC;
  init_qp_ex(&uc);  // every builder set: the type is checked at wr_complete
  ibv_wr_start(&uc);
  ibv_wr_rdma_write(&uc, 1, 0x10);
  ibv_wr_rdma_read(&uc, 1, 0x10);
  EXPECT_EQ(ibv_wr_complete(&uc), EINVAL);
  EXPECT_TRUE(fake.posts.empty());
  ibv_wr_start(&uc);
  ibv_wr_rdma_write(&uc, 1, 0x10);
  ibv_wr_send_inv(&uc, 1);
  EXPECT_EQ(ibv_wr_complete(&uc), 0);
  fini_qp_ex(&uc);
}

TEST_F(ExApiTest, PostSendErrorIsWrCompletesAnswer) {
  fake.post_rc = ENOMEM;
  fake.post_bad_index = 1;
  ibv_wr_start(&qpx);
  ibv_wr_send(&qpx);
  ibv_wr_send(&qpx);
  EXPECT_EQ(ibv_wr_complete(&qpx), ENOMEM);
  fake.post_rc = -EINVAL;  // a negative errno is turned into rdma-core's positive one
  ibv_wr_start(&qpx);
  ibv_wr_send(&qpx);
  EXPECT_EQ(ibv_wr_complete(&qpx), EINVAL);
  fake.post_rc = 0;
  ibv_wr_start(&qpx);
  ibv_wr_send(&qpx);
  EXPECT_EQ(ibv_wr_complete(&qpx), 0);
}

TEST_F(ExApiTest, OutsideABatchNothingHappens) {
  EXPECT_EQ(ibv_wr_complete(&qpx), EINVAL);  // no wr_start
  ibv_wr_send(&qpx);                         // ignored
  ibv_wr_abort(&qpx);                        // no-op
  ibv_wr_start(&qpx);
  EXPECT_EQ(ibv_wr_complete(&qpx), 0);
  EXPECT_TRUE(fake.posts.empty());

  ibv_qp_ex other{};  // not a QP of init_qp_ex (its pointers borrowed from ours)
  other.wr_start = qpx.wr_start;
  other.wr_complete = qpx.wr_complete;
  ibv_wr_start(&other);
  EXPECT_EQ(ibv_wr_complete(&other), EINVAL);
}

TEST_F(ExApiTest, BuildersFollowSendOpsFlags) {
  ibv_qp_ex q{};
  q.qp_base.qp_type = IBV_QPT_RC;
  init_qp_ex(&q, IBV_QP_EX_WITH_RDMA_WRITE, caps(8, 1, 0));
  EXPECT_NE(q.wr_rdma_write, nullptr);
  EXPECT_EQ(q.wr_send, nullptr);
  EXPECT_EQ(q.wr_rdma_read, nullptr);
  EXPECT_EQ(q.wr_atomic_cmp_swp, nullptr);
  EXPECT_EQ(q.wr_bind_mw, nullptr);
  EXPECT_NE(q.wr_set_sge, nullptr);
  EXPECT_NE(q.wr_set_inline_data_list, nullptr);
  EXPECT_NE(q.wr_set_ud_addr, nullptr);
  EXPECT_NE(q.wr_abort, nullptr);
  fini_qp_ex(&q);

  EXPECT_EQ(check_send_ops(IBV_QPT_RC, kAllOps), 0);
  EXPECT_EQ(check_send_ops(IBV_QPT_RC, IBV_QP_EX_WITH_BIND_MW), EOPNOTSUPP);
  EXPECT_EQ(check_send_ops(IBV_QPT_RC, IBV_QP_EX_WITH_ATOMIC_WRITE), EOPNOTSUPP);
  EXPECT_EQ(check_send_ops(IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_WRITE), 0);
  EXPECT_EQ(check_send_ops(IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ), EOPNOTSUPP);
  EXPECT_EQ(check_send_ops(IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM), 0);
  EXPECT_EQ(check_send_ops(IBV_QPT_UD, IBV_QP_EX_WITH_TSO), EOPNOTSUPP);
  EXPECT_EQ(check_send_ops(IBV_QPT_UD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD), EOPNOTSUPP);
  EXPECT_EQ(check_send_ops(IBV_QPT_XRC_SEND, IBV_QP_EX_WITH_SEND), EOPNOTSUPP);
}

TEST_F(ExApiTest, ACriticalSectionPerQp) {
  ibv_wr_start(&qpx);
  ibv_wr_send(&qpx);
  std::atomic<bool> entered{false};
  std::thread other([&] {
    ibv_wr_start(&qpx);  // waits for the first thread's wr_complete
    entered = true;
    ibv_wr_send(&qpx);
    ibv_wr_send(&qpx);
    EXPECT_EQ(ibv_wr_complete(&qpx), 0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(entered.load());
  ibv_wr_send(&qpx);
  EXPECT_EQ(ibv_wr_complete(&qpx), 0);
  other.join();
  EXPECT_TRUE(entered.load());
  ASSERT_EQ(fake.posts.size(), 2u);
  EXPECT_EQ(fake.posts[0].size(), 2u);  // neither batch took requests of the other
  EXPECT_EQ(fake.posts[1].size(), 2u);
  EXPECT_EQ(fake.overlaps.load(), 0);

  // Many threads, many batches: every request posted once, no two posts at once.
  fake.posts.clear();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        ibv_wr_start(&qpx);
        qpx.wr_id = static_cast<std::uint64_t>(t * 1000 + i);
        ibv_wr_send(&qpx);
        EXPECT_EQ(ibv_wr_complete(&qpx), 0);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(fake.posts.size(), 100u);
  EXPECT_EQ(fake.overlaps.load(), 0);
}

TEST_F(ExApiTest, WrStartAgainInsideItsSectionStartsOver) {
  ibv_wr_start(&qpx);
  ibv_wr_send(&qpx);
  ibv_wr_start(&qpx);  // rxe would spin on its own lock; here the open batch is dropped
  qpx.wr_id = 9;
  ibv_wr_send(&qpx);
  ASSERT_EQ(ibv_wr_complete(&qpx), 0);
  ASSERT_EQ(last_post().size(), 1u);
  EXPECT_EQ(last_post()[0].wr.wr_id, 9u);
}

TEST_F(ExApiTest, InitAtAReusedAddressStartsAfresh) {
  ibv_wr_start(&qpx);
  ibv_wr_send(&qpx);
  // The QP destroyed inside its section, a new one created at its address.
  fini_qp_ex(&qpx);
  init_qp_ex(&qpx, kAllOps, caps(64, 4, 64));
  ibv_wr_start(&qpx);  // would wait forever on the old section's lock
  ibv_wr_rdma_write(&qpx, 1, 2);
  ASSERT_EQ(ibv_wr_complete(&qpx), 0);
  ASSERT_EQ(last_post().size(), 1u);
  EXPECT_EQ(last_post()[0].wr.opcode, IBV_WR_RDMA_WRITE);
  fini_qp_ex(&qpx);
  EXPECT_EQ(ibv_wr_complete(&qpx), EINVAL);  // a destroyed QP's state is gone
  init_qp_ex(&qpx, kAllOps, caps(64, 4, 64));
}

// ---- the completion iterator -------------------------------------------------------------

ibv_wc wc_of(std::uint64_t id) {
  ibv_wc wc{};
  wc.wr_id = id;
  wc.status = id % 3 ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR;
  wc.opcode = id % 2 ? IBV_WC_RECV : IBV_WC_RDMA_WRITE;
  wc.vendor_err = static_cast<std::uint32_t>(id * 3);
  wc.byte_len = static_cast<std::uint32_t>(id * 10);
  wc.imm_data = htonl(static_cast<std::uint32_t>(id + 100));
  wc.qp_num = static_cast<std::uint32_t>(id + 200);
  wc.src_qp = static_cast<std::uint32_t>(id + 300);
  wc.wc_flags = IBV_WC_WITH_IMM | (id % 2 ? IBV_WC_GRH : 0);
  wc.slid = static_cast<std::uint16_t>(id + 400);
  wc.sl = static_cast<std::uint8_t>(id % 16);
  wc.dlid_path_bits = static_cast<std::uint8_t>(id % 8);
  return wc;
}

class CqExTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_fake = &fake;
    std::memset(&cqx, 0, sizeof cqx);
    init_cq_ex(&cqx, IBV_WC_STANDARD_FLAGS);
  }
  void TearDown() override {
    fini_cq_ex(&cqx);
    g_fake = nullptr;
  }
  void queue(std::uint64_t from, std::uint64_t to) {
    for (std::uint64_t i = from; i < to; ++i) fake.cq[ibv_cq_ex_to_cq(&cqx)].push_back(wc_of(i));
  }
  void expect_current(std::uint64_t id) {
    ibv_wc want = wc_of(id);
    EXPECT_EQ(cqx.wr_id, id);
    EXPECT_EQ(cqx.status, want.status) << id;
    EXPECT_EQ(ibv_wc_read_opcode(&cqx), want.opcode) << id;
    EXPECT_EQ(ibv_wc_read_vendor_err(&cqx), want.vendor_err) << id;
    EXPECT_EQ(ibv_wc_read_byte_len(&cqx), want.byte_len) << id;
    EXPECT_EQ(ibv_wc_read_imm_data(&cqx), want.imm_data) << id;
    EXPECT_EQ(ibv_wc_read_qp_num(&cqx), want.qp_num) << id;
    EXPECT_EQ(ibv_wc_read_src_qp(&cqx), want.src_qp) << id;
    EXPECT_EQ(ibv_wc_read_wc_flags(&cqx), want.wc_flags) << id;
    EXPECT_EQ(ibv_wc_read_slid(&cqx), want.slid) << id;
    EXPECT_EQ(ibv_wc_read_sl(&cqx), want.sl) << id;
    EXPECT_EQ(ibv_wc_read_dlid_path_bits(&cqx), want.dlid_path_bits) << id;
  }

  FakeBridge fake;
  ibv_cq_ex cqx;
  ibv_poll_cq_attr attr{};
};

TEST_F(CqExTest, EmptyCqIsEnoentWithoutEndPoll) {
  EXPECT_EQ(ibv_start_poll(&cqx, &attr), ENOENT);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(ibv_start_poll(&cqx, &attr), ENOENT);  // the section was left: no hang
  queue(1, 2);
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);
  expect_current(1);
  EXPECT_EQ(ibv_next_poll(&cqx), ENOENT);
  ibv_end_poll(&cqx);
}

TEST_F(CqExTest, IteratesEveryCompletionInOrderInSmallBatches) {
  queue(1, 41);
  std::uint64_t want = 1;
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);
  int rc = 0;
  do {
    expect_current(want++);
  } while ((rc = ibv_next_poll(&cqx)) == 0);
  EXPECT_EQ(rc, ENOENT);
  ibv_end_poll(&cqx);
  EXPECT_EQ(want, 41u);
  for (int max : fake.poll_max) {
    EXPECT_GT(max, 1);
    EXPECT_LE(max, 16);
  }
  EXPECT_LE(fake.poll_max.size(), 4u);  // 40 completions in batches, one more for the ENOENT
}

TEST_F(CqExTest, EndPollMidBatchKeepsTheRestForLater) {
  queue(1, 6);
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);  // one completion at a time, as pyverbs does
  expect_current(1);
  ibv_end_poll(&cqx);
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);
  expect_current(2);
  ibv_end_poll(&cqx);
  EXPECT_EQ(pending(ibv_cq_ex_to_cq(&cqx)), 3);
  queue(6, 8);
  // ibv_poll_cq on the same CQ: the iterator's held completions first, then the CQ's.
  ibv_wc out[8];
  int n = take_pending(ibv_cq_ex_to_cq(&cqx), 2, out);
  ASSERT_EQ(n, 2);
  EXPECT_EQ(out[0].wr_id, 3u);
  EXPECT_EQ(out[1].wr_id, 4u);
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);
  expect_current(5);
  ASSERT_EQ(ibv_next_poll(&cqx), 0);
  expect_current(6);
  ibv_end_poll(&cqx);
  // next_poll took 6 and 7 in one batch: 7 is held, for ibv_poll_cq as well.
  n = take_pending(ibv_cq_ex_to_cq(&cqx), 8, out);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(out[0].wr_id, 7u);
  EXPECT_EQ(ibv_start_poll(&cqx, &attr), ENOENT);
  EXPECT_EQ(pending(ibv_cq_ex_to_cq(&cqx)), 0);
  ibv_cq other{};
  EXPECT_EQ(take_pending(&other, 8, out), 0);  // not a CQ of init_cq_ex
  EXPECT_EQ(pending(&other), 0);
}

TEST_F(CqExTest, TakePendingNeverWaitsOnABatch) {
  queue(1, 4);
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);
  ibv_end_poll(&cqx);                         // 2 and 3 held
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);  // this thread inside the CQ's section
  std::atomic<int> moved{-1}, held{-1};
  std::thread other([&] {
    ibv_wc out[4];
    moved = take_pending(ibv_cq_ex_to_cq(&cqx), 4, out);
    held = pending(ibv_cq_ex_to_cq(&cqx));
  });
  other.join();  // would hang if they waited for ibv_end_poll
  EXPECT_EQ(moved.load(), 0);
  EXPECT_EQ(held.load(), 0);
  expect_current(2);
  ibv_end_poll(&cqx);
  EXPECT_EQ(pending(ibv_cq_ex_to_cq(&cqx)), 1);
}

TEST_F(CqExTest, PendingCompletionsDieWithTheirCq) {
  queue(1, 4);
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);
  ibv_end_poll(&cqx);  // 2 and 3 held
  fini_cq_ex(&cqx);
  init_cq_ex(&cqx, IBV_WC_STANDARD_FLAGS);  // a new CQ at the same address
  EXPECT_EQ(ibv_start_poll(&cqx, &attr), ENOENT);
  ibv_wc out[4];
  EXPECT_EQ(take_pending(ibv_cq_ex_to_cq(&cqx), 4, out), 0);
}

TEST_F(CqExTest, PollErrorIsStartPollsAnswer) {
  fake.poll_rc = -EIO;
  EXPECT_EQ(ibv_start_poll(&cqx, &attr), EIO);
  fake.poll_rc = 0;
  queue(1, 2);
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);
  fake.poll_rc = -EIO;
  EXPECT_EQ(ibv_next_poll(&cqx), EIO);
  ibv_end_poll(&cqx);
  fake.poll_rc = 0;
}

TEST_F(CqExTest, MisuseGetsEinval) {
  attr.comp_mask = 1;
  EXPECT_EQ(ibv_start_poll(&cqx, &attr), EINVAL);
  attr.comp_mask = 0;
  EXPECT_EQ(ibv_next_poll(&cqx), EINVAL);  // no start_poll
  ibv_end_poll(&cqx);                      // no-op
  queue(1, 2);
  ASSERT_EQ(ibv_start_poll(&cqx, nullptr), 0);  // a null attr is taken as empty
  ibv_end_poll(&cqx);
}

TEST_F(CqExTest, InvalidatedRkeyIsReadAsIs) {
  ibv_wc wc{};
  wc.wr_id = 1;
  wc.opcode = IBV_WC_RECV;
  wc.wc_flags = IBV_WC_WITH_INV;
  wc.invalidated_rkey = 0x12345678;
  fake.cq[ibv_cq_ex_to_cq(&cqx)].push_back(wc);
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);
  EXPECT_EQ(ibv_wc_read_invalidated_rkey(&cqx), 0x12345678u);
  ibv_end_poll(&cqx);
}

TEST_F(CqExTest, AccessorsFollowWcFlags) {
  ibv_cq_ex c{};
  init_cq_ex(&c, IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM);
  EXPECT_NE(c.read_opcode, nullptr);
  EXPECT_NE(c.read_vendor_err, nullptr);
  EXPECT_NE(c.read_wc_flags, nullptr);
  EXPECT_NE(c.read_byte_len, nullptr);
  EXPECT_NE(c.read_qp_num, nullptr);
  EXPECT_EQ(c.read_imm_data, nullptr);
  EXPECT_EQ(c.read_src_qp, nullptr);
  EXPECT_EQ(c.read_slid, nullptr);
  EXPECT_EQ(c.read_sl, nullptr);
  EXPECT_EQ(c.read_dlid_path_bits, nullptr);
  EXPECT_EQ(c.read_completion_ts, nullptr);
  EXPECT_EQ(c.read_completion_wallclock_ns, nullptr);
  fini_cq_ex(&c);
  ibv_cq_ex all{};
  init_cq_ex(&all);
  EXPECT_NE(all.read_dlid_path_bits, nullptr);
  EXPECT_NE(all.read_imm_data, nullptr);
  EXPECT_EQ(all.read_completion_ts, nullptr);
  fini_cq_ex(&all);
}

TEST_F(CqExTest, CreationAttributesCheckedAsRdmaCore) {
  ibv_cq_init_attr_ex a{};
  a.cqe = 16;
  a.wc_flags = IBV_WC_STANDARD_FLAGS;
  EXPECT_EQ(check_cq_attr(a), 0);
  a.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  EXPECT_EQ(check_cq_attr(a), EOPNOTSUPP);
  a.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  EXPECT_EQ(check_cq_attr(a), EOPNOTSUPP);
  a.wc_flags = IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_BYTE_LEN;
  EXPECT_EQ(check_cq_attr(a), EOPNOTSUPP);
  a.wc_flags = IBV_WC_EX_WITH_FLOW_TAG;
  EXPECT_EQ(check_cq_attr(a), EOPNOTSUPP);
  a.wc_flags = IBV_WC_EX_WITH_TM_INFO;
  EXPECT_EQ(check_cq_attr(a), EOPNOTSUPP);
  a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  EXPECT_EQ(check_cq_attr(a), 0);
  a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  EXPECT_EQ(check_cq_attr(a), EOPNOTSUPP);
  a.flags = 0;
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  EXPECT_EQ(check_cq_attr(a), EINVAL);
  a.comp_mask = 1u << 7;
  EXPECT_EQ(check_cq_attr(a), EOPNOTSUPP);
}

TEST_F(CqExTest, ACriticalSectionPerCq) {
  queue(1, 3);
  ASSERT_EQ(ibv_start_poll(&cqx, &attr), 0);
  std::atomic<bool> entered{false};
  std::uint64_t seen = 0;
  std::thread other([&] {
    int rc = ibv_start_poll(&cqx, &attr);
    entered = true;
    if (rc == 0) {
      seen = cqx.wr_id;
      ibv_end_poll(&cqx);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(entered.load());
  expect_current(1);
  ibv_end_poll(&cqx);
  other.join();
  EXPECT_EQ(seen, 2u);
}

}  // namespace
