/// @file
/// The engine's verbs vocabulary: the public API's types (include/roce/verbs.h), named in the
/// engine's namespace, so that the engine speaks the same SendWr, Wc and QpAttr as libroce.
#pragma once

#include <roce/verbs.h>

#include "dataplane/wire/bytes.h"

namespace roce::engine {
using namespace roce::verbs;  // NOLINT: the engine's vocabulary is the public one
}  // namespace roce::engine
