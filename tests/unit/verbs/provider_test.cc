// The libibverbs provider's control path through libibverbs' own entry points (Debian's
// libibverbs.so.1, libroce-verbs.so preloaded by CTest): the device list, the queries a
// program makes before it moves data (device, port, GIDs, P_Keys), and the objects it makes
// (PD, MR, completion channel, CQ, QP, SRQ), with rdma-core's answers to wrong arguments.
// The appliance runs in-process on the server end of a net_memif link that nobody joins.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

// libibverbs exports it in IBVERBS_PRIVATE_34 (rdma-core's driver.h declares it); ibv_devinfo
// calls it.
enum ibv_gid_type_sysfs { IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0, IBV_GID_TYPE_SYSFS_ROCE_V2 = 1 };
extern "C" int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                  ibv_gid_type_sysfs* type);

namespace {

class Provider : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        (std::filesystem::temp_directory_path() / ("roce-verbs-unit-" + std::to_string(::getpid())))
            .string();
    ::mkdir(dir_.c_str(), 0700);
    const std::string link = "--pmd memif-server --iface " + dir_ +
                             "/memif.sock --ip 192.0.2.91 --mac 02:00:00:00:00:91";
    ::setenv("ROCE_LINK", link.c_str(), 1);
    ::setenv("ROCE_DEVICE", "roce_unit", 1);
    ::setenv("ROCE_LINK_WAIT", "0", 1);  // nobody joins the link
  }
  static void TearDownTestSuite() {
    ::unlink((dir_ + "/memif.sock").c_str());
    ::rmdir(dir_.c_str());
  }
  void SetUp() override {
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_NE(list_, nullptr) << std::strerror(errno);
    for (int i = 0; i < n; ++i) {
      if (std::string(ibv_get_device_name(list_[i])) == "roce_unit") dev_ = list_[i];
    }
    ASSERT_NE(dev_, nullptr) << "roce_unit not listed";
    ctx_ = ibv_open_device(dev_);
    ASSERT_NE(ctx_, nullptr) << std::strerror(errno);
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    if (list_ != nullptr) ibv_free_device_list(list_);
  }
  static inline std::string dir_;
  ibv_device** list_ = nullptr;
  ibv_device* dev_ = nullptr;
  ibv_context* ctx_ = nullptr;
};

TEST_F(Provider, ListsTheDeviceWithItsGuid) {
  EXPECT_EQ(dev_->node_type, IBV_NODE_CA);
  EXPECT_EQ(dev_->transport_type, IBV_TRANSPORT_IB);
  // EUI-64 of 02:00:00:00:00:91, the universal/local bit flipped
  EXPECT_EQ(be64toh(ibv_get_device_guid(dev_)), 0x000000fffe000091ull);
}

TEST_F(Provider, QueriesDeviceAndPort) {
  ibv_device_attr_ex a{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &a), 0);
  EXPECT_EQ(a.orig_attr.phys_port_cnt, 1);
  EXPECT_GE(a.orig_attr.max_qp_wr, 1024);
  EXPECT_EQ(be64toh(a.orig_attr.node_guid), 0x000000fffe000091ull);
  ibv_device_attr d{};
  ASSERT_EQ(ibv_query_device(ctx_, &d), 0);
  EXPECT_EQ(d.max_qp, a.orig_attr.max_qp);

  ibv_port_attr p{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &p), 0);
  EXPECT_EQ(p.state, IBV_PORT_DOWN);      // nobody on the other end of the link
  EXPECT_EQ(p.active_mtu, IBV_MTU_1024);  // a 1500-byte link less RoCE's headers
  EXPECT_EQ(p.max_mtu, IBV_MTU_4096);     // as rxe: modify_qp takes path MTUs up to it
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_GE(p.gid_tbl_len, 1);
  EXPECT_EQ(p.pkey_tbl_len, 1);
  EXPECT_EQ(ibv_query_port(ctx_, 2, &p), EINVAL);
}

