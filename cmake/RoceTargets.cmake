# Helpers shared by every folder: warnings, library targets, tests and the header check.

set(ROCE_WARNINGS
    -Wall -Wextra -Werror -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
    -Woverloaded-virtual -Wimplicit-fallthrough -Wformat=2
    -Wmissing-declarations)

# roce_library(NAME SOURCES ... [DEPS ...] [PUBLIC_DEPS ...])
function(roce_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_compile_features(${name} PUBLIC cxx_std_20)
  target_compile_options(${name} PRIVATE ${ROCE_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} PUBLIC ${ARG_PUBLIC_DEPS})
  if(ROCE_TESTING)
    target_compile_definitions(${name} PUBLIC ROCE_TESTING=1)
  endif()
endfunction()

# roce_executable(NAME SOURCES ... DEPS ...): lands in build/bin/.
function(roce_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${ROCE_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# roce_add_test(NAME SOURCES ... [DEPS ...] LABELS ...): a GoogleTest binary registered with CTest.
function(roce_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${ROCE_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
endfunction()

# roce_hosted_service(NAME SOURCES ... DEPS ...): an application's registration of the kinds of
# service roced hosts (runtime/service.h, a RegisterService object). Built as an OBJECT library:
# nothing refers to a registration object, so from a static library the linker would drop it;
# an OBJECT library's objects are linked whole into what links it. roced links every target made
# here (ROCE_HOSTED_SERVICES, roce_link_hosted_services), so a new application edits nothing of
# roced.
function(roce_hosted_service name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} OBJECT ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_compile_features(${name} PUBLIC cxx_std_20)
  target_compile_options(${name} PRIVATE ${ROCE_WARNINGS})
  target_link_libraries(${name} PUBLIC roce_runtime_service ${ARG_DEPS})
  if(ROCE_TESTING)
    target_compile_definitions(${name} PUBLIC ROCE_TESTING=1)
  endif()
  set_property(GLOBAL APPEND PROPERTY ROCE_HOSTED_SERVICES ${name})
endfunction()

# Links every roce_hosted_service() target into roced. Deferred to the end of the top-level
# directory (apps/CMakeLists.txt), after every application has registered its targets: read
# earlier, the list would miss an application added below the reading line, whose kind would
# then silently not exist.
function(roce_link_hosted_services)
  get_property(hosted GLOBAL PROPERTY ROCE_HOSTED_SERVICES)
  target_link_libraries(roced PRIVATE ${hosted})
endfunction()

# Every public header compiles on its own (Seastar's CheckHeaders idea).
function(roce_add_header_check)
  file(GLOB_RECURSE headers RELATIVE ${PROJECT_SOURCE_DIR}
       ${PROJECT_SOURCE_DIR}/dataplane/*.h ${PROJECT_SOURCE_DIR}/controlplane/*.h
       ${PROJECT_SOURCE_DIR}/apps/*.h ${PROJECT_SOURCE_DIR}/client/*.h
       ${PROJECT_SOURCE_DIR}/runtime/*.h ${PROJECT_SOURCE_DIR}/verbs/*.h
       ${PROJECT_SOURCE_DIR}/include/*.h)
  set(srcs)
  foreach(h ${headers})
    string(MAKE_C_IDENTIFIER ${h} id)
    set(src ${CMAKE_BINARY_DIR}/check_headers/${id}.cc)
    file(GENERATE OUTPUT ${src} CONTENT "#include \"${h}\"\n")
    list(APPEND srcs ${src})
  endforeach()
  add_library(check_headers OBJECT ${srcs})
  target_include_directories(check_headers PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(check_headers PRIVATE ${ROCE_WARNINGS})
  target_link_libraries(check_headers PRIVATE ISAL::isal Boost::program_options yaml-cpp)
endfunction()
include(RoceFuzz)
