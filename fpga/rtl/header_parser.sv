// The RoCEv2 header parser: BTH, RETH, AETH and the layers below, wire::parse_frame's checks in
// its order (the same machine as fpga/hls/parser_kernel.cc). It watches a 512-bit AXI4-Stream:
// the first two flits (a 128-byte header window) are kept while icrc_unit runs over every flit;
// one clock after a frame's last flit, `meta` (rx_meta_t, the dev2host_rx_meta port of
// fpga/iface/ports.h) carries the verdict and the parsed fields for one clock. The opcode
// table and the verdict numbers come from ports.svh, generated from the software's tables.
`include "ports.svh"

module header_parser #(
    parameter logic [15:0] UDP_PORT = 16'd4791
) (
    input  logic                   clk,
    input  logic                   rst_n,
    input  logic                   verify_icrc,
    input  logic                   verify_ip_checksum,
    input  logic                   s_valid,
    output logic                   s_ready,
    input  logic [FLIT_DATA_W-1:0] s_data,
    input  logic [FLIT_KEEP_W-1:0] s_keep,
    input  logic                   s_last,
    output logic                   meta_valid,
    output rx_meta_t               meta,
    output logic [63:0]            cnt_frames,
    output logic [63:0]            cnt_drops
);
  // ---- the ICRC, alongside ----
  logic icrc_res_valid, icrc_ok;
  logic [31:0] icrc_computed, icrc_received;
  /* verilator lint_off PINCONNECTEMPTY */
  icrc_unit u_icrc (
      .clk(clk), .rst_n(rst_n), .insert(1'b0),
      .s_valid(s_valid), .s_ready(s_ready), .s_data(s_data), .s_keep(s_keep), .s_last(s_last),
      .m_valid(), .m_ready(1'b1), .m_data(), .m_keep(), .m_last(),
      .res_valid(icrc_res_valid), .res_ok(icrc_ok), .res_computed(icrc_computed),
      .res_received(icrc_received), .cnt_frames(), .cnt_icrc_drop(), .cnt_icrc_gen());
  /* verilator lint_on PINCONNECTEMPTY */

  // ---- stage 1: the header window and the frame's length ----
  logic [1023:0] win_q, win_s1;
  logic [31:0]   n_q, n_s1;
  logic [1:0]    fidx_q;  // flit of the frame: 0, 1, 2 = beyond the window
  logic          s1_valid;
  logic [511:0]  kept;
  logic [31:0]   nbytes;
  always_comb begin
    nbytes = 32'd0;
    for (int i = 0; i < FLIT_BYTES; i++) begin
      kept[8*i+:8] = s_keep[i] ? s_data[8*i+:8] : 8'h00;
      nbytes = nbytes + {31'd0, s_keep[i]};
    end
  end
  logic [1023:0] win_next;
  always_comb begin
    win_next = win_q;
    if (fidx_q == 2'd0) win_next = {512'd0, kept};
    else if (fidx_q == 2'd1) win_next[1023:512] = kept;
  end
  always_ff @(posedge clk) begin
    if (!rst_n) begin
      win_q <= '0;
      n_q <= '0;
      fidx_q <= '0;
      s1_valid <= 1'b0;
    end else begin
      s1_valid <= 1'b0;
      if (s_valid && s_ready) begin
        if (s_last) begin
          win_s1 <= win_next;
          n_s1 <= n_q + nbytes;
          s1_valid <= 1'b1;
          win_q <= '0;
          n_q <= '0;
          fidx_q <= 2'd0;
        end else begin
          win_q <= win_next;
          n_q <= n_q + nbytes;
          if (fidx_q != 2'd2) fidx_q <= fidx_q + 2'd1;
        end
      end
    end
  end

  // ---- stage 2: decide ----
  function automatic logic [7:0] b(input logic [1023:0] w, input logic [31:0] at);
    b = at < 32'd128 ? w[8*at[6:0]+:8] : 8'h00;
  endfunction
  function automatic logic [3:0] hi4(input logic [7:0] x);
    hi4 = x[7:4];
  endfunction
  function automatic logic [3:0] lo4(input logic [7:0] x);
    lo4 = x[3:0];
  endfunction
  function automatic logic [1:0] lo2(input logic [7:0] x);
    lo2 = x[1:0];
  endfunction
  function automatic logic [1:0] mid2(input logic [7:0] x);
    mid2 = x[5:4];
  endfunction
  function automatic logic top1(input logic [7:0] x);
    top1 = x[7];
  endfunction
  function automatic logic [31:0] be16(input logic [1023:0] w, input logic [31:0] at);
    be16 = {16'd0, b(w, at), b(w, at + 32'd1)};
  endfunction

  rx_meta_t m;
  logic done;
  logic [31:0] n, off, typ, total, l4_len, endp, hl, with_pad, pad, plen, fixed, sum, ra, aa;
  logic [7:0] op;
  always_comb begin
    m = '0;
    done = 1'b0;
    n = n_s1;
    off = 32'd14;
    typ = be16(win_s1, 32'd12);
    total = '0; l4_len = '0; endp = '0; hl = '0; with_pad = '0; pad = '0; plen = '0;
    fixed = '0; sum = '0; ra = '0; aa = '0; op = '0;
    if (n < 32'd14) begin m.verdict = V_TRUNCATED; done = 1'b1; end
    if (!done && typ == 32'h8100) begin
      if (n < 32'd18) begin m.verdict = V_TRUNCATED; done = 1'b1; end
      else begin
        m.has_vlan = 1'b1;
        m.vlan_id = 12'(be16(win_s1, 32'd14));
        typ = be16(win_s1, 32'd16);
        off = 32'd18;
      end
    end
    // L3
    if (!done) begin
      m.l3_off = off[7:0];
      if (typ == 32'h0800) begin
        total = be16(win_s1, off + 32'd2);
        for (int i = 0; i < 20; i += 2) sum = sum + be16(win_s1, off + 32'(i));
        sum = {16'd0, sum[15:0]} + {16'd0, sum[31:16]};
        sum = {16'd0, sum[15:0]} + {16'd0, sum[31:16]};
        if (n < off + 32'd20) begin m.verdict = V_TRUNCATED; done = 1'b1; end
        else if (hi4(b(win_s1, off)) != 4'd4) begin m.verdict = V_BAD_IP_VERSION; done = 1'b1; end
        else if (lo4(b(win_s1, off)) != 4'd5) begin m.verdict = V_IP_OPTIONS; done = 1'b1; end
        else if (total < 32'd20) begin m.verdict = V_BAD_IP_LENGTH; done = 1'b1; end
        else if (n < off + total) begin m.verdict = V_TRUNCATED; done = 1'b1; end
        else if (verify_ip_checksum && sum != 32'hFFFF) begin m.verdict = V_BAD_IP_CHECKSUM; done = 1'b1; end
        else if ((be16(win_s1, off + 32'd6) & 32'h3FFF) != 0) begin m.verdict = V_IP_FRAGMENT; done = 1'b1; end
        else if (b(win_s1, off + 32'd9) != 8'd17) begin m.verdict = V_NOT_UDP; done = 1'b1; end
        else begin
          m.ecn = lo2(b(win_s1, off + 32'd1));
          l4_len = total - 32'd20;
          off = off + 32'd20;
        end
      end else if (typ == 32'h86DD) begin
        total = be16(win_s1, off + 32'd4);
        if (n < off + 32'd40) begin m.verdict = V_TRUNCATED; done = 1'b1; end
        else if (hi4(b(win_s1, off)) != 4'd6) begin m.verdict = V_BAD_IP_VERSION; done = 1'b1; end
        else if (n < off + 32'd40 + total) begin m.verdict = V_TRUNCATED; done = 1'b1; end
        else if (b(win_s1, off + 32'd6) != 8'd17) begin m.verdict = V_NOT_UDP; done = 1'b1; end
        else begin
          m.ipv6 = 1'b1;
          m.ecn = mid2(b(win_s1, off + 32'd1));
          l4_len = total;
          off = off + 32'd40;
        end
      end else begin
        m.verdict = V_NOT_IP;
        done = 1'b1;
      end
    end
    // L4
    if (!done) begin
      if (l4_len < 32'd8) begin m.verdict = V_BAD_UDP_LENGTH; done = 1'b1; end
      else if (be16(win_s1, off + 32'd4) != l4_len) begin m.verdict = V_BAD_UDP_LENGTH; done = 1'b1; end
      else if (be16(win_s1, off + 32'd2) != {16'd0, UDP_PORT}) begin m.verdict = V_WRONG_UDP_PORT; done = 1'b1; end
      else begin
        off = off + 32'd8;
        endp = off + l4_len - 32'd8;
        m.frame_len = endp[15:0];
        m.bth_off = off[7:0];
      end
    end
    // BTH and extension headers
    if (!done) begin
      op = b(win_s1, off);
      hl = {24'd0, OP_HDR_LEN[8*op+:8]};
      pad = {30'd0, mid2(b(win_s1, off + 32'd1))};
      fixed = {24'd0, OP_FIXED_PAYLOAD[8*op+:8]};
      if (endp < off + 32'd16) begin m.verdict = V_BAD_TRANSPORT_LENGTH; done = 1'b1; end
      else if (lo4(b(win_s1, off + 32'd1)) != 4'd0) begin m.verdict = V_BAD_TVER; done = 1'b1; end
      else if (!OP_VALID[8*op]) begin m.verdict = V_UNKNOWN_OPCODE; done = 1'b1; end
      else if (endp < off + hl + 32'd4) begin m.verdict = V_BAD_TRANSPORT_LENGTH; done = 1'b1; end
      else begin
        with_pad = endp - 32'd4 - off - hl;
        plen = with_pad - pad;
        if (pad > with_pad) begin m.verdict = V_BAD_PAD_COUNT; done = 1'b1; end
        else if (!OP_PAYLOAD[8*op] && pad != 0) begin m.verdict = V_BAD_PAD_COUNT; done = 1'b1; end
        else if (OP_PAYLOAD[8*op] ? (fixed != 0 && plen != fixed) : plen != 0) begin
          m.verdict = V_BAD_PAYLOAD_LENGTH;
          done = 1'b1;
        end
      end
    end
    if (!done) begin
      m.opcode = op;
      m.dest_qp = {b(win_s1, off + 32'd5), b(win_s1, off + 32'd6), b(win_s1, off + 32'd7)};
      m.psn = {b(win_s1, off + 32'd9), b(win_s1, off + 32'd10), b(win_s1, off + 32'd11)};
      m.ack_req = top1(b(win_s1, off + 32'd8));
      m.pad = pad[1:0];
      m.payload_off = 16'(off + hl);
      m.payload_len = plen[15:0];
      if (OP_RETH_OFF[8*op+:8] != 8'd0) begin
        ra = off + {24'd0, OP_RETH_OFF[8*op+:8]};
        for (int i = 0; i < 8; i++) m.reth_va[8*(7-i)+:8] = b(win_s1, ra + 32'(i));
        for (int i = 0; i < 4; i++) m.reth_rkey[8*(3-i)+:8] = b(win_s1, ra + 32'd8 + 32'(i));
        for (int i = 0; i < 4; i++) m.reth_len[8*(3-i)+:8] = b(win_s1, ra + 32'd12 + 32'(i));
      end
      if (OP_AETH_OFF[8*op+:8] != 8'd0) begin
        aa = off + {24'd0, OP_AETH_OFF[8*op+:8]};
        m.aeth_syndrome = b(win_s1, aa);
        m.aeth_msn = {b(win_s1, aa + 32'd1), b(win_s1, aa + 32'd2), b(win_s1, aa + 32'd3)};
      end
      m.icrc = icrc_received;
      m.verdict = (verify_icrc && !icrc_ok) ? V_BAD_ICRC : V_OK;
    end
  end

  assign meta_valid = s1_valid;
  assign meta = m;
  always_ff @(posedge clk) begin
    if (!rst_n) begin
      cnt_frames <= '0;
      cnt_drops <= '0;
    end else if (s1_valid) begin
      cnt_frames <= cnt_frames + 64'd1;
      if (m.verdict != V_OK) cnt_drops <= cnt_drops + 64'd1;
    end
  end
endmodule
