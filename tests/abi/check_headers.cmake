# SPDX-License-Identifier: Apache-2.0
# Compile every installed header alone (and twice, for its include guard) as
# LANG=C (-std=c99 -pedantic) or LANG=CXX (-std=c++11 -pedantic), with -Wall -Wextra
# -Werror, as UCX's check_inst_headers.sh does. Also one translation unit holding
# nccl.h followed by every plugin header, the order the core uses.
#   cmake -DCOMPILER=<cc> -DLANG=C|CXX -DINCLUDE_DIR=<repo>/include -DWORK_DIR=<dir>
#         -P check_headers.cmake
foreach(var COMPILER LANG INCLUDE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_headers.cmake: ${var} is not set")
  endif()
endforeach()

if(LANG STREQUAL "C")
  set(flags -x c -std=c99)
  set(ext c)
else()
  set(flags -x c++ -std=c++11)
  set(ext cpp)
endif()
list(APPEND flags -pedantic -Wall -Wextra -Werror -fsyntax-only -I${INCLUDE_DIR})

file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR} ${INCLUDE_DIR}/plugin_api/*.h)
list(SORT headers)
list(PREPEND headers nccl.h)
file(MAKE_DIRECTORY ${WORK_DIR})

set(all_plugin_includes "#include \"nccl.h\"\n")
set(failed "")
foreach(h IN LISTS headers)
  string(MAKE_C_IDENTIFIER "${h}" id)
  set(src ${WORK_DIR}/${id}_${LANG}.${ext})
  file(WRITE ${src} "#include \"${h}\"\n#include \"${h}\"\nint braid_header_${id};\n")
  execute_process(COMMAND ${COMPILER} ${flags} ${src}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message("FAIL ${h} (${LANG}):\n${out}")
    list(APPEND failed ${h})
  else()
    message("ok   ${h} (${LANG})")
  endif()
  if(NOT h STREQUAL "nccl.h")
    string(APPEND all_plugin_includes "#include \"${h}\"\n")
  endif()
endforeach()

set(src ${WORK_DIR}/all_with_nccl_h_${LANG}.${ext})
file(WRITE ${src} "${all_plugin_includes}int braid_all_headers;\n")
execute_process(COMMAND ${COMPILER} ${flags} ${src}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message("FAIL nccl.h + every plugin header (${LANG}):\n${out}")
  list(APPEND failed "nccl.h+all")
endif()

list(LENGTH headers n)
if(failed)
  message(FATAL_ERROR "${LANG}: headers that do not compile alone: ${failed}")
endif()
message("${LANG}: all ${n} headers compile alone")