TEST_F(Provider, GidTableHoldsTheRoceV2Address) {
  ibv_gid g{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &g), 0);
  const std::uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 91};
  EXPECT_EQ(std::memcmp(g.raw, want, 16), 0);
  ibv_gid_type_sysfs t;
  ASSERT_EQ(ibv_query_gid_type(ctx_, 1, 0, &t), 0);
  EXPECT_EQ(t, IBV_GID_TYPE_SYSFS_ROCE_V2);
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 1, &g), 0);  // an empty entry: the zero GID
  EXPECT_EQ(std::memcmp(g.raw, std::vector<std::uint8_t>(16).data(), 16), 0);

  ibv_gid_entry e{};
  ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(e.port_num, 1u);
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 1, &e, 0), ENODATA);
  ibv_gid_entry table[4];
  EXPECT_EQ(ibv_query_gid_table(ctx_, table, 4, 0), 1);
  EXPECT_EQ(std::memcmp(table[0].gid.raw, want, 16), 0);
}

TEST_F(Provider, OnePkey) {
  __be16 k = 0;
  ASSERT_EQ(ibv_query_pkey(ctx_, 1, 0, &k), 0);
  EXPECT_EQ(be16toh(k), 0xffff);
  EXPECT_EQ(ibv_query_pkey(ctx_, 1, 1, &k), -1);
  EXPECT_EQ(ibv_get_pkey_index(ctx_, 1, htobe16(0xffff)), 0);
  EXPECT_LT(ibv_get_pkey_index(ctx_, 1, htobe16(0x1234)), 0);
}

