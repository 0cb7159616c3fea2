# libFuzzer targets (tests/fuzz/): the option, the Fuzz build type and roce_add_fuzzer().
#
# ROCE_BUILD_FUZZ (on by default with clang): every target in tests/fuzz/ becomes a libFuzzer
# binary, and each gets a CTest "fuzz_<name>" (label fuzz) that runs it for ROCE_FUZZ_SECONDS
# (default 60) from its seed corpus. Without it (gcc), the same sources are linked with a small
# driver that runs each checked-in input once. Either way "fuzz_replay_<name>" (label unit)
# replays the seeds and every crash found so far (tests/fuzz/regressions/<name>/).
#
# The Fuzz build type (the fuzz preset) instruments every library for coverage and ASan+UBSan;
# the fuzz binaries add libFuzzer's main at link time.

if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(roce_fuzz_default ON)
else()
  set(roce_fuzz_default OFF)
endif()
option(ROCE_BUILD_FUZZ "Build the libFuzzer targets (needs clang)" ${roce_fuzz_default})
if(ROCE_BUILD_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "ROCE_BUILD_FUZZ needs clang (-fsanitize=fuzzer); use the fuzz preset")
endif()

set(CMAKE_CXX_FLAGS_FUZZ
    "-O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all")
set(CMAKE_C_FLAGS_FUZZ "${CMAKE_CXX_FLAGS_FUZZ}")
set(CMAKE_EXE_LINKER_FLAGS_FUZZ "-fsanitize=address,undefined")

# roce_add_fuzzer(NAME SOURCES ... DEPS ...): tests/fuzz/<NAME>.cc defines LLVMFuzzerTestOneInput.
# Needs the seed fixture (roce-fuzz-seeds) that tests/fuzz/CMakeLists.txt sets up.
function(roce_add_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  set(bin fuzz_${name})
  if(ROCE_BUILD_FUZZ)
    add_executable(${bin} ${ARG_SOURCES})
    target_compile_options(${bin} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${bin} PRIVATE -fsanitize=fuzzer,address,undefined)
  else()
    add_executable(${bin} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.cc)
  endif()
  target_compile_options(${bin} PRIVATE ${ROCE_WARNINGS})
  target_link_libraries(${bin} PRIVATE ${ARG_DEPS})
  target_include_directories(${bin} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  set_target_properties(${bin} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/fuzz)
  add_dependencies(roce_fuzz ${bin})

  set(seeds ${CMAKE_BINARY_DIR}/tests/fuzz/seeds/${name})
  set(regressions ${PROJECT_SOURCE_DIR}/tests/fuzz/regressions/${name})
  # Replay: every seed and every regression input once.
  if(ROCE_BUILD_FUZZ)
    add_test(NAME fuzz_replay_${name}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzz.sh --replay $<TARGET_FILE:${bin}> ${seeds}
              ${regressions})
  else()
    add_test(NAME fuzz_replay_${name} COMMAND ${bin} ${seeds} ${regressions})
  endif()
  set_tests_properties(fuzz_replay_${name} PROPERTIES LABELS unit TIMEOUT 120
    FIXTURES_REQUIRED fuzz_seeds)
  if(ROCE_BUILD_FUZZ)
    add_test(NAME fuzz_${name}
      COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzz.sh $<TARGET_FILE:${bin}> ${seeds}
              ${CMAKE_BINARY_DIR}/tests/fuzz/work/${name})
    # ROCE_FUZZ_SECONDS may be up to an hour per target.
    set_tests_properties(fuzz_${name} PROPERTIES LABELS fuzz TIMEOUT 3900
      FIXTURES_REQUIRED fuzz_seeds)
  endif()
endfunction()
