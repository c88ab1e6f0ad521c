# SPDX-License-Identifier: Apache-2.0
# What `cmake --install` puts under a prefix, and the Debian package CPack makes of it:
#   include/nccl.h, include/braid.h        the API (nccl.h replaces NVIDIA's: a program
#                                          built for NCCL compiles unchanged)
#   include/braid/plugin_api/...           the plugin ABI headers, for plugin vendors
#   lib/libnccl.so.2 (+ .so, .so.2.x.y)    the library, with libbraid.so beside it
#   lib/libnccl-{net,tuner,profiler}-*.so  the plugins, found beside the library
#   lib/pkgconfig/braid.pc                 `pkg-config --cflags --libs braid`
#   lib/cmake/Braid/                       `find_package(Braid)`: Braid::nccl, Braid::braid
#   bin/braid-*                            the tools
#   share/doc/braid/                       README, docs/, examples/
# Included by the top-level CMakeLists.txt after every target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Installed programs find the installed library wherever the prefix is moved.
file(RELATIVE_PATH braid_bin_to_lib /${CMAKE_INSTALL_BINDIR} /${CMAKE_INSTALL_LIBDIR})
set(braid_tool_rpath "$ORIGIN/${braid_bin_to_lib}")

install(FILES ${BRAID_INCLUDE_DIR}/nccl.h ${BRAID_INCLUDE_DIR}/braid.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT braid)
install(DIRECTORY ${BRAID_INCLUDE_DIR}/plugin_api
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/braid COMPONENT braid FILES_MATCHING PATTERN "*.h")

install(TARGETS nccl braid EXPORT BraidTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT braid
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${CMAKE_INSTALL_INCLUDEDIR}/braid)

# Plugins go beside the library: that is where Braid looks first (BRAID_PLUGIN_PATH
# overrides it), and where NCCL's own dlopen() finds them on the library path.
foreach(plugin nccl-net-socket nccl-net-ib nccl-net-ofi nccl-tuner-default nccl-profiler-braid)
  if(TARGET ${plugin})
    install(TARGETS ${plugin} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT braid)
  endif()
endforeach()

foreach(tool braid-info braid-perf braid-perf-mpi braid-sim braid-demo)
  if(TARGET ${tool})
    set_target_properties(${tool} PROPERTIES INSTALL_RPATH "${braid_tool_rpath}")
    # braid-perf-mpi (built where CMake finds MPI) is installed, but not packaged: the
    # package would then depend on one MPI for everyone.
    if(tool STREQUAL "braid-perf-mpi")
      set(component mpi)
    else()
      set(component braid)
    endif()
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${component})
  endif()
endforeach()
install(PROGRAMS ${CMAKE_SOURCE_DIR}/tools/braid-trace-merge/braid-trace-merge
  DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT braid)

install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT braid)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
  COMPONENT braid)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
  COMPONENT braid PATTERN "CMakeLists.txt" EXCLUDE PATTERN "__pycache__" EXCLUDE)

# braid.pc names its prefix relative to its own directory (${pcfiledir}), so a prefix that
# is moved, or a package unpacked with `dpkg -x`, still gives the right flags. The rpath
# makes a program load this libnccl.so.2 even when another NCCL is on the library path.
file(RELATIVE_PATH braid_pc_to_prefix /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" braid_pc_to_prefix "${braid_pc_to_prefix}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/braid.pc.in ${CMAKE_BINARY_DIR}/cmake/braid.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/cmake/braid.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT braid)

set(braid_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Braid)
install(EXPORT BraidTargets NAMESPACE Braid:: DESTINATION ${braid_cmake_dir} COMPONENT braid)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/BraidConfig.cmake.in
  ${CMAKE_BINARY_DIR}/cmake/BraidConfig.cmake INSTALL_DESTINATION ${braid_cmake_dir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/BraidConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/BraidConfig.cmake
  ${CMAKE_BINARY_DIR}/cmake/BraidConfigVersion.cmake
  DESTINATION ${braid_cmake_dir} COMPONENT braid)

# `cpack -G DEB` (from the build directory) makes braid_<version>_<arch>.deb, installed
# with `apt-get install ./braid_*.deb`. It installs under /usr and is an NCCL: it replaces
# NVIDIA's libnccl2 and libnccl-dev rather than sharing their file names.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME braid)
set(CPACK_PACKAGE_VENDOR "Braid")
set(CPACK_PACKAGE_CONTACT "Braid developers <braid@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "Collective communications library with the NCCL API, on host memory and GPUs")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_PROVIDES "libnccl2, libnccl-dev")
set(CPACK_DEBIAN_PACKAGE_CONFLICTS "libnccl2, libnccl-dev")
set(CPACK_DEBIAN_PACKAGE_REPLACES "libnccl2, libnccl-dev")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3") # braid-trace-merge
set(CPACK_STRIP_FILES OFF)
# One package, of the "braid" component only (build dir; project; component; subdir).
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};braid;braid;/")
include(CPack)