// The context's command fd is a character device a program can dup (rdma-core's
// tests/test_shared_pd.py does, then skips on EOPNOTSUPP: no import, as rxe); ibv_import_device
// of a file that is no character device is EINVAL, as libibverbs answers.
TEST_F(Provider, CommandFdCanBeDupedAndImportIsNotSupported) {
  ASSERT_GE(ctx_->cmd_fd, 0);
  const int fd = ::dup(ctx_->cmd_fd);
  ASSERT_GE(fd, 0);
  errno = 0;
  EXPECT_EQ(ibv_import_device(fd), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ::close(fd);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  errno = 0;
  EXPECT_EQ(ibv_import_device(p[0]), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ::close(p[0]);
  ::close(p[1]);
}

TEST_F(Provider, MemoryRegistrations) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  std::vector<char> mem(8192);
  ibv_mr* mr =
      ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(mr->addr, mem.data());
  EXPECT_EQ(mr->length, mem.size());
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            0);
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, mem.data() + 4096, 4096, 0),
            0);
  EXPECT_EQ(mr->addr, mem.data() + 4096);
  ibv_mr* iova = ibv_reg_mr_iova2(pd, mem.data(), 4096, 0x10000, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(iova, nullptr) << std::strerror(errno);
  // remote write without local write: IBA's rule, the kernel's EINVAL
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, mem.data(), 64, IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, mem.data(), 64, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);  // MRs still on it
  EXPECT_EQ(ibv_dereg_mr(iova), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Provider, CompletionChannelIsPollable) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  pollfd p{ch->fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);  // nothing yet
  ibv_cq* cq = ibv_create_cq(ctx_, 16, this, ch, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(cq->channel, ch);
  EXPECT_EQ(cq->cq_context, this);
  EXPECT_EQ(ibv_req_notify_cq(cq, 0), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);  // the CQ uses it
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
  EXPECT_EQ(ibv_create_cq(ctx_, 16, nullptr, nullptr, 5), nullptr);  // no comp vector 5
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(Provider, QueuePairsAndSrq) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ibv_cq* cq = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.cap = {16, 16, 2, 2, 64};
  ia.qp_type = IBV_QPT_RC;
  ibv_qp* qp = ibv_create_qp(pd, &ia);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  EXPECT_GE(ia.cap.max_inline_data, 64u);

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ASSERT_EQ(
      ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
      0);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  // RTR without a GRH: RoCE addresses by GID (EINVAL, as the kernel answers)
  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RTR;
  r.path_mtu = IBV_MTU_1024;
  r.dest_qp_num = 0x11;
  r.rq_psn = 0;
  r.max_dest_rd_atomic = 1;
  r.min_rnr_timer = 12;
  r.ah_attr.port_num = 1;
  constexpr int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(ibv_modify_qp(qp, &r, rtr), EINVAL);
  r.ah_attr.is_global = 1;
  r.ah_attr.grh.sgid_index = 3;  // an empty GID entry
  EXPECT_EQ(ibv_modify_qp(qp, &r, rtr), EINVAL);

  // a list with a bad request: refused there, with bad_wr pointing at it
  std::vector<char> rmem(256);
  ibv_mr* rmr = ibv_reg_mr(pd, rmem.data(), rmem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(rmr, nullptr);
  ibv_sge rsge{reinterpret_cast<std::uint64_t>(rmem.data()), 256, rmr->lkey};
  ibv_recv_wr second{};
  second.wr_id = 2;
  second.num_sge = -1;
  ibv_recv_wr first{};
  first.wr_id = 1;
  first.sg_list = &rsge;
  first.num_sge = 1;
  first.next = &second;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp, &first, &rbad), EINVAL);
  EXPECT_EQ(rbad, &second);

  ibv_qp_attr q{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_CAP, &qi), 0);
  EXPECT_EQ(q.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(q.qp_access_flags, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(q.cap.max_send_wr, 16u);
  EXPECT_EQ(qi.qp_type, IBV_QPT_RC);
  EXPECT_EQ(qi.send_cq, cq);

  ia.qp_type = IBV_QPT_XRC_SEND;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd, &ia), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);

  ibv_srq_init_attr si{};
  si.attr.max_wr = 32;
  si.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &si);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  ibv_srq_attr sa{};
  sa.srq_limit = 4;
  EXPECT_EQ(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &sa), 0);
  EXPECT_EQ(sa.max_wr, 32u);
  EXPECT_EQ(sa.srq_limit, 4u);
  ibv_qp_init_attr ua{};
  ua.send_cq = ua.recv_cq = cq;
  ua.srq = srq;
  ua.cap = {8, 0, 1, 0, 0};
  ua.qp_type = IBV_QPT_UD;
  ibv_qp* ud = ibv_create_qp(pd, &ua);
  ASSERT_NE(ud, nullptr) << std::strerror(errno);
  ibv_recv_wr rw{}, *bad = nullptr;
  EXPECT_EQ(ibv_post_recv(ud, &rw, &bad), EINVAL);  // its receives go to the SRQ
  EXPECT_EQ(bad, &rw);

  EXPECT_EQ(ibv_destroy_qp(ud), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  // RTR with path MTU 4096 on the 1500-byte link: taken up to max_mtu, as rxe; the engine
  // sends what the link carries. The port's own GID: resolved at once (self-delivery).
  r.ah_attr.grh.sgid_index = 0;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &r.ah_attr.grh.dgid), 0);
  r.path_mtu = IBV_MTU_4096;
  EXPECT_EQ(ibv_modify_qp(qp, &r, rtr), 0) << std::strerror(errno);
  ASSERT_EQ(ibv_query_qp(qp, &q, IBV_QP_PATH_MTU, &qi), 0);
  EXPECT_EQ(q.path_mtu, IBV_MTU_4096);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dereg_mr(rmr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Provider, ExtendedQpAndCq) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 32;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &ca);
  ASSERT_NE(cq, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_cq_ex_to_cq(cq)->context, ctx_);
  ibv_qp_init_attr_ex qa{};
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.pd = pd;
  qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cq);
  qa.cap = {16, 16, 1, 1, 0};
  qa.qp_type = IBV_QPT_RC;
  qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &qa);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(qp);
  ASSERT_NE(qx, nullptr);
  // As rdma-core's providers: the builders asked for, no others; the CQ's read_* likewise.
  EXPECT_NE(qx->wr_rdma_write, nullptr);
  EXPECT_NE(qx->wr_send, nullptr);
  EXPECT_EQ(qx->wr_rdma_read, nullptr);
  EXPECT_EQ(qx->wr_atomic_fetch_add, nullptr);
  EXPECT_NE(cq->read_byte_len, nullptr);
  EXPECT_NE(cq->read_qp_num, nullptr);
  EXPECT_EQ(cq->read_imm_data, nullptr);
  EXPECT_EQ(cq->read_src_qp, nullptr);
  // The QP's caps hold at wr_complete: two SGEs where it has one is ENOSPC, nothing posted.
  char buf[64];
  ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  const ibv_sge two[2] = {{reinterpret_cast<uintptr_t>(buf), 8, mr->lkey},
                          {reinterpret_cast<uintptr_t>(buf + 8), 8, mr->lkey}};
  ibv_wr_start(qx);
  qx->wr_id = 1;
  ibv_wr_send(qx);
  ibv_wr_set_sge_list(qx, 2, two);
  EXPECT_EQ(ibv_wr_complete(qx), ENOSPC);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  qa.send_ops_flags = IBV_QP_EX_WITH_BIND_MW;  // no memory windows
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(ctx_, &qa), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  qa.qp_type = IBV_QPT_UC;  // no READ on UC (rxe answers so too)
  qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(ctx_, &qa), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_qp_init_attr ia{};  // the classic call: no ibv_qp_ex
  ia.send_cq = ia.recv_cq = ibv_cq_ex_to_cq(cq);
  ia.cap = {4, 4, 1, 1, 0};
  ia.qp_type = IBV_QPT_UC;
  ibv_qp* plain = ibv_create_qp(pd, &ia);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(ibv_qp_to_qp_ex(plain), nullptr);
  EXPECT_EQ(ibv_destroy_qp(plain), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Provider, LimitsAreKept) {
  ibv_device_attr d{};
  ASSERT_EQ(ibv_query_device(ctx_, &d), 0);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, d.max_cqe + 1, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ibv_cq* cq = ibv_create_cq(ctx_, 8, nullptr, nullptr, 0);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.cap = {static_cast<uint32_t>(d.max_qp_wr) + 1, 1, 1, 1, 0};
  ia.qp_type = IBV_QPT_RC;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd, &ia), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ia.cap = {1, 1, static_cast<uint32_t>(d.max_sge) + 1, 1, 0};
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd, &ia), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// A work request's SGE count beyond what its queue was made for is refused before its list
// is read (rdma-core: EINVAL, *bad_wr that request; those before it posted): a count of 100000
// or INT_MAX with a one-entry list must neither read past it nor size anything by it.
TEST_F(Provider, SgeCountsBeyondTheQueueAreRefused) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ibv_cq* cq = ibv_create_cq(ctx_, 64, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.cap = {8, 8, 2, 2, 0};
  ia.qp_type = IBV_QPT_RC;
  ibv_qp* qp = ibv_create_qp(pd, &ia);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  ASSERT_EQ(
      ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
      0);
  std::vector<char> mem(4096);
  ibv_mr* mr = ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge sge[3];
  for (int i = 0; i < 3; ++i)
    sge[i] = {reinterpret_cast<std::uint64_t>(mem.data()) + 64u * i, 64, mr->lkey};
  for (const int count : {3, 100000, INT_MAX, -5}) {
    SCOPED_TRACE(count);
    ibv_recv_wr second{};
    second.wr_id = 2;
    second.sg_list = count == 3 ? sge : &sge[2];
    second.num_sge = count;
    ibv_recv_wr first{};
    first.wr_id = 1;
    first.sg_list = sge;
    first.num_sge = 2;
    first.next = &second;
    ibv_recv_wr* rbad = nullptr;
    EXPECT_EQ(ibv_post_recv(qp, &first, &rbad), EINVAL);
    EXPECT_EQ(rbad, &second);
    ibv_send_wr sw{};
    sw.opcode = IBV_WR_SEND;
    sw.sg_list = count == 3 ? sge : &sge[2];
    sw.num_sge = count;
    ibv_send_wr* sbad = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &sw, &sbad), EINVAL);
    EXPECT_EQ(sbad, &sw);
  }
  ibv_srq_init_attr si{};
  si.attr.max_wr = 8;
  si.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &si);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  for (const int count : {2, 100000, INT_MAX, -1}) {
    SCOPED_TRACE(count);
    ibv_recv_wr second{};
    second.sg_list = count == 2 ? sge : &sge[2];
    second.num_sge = count;
    ibv_recv_wr first{};
    first.sg_list = sge;
    first.num_sge = 1;
    first.next = &second;
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_srq_recv(srq, &first, &bad), EINVAL);
    EXPECT_EQ(bad, &second);
  }
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// A completion event of a CQ the program destroys without reading it leaves the channel with
// the CQ (the kernel drops a destroyed object's unread events): the channel, shared with
// another CQ, must not hand the freed CQ out. An event read and not acknowledged holds
// ibv_destroy_cq until ibv_ack_cq_events (ibv_cmd_destroy_cq waits for the acks).
TEST_F(Provider, DestroyedCqLeavesItsEventsBehind) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  ibv_cq* a = ibv_create_cq(ctx_, 16, nullptr, ch, 0);
  ibv_cq* b = ibv_create_cq(ctx_, 16, nullptr, ch, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<char> mem(256);
  ibv_mr* mr = ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  // A QP whose receive is flushed (to ERR): one completion on `cq`, its event in the channel.
  const auto flushed_qp = [&](ibv_cq* cq) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.cap = {4, 4, 1, 1, 0};
    ia.qp_type = IBV_QPT_RC;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    EXPECT_NE(qp, nullptr);
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_INIT;
    at.port_num = 1;
    at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    EXPECT_EQ(ibv_modify_qp(qp, &at,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    ibv_sge sge{reinterpret_cast<std::uint64_t>(mem.data()), 64, mr->lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
    EXPECT_EQ(ibv_req_notify_cq(cq, 0), 0);
    at.qp_state = IBV_QPS_ERR;
    EXPECT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE), 0);
    pollfd p{ch->fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 2000), 1) << "no completion event";
    return qp;
  };
  ibv_qp* qa = flushed_qp(a);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(a, 1, &wc), 1);
  EXPECT_EQ(ibv_destroy_qp(qa), 0);
  EXPECT_EQ(ibv_destroy_cq(a), 0);  // its event unread
  pollfd p{ch->fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 200), 0) << "the destroyed CQ's event is still in the channel";

  // B's event read and not acknowledged: B's destroy waits for the ack.
  ibv_qp* qb = flushed_qp(b);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, b);
  EXPECT_EQ(ibv_poll_cq(b, 1, &wc), 1);
  EXPECT_EQ(ibv_destroy_qp(qb), 0);
  std::atomic<bool> destroyed{false};
  std::thread t([&] {
    EXPECT_EQ(ibv_destroy_cq(b), 0);
    destroyed = true;
  });
  ::usleep(200'000);
  EXPECT_FALSE(destroyed.load()) << "ibv_destroy_cq did not wait for the event's ack";
  ibv_ack_cq_events(b, 1);
  t.join();
  EXPECT_TRUE(destroyed.load());
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// A child the program forks shares nothing of the provider but memory: its exit() (the
// provider's exit handler) must neither join the parent's progress thread (absent in the
// child) nor close the inherited port and clean the EAL up under the parent, whose progress
// thread keeps polling that port.
TEST_F(Provider, ForkedChildExitLeavesTheParentsPortAlone) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) std::exit(0);
  int status = 0;
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {  // 5 s
    gone = ::waitpid(child, &status, WNOHANG) == child;
    if (!gone) ::usleep(100'000);
  }
  if (!gone) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  ASSERT_TRUE(gone) << "the child's exit hung";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ::usleep(300'000);  // the parent's progress thread polls the port meanwhile
  ibv_port_attr pa{};
  EXPECT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  ibv_cq* cq = ibv_create_cq(ctx_, 8, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// Async events of a QP and a CQ the program destroys without reading them leave the async fd
// with their objects: a CQ overrun (IBA 11.6.2) reports IBV_EVENT_CQ_ERR for the CQ and
// IBV_EVENT_QP_FATAL for a QP completing into it.
TEST_F(Provider, DestroyedObjectsLeaveTheirAsyncEventsBehind) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ibv_cq* cq = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  std::vector<char> mem(4096);
  ibv_mr* mr = ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  const auto init_qp = [&](std::uint32_t recvs) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.cap = {4, recvs, 1, 1, 0};
    ia.qp_type = IBV_QPT_RC;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    EXPECT_NE(qp, nullptr);
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_INIT;
    at.port_num = 1;
    at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    EXPECT_EQ(ibv_modify_qp(qp, &at,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    return qp;
  };
  const std::uint32_t n = static_cast<std::uint32_t>(cq->cqe) + 4;
  ibv_qp* a = init_qp(n);
  ibv_qp* b = init_qp(1);  // completes into the same CQ: fatal when it overruns
  ibv_sge sge{reinterpret_cast<std::uint64_t>(mem.data()), 64, mr->lkey};
  for (std::uint32_t i = 0; i < n; ++i) {
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_recv(a, &wr, &bad), 0);
  }
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(a, &at, IBV_QP_STATE), 0);  // more flushes than the CQ holds
  pollfd p{ctx_->async_fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1) << "no async event for the overrun";
  ::usleep(100'000);  // both events written
  EXPECT_EQ(ibv_destroy_qp(a), 0);
  EXPECT_EQ(ibv_destroy_qp(b), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(::poll(&p, 1, 100), 0) << "events of destroyed objects are still in the async fd";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Provider, AsyncFdIsPollable) {
  pollfd p{ctx_->async_fd, POLLIN, 0};
  EXPECT_GE(ctx_->async_fd, 0);
  EXPECT_EQ(::poll(&p, 1, 0), 0);
}

}  // namespace
