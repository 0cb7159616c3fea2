// Generated from fpga/iface/ports.h (and dataplane/wire's opcode table and verdicts) by
// fpga_ports_svh; do not edit. fpga/rtl/ports.svh is checked in (Verilator reads it when
// CMake configures); the test fpga_ports_svh_current fails when it differs from a fresh one:
// build/bin/fpga_ports_svh fpga/rtl/ports.svh
`ifndef ROCE_FPGA_PORTS_SVH
`define ROCE_FPGA_PORTS_SVH

localparam int FLIT_BYTES = 64;

localparam int FLIT_DATA_W = 512;
localparam int FLIT_KEEP_W = 64;
localparam int FLIT_LAST_W = 1;
localparam int FLIT_W = 577;
typedef struct packed {
  logic [0:0] last;
  logic [63:0] keep;
  logic [511:0] data;
} flit_t;

localparam int WORK_REQUEST_WR_ID_W = 64;
localparam int WORK_REQUEST_QPN_W = 24;
localparam int WORK_REQUEST_OPCODE_W = 4;
localparam int WORK_REQUEST_FLAGS_W = 4;
localparam int WORK_REQUEST_LADDR_W = 64;
localparam int WORK_REQUEST_LKEY_W = 32;
localparam int WORK_REQUEST_RADDR_W = 64;
localparam int WORK_REQUEST_RKEY_W = 32;
localparam int WORK_REQUEST_LEN_W = 32;
localparam int WORK_REQUEST_IMM_W = 32;
localparam int WORK_REQUEST_W = 352;
typedef struct packed {
  logic [31:0] imm;
  logic [31:0] len;
  logic [31:0] rkey;
  logic [63:0] raddr;
  logic [31:0] lkey;
  logic [63:0] laddr;
  logic [3:0] flags;
  logic [3:0] opcode;
  logic [23:0] qpn;
  logic [63:0] wr_id;
} work_request_t;

localparam int COMPLETION_WR_ID_W = 64;
localparam int COMPLETION_QPN_W = 24;
localparam int COMPLETION_STATUS_W = 8;
localparam int COMPLETION_OPCODE_W = 8;
localparam int COMPLETION_BYTE_LEN_W = 32;
localparam int COMPLETION_IMM_W = 32;
localparam int COMPLETION_W = 168;
typedef struct packed {
  logic [31:0] imm;
  logic [31:0] byte_len;
  logic [7:0] opcode;
  logic [7:0] status;
  logic [23:0] qpn;
  logic [63:0] wr_id;
} completion_t;

localparam int RX_META_VERDICT_W = 5;
localparam int RX_META_OPCODE_W = 8;
localparam int RX_META_DEST_QP_W = 24;
localparam int RX_META_PSN_W = 24;
localparam int RX_META_ACK_REQ_W = 1;
localparam int RX_META_PAD_W = 2;
localparam int RX_META_IPV6_W = 1;
localparam int RX_META_HAS_VLAN_W = 1;
localparam int RX_META_VLAN_ID_W = 12;
localparam int RX_META_ECN_W = 2;
localparam int RX_META_L3_OFF_W = 8;
localparam int RX_META_BTH_OFF_W = 8;
localparam int RX_META_PAYLOAD_OFF_W = 16;
localparam int RX_META_PAYLOAD_LEN_W = 16;
localparam int RX_META_FRAME_LEN_W = 16;
localparam int RX_META_RETH_VA_W = 64;
localparam int RX_META_RETH_RKEY_W = 32;
localparam int RX_META_RETH_LEN_W = 32;
localparam int RX_META_AETH_SYNDROME_W = 8;
localparam int RX_META_AETH_MSN_W = 24;
localparam int RX_META_ICRC_W = 32;
localparam int RX_META_W = 336;
typedef struct packed {
  logic [31:0] icrc;
  logic [23:0] aeth_msn;
  logic [7:0] aeth_syndrome;
  logic [31:0] reth_len;
  logic [31:0] reth_rkey;
  logic [63:0] reth_va;
  logic [15:0] frame_len;
  logic [15:0] payload_len;
  logic [15:0] payload_off;
  logic [7:0] bth_off;
  logic [7:0] l3_off;
  logic [1:0] ecn;
  logic [11:0] vlan_id;
  logic [0:0] has_vlan;
  logic [0:0] ipv6;
  logic [1:0] pad;
  logic [0:0] ack_req;
  logic [23:0] psn;
  logic [23:0] dest_qp;
  logic [7:0] opcode;
  logic [4:0] verdict;
} rx_meta_t;

localparam int TX_META_GEN_ICRC_W = 1;
localparam int TX_META_FRAME_LEN_W = 16;
localparam int TX_META_W = 17;
typedef struct packed {
  logic [15:0] frame_len;
  logic [0:0] gen_icrc;
} tx_meta_t;

