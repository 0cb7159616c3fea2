/// @file
/// The entry point every fuzz target defines: libFuzzer calls it (clang builds), replay_main.cc
/// does otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
