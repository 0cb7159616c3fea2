/// @file
/// The private ABI between libibverbs 44 and its providers (IBVERBS_PRIVATE_34), declared here
/// because Debian installs no header for it. Layouts and names mirror rdma-core v44's
/// libibverbs/driver.h (struct verbs_device_ops, verbs_device, verbs_context_ops, verbs_qp,
/// verbs_cq, verbs_mr, verbs_srq) and libibverbs' exported provider functions
/// (libibverbs.map.in, IBVERBS_PRIVATE_34). A change there is a change of the private ABI
/// version, which Debian's libibverbs.so.1 names: verbs_register_driver_34.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace roce::verbs_compat::rdma {

/// ccan/list.h's list_node (driver.h keeps devices in a list).
struct ListNode {
  ListNode* next;
  ListNode* prev;
};

struct verbs_sysfs_dev;  // driver.h: a kernel device's sysfs view; null for ours
struct verbs_match_ent;
struct verbs_device;

/// driver.h: struct verbs_device_ops.
struct verbs_device_ops {
  const char* name;
  std::uint32_t match_min_abi_version;
  std::uint32_t match_max_abi_version;
  const verbs_match_ent* match_table;
  const verbs_device_ops** static_providers;
  bool (*match_device)(verbs_sysfs_dev* sysfs_dev);
  verbs_context* (*alloc_context)(ibv_device* device, int cmd_fd, void* private_data);
  verbs_context* (*import_context)(ibv_device* device, int cmd_fd);
  verbs_device* (*alloc_device)(verbs_sysfs_dev* sysfs_dev);
  void (*uninit_device)(verbs_device* device);
};

/// driver.h: struct verbs_device (atomic_int refcount: an int-sized C11 atomic).
struct verbs_device {
  ibv_device device;  // first
  const verbs_device_ops* ops;
  int refcount;
  ListNode entry;
  verbs_sysfs_dev* sysfs;
  std::uint64_t core_support;
};

/// driver.h: struct verbs_mr, struct verbs_srq, struct verbs_qp, struct verbs_cq.
enum ibv_mr_type { IBV_MR_TYPE_MR, IBV_MR_TYPE_NULL_MR, IBV_MR_TYPE_IMPORTED_MR, IBV_MR_TYPE_DMABUF_MR };
struct verbs_mr {
  ::ibv_mr ibv_mr;
  ibv_mr_type mr_type;
  int access;
};
struct verbs_xrcd;
struct verbs_srq {
  ibv_srq srq;
  ibv_srq_type srq_type;
  verbs_xrcd* xrcd;
  ibv_cq* cq;
  std::uint32_t srq_num;
};
enum verbs_qp_mask : std::uint32_t { VERBS_QP_XRCD = 1u << 0, VERBS_QP_EX = 1u << 1 };
struct verbs_qp {
  union {
    ibv_qp qp;
    ibv_qp_ex qp_ex;
  };
  std::uint32_t comp_mask;
  verbs_xrcd* xrcd;
};
struct verbs_cq {
  union {
    ibv_cq cq;
    ibv_cq_ex cq_ex;
  };
};