localparam int QP_STATE_STATE_W = 3;
localparam int QP_STATE_EPSN_W = 24;
localparam int QP_STATE_MSN_W = 24;
localparam int QP_STATE_NEXT_PSN_W = 24;
localparam int QP_STATE_OLDEST_UNACKED_W = 24;
localparam int QP_STATE_REMOTE_QPN_W = 24;
localparam int QP_STATE_RETRIES_LEFT_W = 3;
localparam int QP_STATE_W = 126;
typedef struct packed {
  logic [2:0] retries_left;
  logic [23:0] remote_qpn;
  logic [23:0] oldest_unacked;
  logic [23:0] next_psn;
  logic [23:0] msn;
  logic [23:0] epsn;
  logic [2:0] state;
} qp_state_t;

localparam int RX_QP_REQ_QPN_W = 24;
localparam int RX_QP_REQ_WRITE_W = 1;
localparam int RX_QP_REQ_EPSN_W = 24;
localparam int RX_QP_REQ_MSN_W = 24;
localparam int RX_QP_REQ_OLDEST_UNACKED_W = 24;
localparam int RX_QP_REQ_W = 97;
typedef struct packed {
  logic [23:0] oldest_unacked;
  logic [23:0] msn;
  logic [23:0] epsn;
  logic [0:0] write;
  logic [23:0] qpn;
} rx_qp_req_t;

localparam int TX_QP_REQ_QPN_W = 24;
localparam int TX_QP_REQ_WRITE_W = 1;
localparam int TX_QP_REQ_NEXT_PSN_W = 24;
localparam int TX_QP_REQ_W = 49;
typedef struct packed {
  logic [23:0] next_psn;
  logic [0:0] write;
  logic [23:0] qpn;
} tx_qp_req_t;

localparam int MR_REQ_KEY_W = 32;
localparam int MR_REQ_PD_W = 24;
localparam int MR_REQ_VADDR_W = 64;
localparam int MR_REQ_LEN_W = 32;
localparam int MR_REQ_ACCESS_W = 4;
localparam int MR_REQ_W = 156;
typedef struct packed {
  logic [3:0] access;
  logic [31:0] len;
  logic [63:0] vaddr;
  logic [23:0] pd;
  logic [31:0] key;
} mr_req_t;

localparam int MR_RSP_STATUS_W = 3;
localparam int MR_RSP_PADDR_W = 64;
localparam int MR_RSP_W = 67;
typedef struct packed {
  logic [63:0] paddr;
  logic [2:0] status;
} mr_rsp_t;

localparam int HOST_MR_WRITE_KEY_W = 32;
localparam int HOST_MR_WRITE_VALID_W = 1;
localparam int HOST_MR_WRITE_PD_W = 24;
localparam int HOST_MR_WRITE_VADDR_W = 64;
localparam int HOST_MR_WRITE_LEN_W = 64;
localparam int HOST_MR_WRITE_PADDR_W = 64;
localparam int HOST_MR_WRITE_ACCESS_W = 4;
localparam int HOST_MR_WRITE_W = 253;
typedef struct packed {
  logic [3:0] access;
  logic [63:0] paddr;
  logic [63:0] len;
  logic [63:0] vaddr;
  logic [23:0] pd;
  logic [0:0] valid;
  logic [31:0] key;
} host_mr_write_t;

localparam int QP_PATH_QPN_W = 24;
localparam int QP_PATH_PD_W = 24;
localparam int QP_PATH_DGID_W = 128;
localparam int QP_PATH_DMAC_W = 48;
localparam int QP_PATH_PATH_MTU_W = 3;
localparam int QP_PATH_TIMEOUT_W = 5;
localparam int QP_PATH_RETRY_CNT_W = 3;
localparam int QP_PATH_RNR_RETRY_W = 3;
localparam int QP_PATH_MIN_RNR_TIMER_W = 5;
localparam int QP_PATH_MAX_RD_ATOMIC_W = 5;
localparam int QP_PATH_ACCESS_W = 4;
localparam int QP_PATH_W = 252;
typedef struct packed {
  logic [3:0] access;
  logic [4:0] max_rd_atomic;
  logic [4:0] min_rnr_timer;
  logic [2:0] rnr_retry;
  logic [2:0] retry_cnt;
  logic [4:0] timeout;
  logic [2:0] path_mtu;
  logic [47:0] dmac;
  logic [127:0] dgid;
  logic [23:0] pd;
  logic [23:0] qpn;
} qp_path_t;

localparam int WR_RSP_STATUS_W = 3;
localparam int WR_RSP_ID_W = 32;
localparam int WR_RSP_W = 35;
typedef struct packed {
  logic [31:0] id;
  logic [2:0] status;
} wr_rsp_t;

localparam logic [2047:0] OP_VALID = {8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd1, 8'd1, 8'd1, 8'd1,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd1, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd1, 8'd1, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1,
    8'd0, 8'd0, 8'd1, 8'd1, 8'd0, 8'd0, 8'd0, 8'd0, 8'd1, 8'd1, 8'd0, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1,
    8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1};
