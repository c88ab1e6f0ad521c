# SPDX-License-Identifier: Apache-2.0
# br_add_check_test(NAME SOURCES a.c b.c [LIBS x y] [LABELS l] [TIMEOUT s] [ENV K=V ...])
# One Check test binary and its CTest entry; exit code 77 means "skipped".
if(BRAID_TESTS)
  pkg_check_modules(CHECK REQUIRED IMPORTED_TARGET check)
endif()

function(br_add_check_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS;ENV;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_include_directories(${name} PRIVATE ${BRAID_INCLUDE_DIR} ${CMAKE_SOURCE_DIR}/tests/common)
  target_link_libraries(${name} PRIVATE ${T_LIBS} PkgConfig::CHECK Threads::Threads)
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77
    LABELS "${T_LABELS}" ENVIRONMENT "CK_DEFAULT_TIMEOUT=${T_TIMEOUT};${T_ENV}")
endfunction()