/// driver.h: struct verbs_context_ops (sorted by name, as there; every member a function
/// pointer, so unset ones are null and libibverbs keeps its dummies for them).
struct verbs_context_ops {
  int (*advise_mr)(ibv_pd*, ibv_advise_mr_advice, std::uint32_t, ibv_sge*, std::uint32_t);
  ibv_dm* (*alloc_dm)(ibv_context*, ibv_alloc_dm_attr*);
  ibv_mw* (*alloc_mw)(ibv_pd*, ibv_mw_type);
  ibv_mr* (*alloc_null_mr)(ibv_pd*);
  ibv_pd* (*alloc_parent_domain)(ibv_context*, ibv_parent_domain_init_attr*);
  ibv_pd* (*alloc_pd)(ibv_context*);
  ibv_td* (*alloc_td)(ibv_context*, ibv_td_init_attr*);
  void (*async_event)(ibv_context*, ibv_async_event*);
  int (*attach_counters_point_flow)(ibv_counters*, ibv_counter_attach_attr*, ibv_flow*);
  int (*attach_mcast)(ibv_qp*, const ibv_gid*, std::uint16_t);
  int (*bind_mw)(ibv_qp*, ibv_mw*, ibv_mw_bind*);
  int (*close_xrcd)(ibv_xrcd*);
  void (*cq_event)(ibv_cq*);
  ibv_ah* (*create_ah)(ibv_pd*, ibv_ah_attr*);
  ibv_counters* (*create_counters)(ibv_context*, ibv_counters_init_attr*);
  ibv_cq* (*create_cq)(ibv_context*, int, ibv_comp_channel*, int);
  ibv_cq_ex* (*create_cq_ex)(ibv_context*, ibv_cq_init_attr_ex*);
  ibv_flow* (*create_flow)(ibv_qp*, ibv_flow_attr*);
  ibv_flow_action* (*create_flow_action_esp)(ibv_context*, ibv_flow_action_esp_attr*);
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
  ibv_qp* (*create_qp_ex)(ibv_context*, ibv_qp_init_attr_ex*);
  ibv_rwq_ind_table* (*create_rwq_ind_table)(ibv_context*, ibv_rwq_ind_table_init_attr*);
  ibv_srq* (*create_srq)(ibv_pd*, ibv_srq_init_attr*);
  ibv_srq* (*create_srq_ex)(ibv_context*, ibv_srq_init_attr_ex*);
  ibv_wq* (*create_wq)(ibv_context*, ibv_wq_init_attr*);
  int (*dealloc_mw)(ibv_mw*);
  int (*dealloc_pd)(ibv_pd*);
  int (*dealloc_td)(ibv_td*);
  int (*dereg_mr)(verbs_mr*);
  int (*destroy_ah)(ibv_ah*);
  int (*destroy_counters)(ibv_counters*);
  int (*destroy_cq)(ibv_cq*);
  int (*destroy_flow)(ibv_flow*);
  int (*destroy_flow_action)(ibv_flow_action*);
  int (*destroy_qp)(ibv_qp*);
  int (*destroy_rwq_ind_table)(ibv_rwq_ind_table*);
  int (*destroy_srq)(ibv_srq*);
  int (*destroy_wq)(ibv_wq*);
  int (*detach_mcast)(ibv_qp*, const ibv_gid*, std::uint16_t);
  void (*free_context)(ibv_context*);
  int (*free_dm)(ibv_dm*);
  int (*get_srq_num)(ibv_srq*, std::uint32_t*);
  ibv_dm* (*import_dm)(ibv_context*, std::uint32_t);
  ibv_mr* (*import_mr)(ibv_pd*, std::uint32_t);
  ibv_pd* (*import_pd)(ibv_context*, std::uint32_t);
  int (*modify_cq)(ibv_cq*, ibv_modify_cq_attr*);
  int (*modify_flow_action_esp)(ibv_flow_action*, ibv_flow_action_esp_attr*);
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
  int (*modify_qp_rate_limit)(ibv_qp*, ibv_qp_rate_limit_attr*);
  int (*modify_srq)(ibv_srq*, ibv_srq_attr*, int);
  int (*modify_wq)(ibv_wq*, ibv_wq_attr*);
  ibv_qp* (*open_qp)(ibv_context*, ibv_qp_open_attr*);
  ibv_xrcd* (*open_xrcd)(ibv_context*, ibv_xrcd_init_attr*);
  int (*poll_cq)(ibv_cq*, int, ibv_wc*);
  int (*post_recv)(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);
  int (*post_send)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
  int (*post_srq_ops)(ibv_srq*, ibv_ops_wr*, ibv_ops_wr**);
  int (*post_srq_recv)(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**);
  int (*query_device_ex)(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*,
                         std::size_t);
  int (*query_ece)(ibv_qp*, ibv_ece*);
  int (*query_port)(ibv_context*, std::uint8_t, ibv_port_attr*);
  int (*query_qp)(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*);
  int (*query_qp_data_in_order)(ibv_qp*, ibv_wr_opcode, std::uint32_t);
  int (*query_rt_values)(ibv_context*, ibv_values_ex*);
  int (*query_srq)(ibv_srq*, ibv_srq_attr*);
  int (*read_counters)(ibv_counters*, std::uint64_t*, std::uint32_t, std::uint32_t);
  ibv_mr* (*reg_dm_mr)(ibv_pd*, ibv_dm*, std::uint64_t, std::size_t, unsigned int);
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, std::uint64_t, std::size_t, std::uint64_t, int, int);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, std::size_t, std::uint64_t, int);
  int (*req_notify_cq)(ibv_cq*, int);
  int (*rereg_mr)(verbs_mr*, int, ibv_pd*, void*, std::size_t, int);
  int (*resize_cq)(ibv_cq*, int);
  int (*set_ece)(ibv_qp*, ibv_ece*);
  void (*unimport_dm)(ibv_dm*);
  void (*unimport_mr)(ibv_mr*);
  void (*unimport_pd)(ibv_pd*);
};

/// rdma-core's ib_user_verbs.h: what the kernel writes to a completion channel's fd
/// (ibv_get_cq_event reads one) and to the async fd (ibv_get_async_event reads one).
struct comp_event_desc {
  std::uint64_t cq_handle;  ///< the ibv_cq* (the handle userspace gave at creation)
};
struct async_event_desc {
  std::uint64_t element;  ///< ibv_cq*, ibv_qp*, ibv_srq* or the port number
  std::uint32_t event_type;
  std::uint32_t reserved;
};

}  // namespace roce::verbs_compat::rdma

/// driver.h: what ibv_query_gid_type answers (IBVERBS_PRIVATE_34, declared for providers).
enum ibv_gid_type_sysfs { IBV_GID_TYPE_SYSFS_IB_ROCE_V1 = 0, IBV_GID_TYPE_SYSFS_ROCE_V2 = 1 };

// libibverbs' exports for providers (libibverbs.map.in, IBVERBS_PRIVATE_34).
extern "C" {
void* _verbs_init_and_alloc_context(ibv_device* device, int cmd_fd, std::size_t alloc_size,
                                    verbs_context* context_offset, std::uint32_t driver_id);
void verbs_uninit_context(verbs_context* context);
void verbs_set_ops(verbs_context* vctx, const roce::verbs_compat::rdma::verbs_context_ops* ops);
int ibv_query_gid_type(ibv_context* context, std::uint8_t port_num, unsigned int index,
                       ibv_gid_type_sysfs* type);
}
