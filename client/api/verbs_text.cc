/// @file
/// The verbs vocabulary's functions (include/roce/verbs.h): names for logs and errors, and
/// the completion opcode of a work request.
#include <roce/verbs.h>

#include <array>

namespace roce::verbs {

std::string_view to_string(AsyncEventType t) {
  switch (t) {
    case AsyncEventType::kCqErr:
      return "CQ error";
    case AsyncEventType::kQpFatal:
      return "QP fatal error";
    case AsyncEventType::kQpReqErr:
      return "QP request error";
    case AsyncEventType::kQpAccessErr:
      return "QP access error";
    case AsyncEventType::kQpLastWqeReached:
      return "QP last WQE reached";
  }
  return "unknown";
}

std::string_view to_string(QpState s) {
  static constexpr std::array<std::string_view, 7> k{"RESET", "INIT", "RTR", "RTS",
                                                     "SQD",   "SQE",  "ERR"};
  return k[static_cast<std::size_t>(s)];
}

std::string_view to_string(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kLocLenErr:
      return "local length error";
    case WcStatus::kLocQpOpErr:
      return "local QP operation error";
    case WcStatus::kLocProtErr:
      return "local protection error";
    case WcStatus::kWrFlushErr:
      return "WR flushed";
    case WcStatus::kBadRespErr:
      return "bad response error";
    case WcStatus::kLocAccessErr:
      return "local access error";
    case WcStatus::kRemInvReqErr:
      return "remote invalid request error";
    case WcStatus::kRemAccessErr:
      return "remote access error";
    case WcStatus::kRemOpErr:
      return "remote operation error";
    case WcStatus::kRetryExcErr:
      return "transport retry counter exceeded";
    case WcStatus::kRnrRetryExcErr:
      return "RNR retry counter exceeded";
    case WcStatus::kFatalErr:
      return "fatal error";
    case WcStatus::kGeneralErr:
      return "general error";
  }
  return "unknown";
}

WcOpcode wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kWrite:
    case WrOpcode::kWriteImm:
      return WcOpcode::kRdmaWrite;
    case WrOpcode::kRead:
      return WcOpcode::kRdmaRead;
    case WrOpcode::kCmpSwap:
      return WcOpcode::kCompSwap;
    case WrOpcode::kFetchAdd:
      return WcOpcode::kFetchAdd;
    case WrOpcode::kLocalInv:
      return WcOpcode::kLocalInv;
    case WrOpcode::kRegMr:
      return WcOpcode::kRegMr;
    default:
      return WcOpcode::kSend;
  }
}

}  // namespace roce::verbs