localparam logic [2047:0] OP_HDR_LEN = {8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd32, 8'd16, 8'd16, 8'd12,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd28, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd24, 8'd20, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd32, 8'd28, 8'd16, 8'd12, 8'd12, 8'd28, 8'd16, 8'd12, 8'd16, 8'd12, 8'd12, 8'd12,
    8'd0, 8'd0, 8'd28, 8'd32, 8'd0, 8'd0, 8'd0, 8'd0, 8'd16, 8'd16, 8'd0, 8'd40, 8'd40, 8'd24, 8'd16, 8'd16,
    8'd16, 8'd12, 8'd16, 8'd28, 8'd32, 8'd28, 8'd16, 8'd12, 8'd12, 8'd28, 8'd16, 8'd12, 8'd16, 8'd12, 8'd12, 8'd12};
localparam logic [2047:0] OP_PAYLOAD = {8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd1, 8'd1, 8'd1, 8'd1,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd1, 8'd1, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1,
    8'd0, 8'd0, 8'd1, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd1, 8'd1, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd1,
    8'd1, 8'd1, 8'd1, 8'd0, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1, 8'd1};
localparam logic [2047:0] OP_FIXED_PAYLOAD = {8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd8, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0};
localparam logic [2047:0] OP_RETH_OFF = {8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd12, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd12, 8'd12, 8'd0, 8'd0, 8'd0, 8'd12, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd12, 8'd16, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd12, 8'd12, 8'd12, 8'd0, 8'd0, 8'd0, 8'd12, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0};
localparam logic [2047:0] OP_AETH_OFF = {8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0,
    8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd12, 8'd12, 8'd12,
    8'd12, 8'd0, 8'd12, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0, 8'd0};

localparam logic [4:0] V_OK = 5'd0;
localparam logic [4:0] V_TRUNCATED = 5'd1;
localparam logic [4:0] V_NOT_IP = 5'd2;
localparam logic [4:0] V_BAD_IP_VERSION = 5'd3;
localparam logic [4:0] V_IP_OPTIONS = 5'd4;
localparam logic [4:0] V_BAD_IP_CHECKSUM = 5'd5;
localparam logic [4:0] V_BAD_IP_LENGTH = 5'd6;
localparam logic [4:0] V_IP_FRAGMENT = 5'd7;
localparam logic [4:0] V_NOT_UDP = 5'd8;
localparam logic [4:0] V_BAD_UDP_LENGTH = 5'd9;
localparam logic [4:0] V_WRONG_UDP_PORT = 5'd10;
localparam logic [4:0] V_BAD_TVER = 5'd11;
localparam logic [4:0] V_UNKNOWN_OPCODE = 5'd12;
localparam logic [4:0] V_BAD_TRANSPORT_LENGTH = 5'd13;
localparam logic [4:0] V_BAD_PAD_COUNT = 5'd14;
localparam logic [4:0] V_BAD_PAYLOAD_LENGTH = 5'd15;
localparam logic [4:0] V_BAD_ICRC = 5'd16;

localparam int PORT_HOST2DEV_WQ_W = 352;
localparam int PORT_DEV2HOST_CQ_W = 168;
localparam int PORT_NET2DEV_RX_W = 577;
localparam int PORT_DEV2NET_TX_W = 577;
localparam int PORT_HOST2DEV_TX_W = 577;
localparam int PORT_DEV2HOST_RX_W = 577;
localparam int PORT_DEV2HOST_RX_META_W = 336;
localparam int PORT_HOST2DEV_TX_META_W = 17;
localparam int PORT_RX2QP_REQ_W = 97;
localparam int PORT_QP2RX_RSP_W = 127;
localparam int PORT_TX2QP_REQ_W = 49;
localparam int PORT_QP2TX_RSP_W = 127;
localparam int PORT_HOST2QP_WR_W = 151;
localparam int PORT_HOST2QP_PATH_W = 252;
localparam int PORT_DEV2HOST_WR_RSP_W = 35;
localparam int PORT_DEV2MR_REQ_W = 156;
localparam int PORT_MR2DEV_RSP_W = 67;
localparam int PORT_HOST2MR_WR_W = 253;
localparam int PORT_COUNTERS_W = 1152;
localparam int DEV_COUNTERS = 18;
localparam int CNT_RX_PKGS = 0;
localparam int CNT_TX_PKGS = 1;
localparam int CNT_ARP_RX_PKGS = 2;
localparam int CNT_ARP_TX_PKGS = 3;
localparam int CNT_ICMP_RX_PKGS = 4;
localparam int CNT_ICMP_TX_PKGS = 5;
localparam int CNT_ROCE_RX_PKGS = 6;
localparam int CNT_ROCE_TX_PKGS = 7;
localparam int CNT_IBV_RX_PKGS = 8;
localparam int CNT_IBV_TX_PKGS = 9;
localparam int CNT_PSN_DROP_CNT = 10;
localparam int CNT_RETRANS_CNT = 11;
localparam int CNT_ICRC_DROP_CNT = 12;
localparam int CNT_PARSE_DROP_CNT = 13;
localparam int CNT_ICRC_GEN_CNT = 14;
localparam int CNT_ICRC_DIFFER_CNT = 15;
localparam int CNT_WQ_IN = 16;
localparam int CNT_CQ_OUT = 17;

`endif
