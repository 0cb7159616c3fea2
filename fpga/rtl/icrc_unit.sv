// The RoCEv2 ICRC unit (IBA Annex A17.3.3): a 512-bit AXI4-Stream datapath, one flit per clock.
// The same machine as fpga/hls/icrc_kernel.cc: from the first flit it finds the IP header
// (EtherType, optional 802.1Q tag) and where the ICRC sits (IPv4 total length or IPv6 payload
// length); CRC-32 runs over [IP header, ICRC) with the variant fields as ones, and the four
// ICRC bytes are captured as they pass. Check mode: the result flags a mismatch and the drop
// counter counts it. Insert mode: the computed ICRC is written over those four bytes.
// Port widths come from ports.svh, generated from fpga/iface/ports.h.
`include "ports.svh"

module icrc_unit (
    input  logic                  clk,
    input  logic                  rst_n,
    input  logic                  insert,    // 1: generate (TX), 0: check (RX)
    // net2dev_rx / host2dev_tx flits
    input  logic                  s_valid,
    output logic                  s_ready,
    input  logic [FLIT_DATA_W-1:0] s_data,
    input  logic [FLIT_KEEP_W-1:0] s_keep,
    input  logic                  s_last,
    // the same flits, one clock later (insert: with the ICRC written)
    output logic                  m_valid,
    input  logic                  m_ready,
    output logic [FLIT_DATA_W-1:0] m_data,
    output logic [FLIT_KEEP_W-1:0] m_keep,
    output logic                  m_last,
    // per frame, with its last flit on m_*
    output logic                  res_valid,
    output logic                  res_ok,
    output logic [31:0]           res_computed,
    output logic [31:0]           res_received,
    // counters (ports.h DevCounter: RX pkgs, ICRC drop cnt, ICRC gen cnt)
    output logic [63:0]           cnt_frames,
    output logic [63:0]           cnt_icrc_drop,
    output logic [63:0]           cnt_icrc_gen
);
  localparam logic [31:0] ICRC_START = 32'hDEBB20E3;  // after 8 x 0xFF from all ones

  // (Results are assigned to the function's name, not returned: yosys 0.23 reads no `return`.)
  function automatic logic [31:0] crc_byte(input logic [31:0] c, input logic [7:0] b);
    logic [31:0] x;
    x = c ^ {24'h0, b};
    for (int k = 0; k < 8; k++) x = (x >> 1) ^ (32'hEDB88320 & {32{x[0]}});
    crc_byte = x;
  endfunction

  // The byte the CRC sees at offset r from the IP header.
  function automatic logic [7:0] masked(input logic [7:0] b, input logic [15:0] r, input logic v6);
    masked = b;
    if (!v6) begin
      if (r == 1 || r == 8 || r == 10 || r == 11 || r == 26 || r == 27 || r == 32) masked = 8'hFF;
    end else begin
      if (r == 0) masked = b | 8'h0F;
      if (r == 1 || r == 2 || r == 3 || r == 7 || r == 46 || r == 47 || r == 52) masked = 8'hFF;
    end
  endfunction

  function automatic logic [7:0] byte_at(input logic [FLIT_DATA_W-1:0] d, input logic [15:0] i);
    byte_at = d[8*i+:8];
  endfunction

  // frame state
  logic        first_q;
  logic [15:0] pos_q, l3_q, end_q;
  logic        v6_q, valid_q;
  logic [31:0] crc_q, rx_q;

  // first-flit decode
  logic [15:0] type0, type1, l3_d, end_d, iplen;
  logic        v6_d, valid_d;
  always_comb begin
    type0 = {byte_at(s_data, 12), byte_at(s_data, 13)};
    type1 = {byte_at(s_data, 16), byte_at(s_data, 17)};
    l3_d = (type0 == 16'h8100) ? 16'd18 : 16'd14;
    v6_d = 1'b0;
    valid_d = 1'b0;
    end_d = 16'd0;
    iplen = 16'd0;
    if ((type0 == 16'h8100 ? type1 : type0) == 16'h0800) begin
      iplen = {byte_at(s_data, l3_d + 2), byte_at(s_data, l3_d + 3)};
      valid_d = iplen >= 16'd44;
      end_d = l3_d + iplen - 16'd4;
    end else if ((type0 == 16'h8100 ? type1 : type0) == 16'h86DD) begin
      iplen = {byte_at(s_data, l3_d + 4), byte_at(s_data, l3_d + 5)};
      v6_d = 1'b1;
      valid_d = iplen >= 16'd24;
      end_d = l3_d + 16'd36 + iplen;
    end
  end

  // one flit
  logic [15:0] pos, l3, endp, p, nbytes;
  logic [1:0]  k;
  logic        v6, vld;
  logic [31:0] crc_n, rx_n;
  logic [FLIT_DATA_W-1:0] data_n;
  always_comb begin
    pos = first_q ? 16'd0 : pos_q;
    l3 = first_q ? l3_d : l3_q;
    endp = first_q ? end_d : end_q;
    v6 = first_q ? v6_d : v6_q;
    vld = first_q ? valid_d : valid_q;
    crc_n = first_q ? ICRC_START : crc_q;
    rx_n = first_q ? 32'd0 : rx_q;
    data_n = s_data;
    nbytes = 16'd0;
    k = 2'd0;
    for (int i = 0; i < FLIT_BYTES; i++) begin
      p = pos + 16'(i);
      if (s_keep[i]) begin
        nbytes = nbytes + 16'd1;
        if (vld && p >= l3 && p < endp) begin
          crc_n = crc_byte(crc_n, masked(s_data[8*i+:8], p - l3, v6));
        end else if (vld && p >= endp && p < endp + 16'd4) begin
          // Byte k of the ICRC (little-endian): a 4-way select, not a barrel shifter.
          k = 2'(p - endp);
          rx_n[8*k+:8] = s_data[8*i+:8];
          if (insert) data_n[8*i+:8] = ~crc_n[8*k+:8];
        end
      end
    end
  end

  logic fire, frame_ok_len;
  assign s_ready = m_ready || !m_valid;
  assign fire = s_valid && s_ready;
  assign frame_ok_len = vld && (pos + nbytes >= endp + 16'd4);

  always_ff @(posedge clk) begin
    if (!rst_n) begin
      first_q <= 1'b1;
      pos_q <= '0;
      l3_q <= '0;
      end_q <= '0;
      v6_q <= 1'b0;
      valid_q <= 1'b0;
      crc_q <= ICRC_START;
      rx_q <= '0;
      m_valid <= 1'b0;
      res_valid <= 1'b0;
      cnt_frames <= '0;
      cnt_icrc_drop <= '0;
      cnt_icrc_gen <= '0;
    end else begin
      if (m_valid && m_ready) begin
        m_valid <= 1'b0;
        res_valid <= 1'b0;
      end
      if (fire) begin
        m_valid <= 1'b1;
        m_data <= data_n;
        m_keep <= s_keep;
        m_last <= s_last;
        first_q <= s_last;
        pos_q <= pos + 16'(FLIT_BYTES);
        l3_q <= l3;
        end_q <= endp;
        v6_q <= v6;
        valid_q <= vld;
        crc_q <= crc_n;
        rx_q <= rx_n;
        res_valid <= s_last;
        if (s_last) begin
          res_computed <= ~crc_n;
          res_received <= rx_n;
          res_ok <= frame_ok_len && (~crc_n == rx_n);
          cnt_frames <= cnt_frames + 64'd1;
          if (insert && frame_ok_len) cnt_icrc_gen <= cnt_icrc_gen + 64'd1;
          if (!insert && !(frame_ok_len && (~crc_n == rx_n)))
            cnt_icrc_drop <= cnt_icrc_drop + 64'd1;
        end
      end
    end
  end
endmodule
