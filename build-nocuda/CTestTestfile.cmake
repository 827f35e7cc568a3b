# CMake generated Testfile for 
# Source directory: /work/main
# Build directory: /work/main/build-nocuda
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[cpp_example_find_package]=] "/usr/bin/cmake" "-DQG_BUILD_DIR=/work/main/build-nocuda" "-DQG_PREFIX=/work/main/build-nocuda/example-install" "-DQG_EXAMPLE_SRC=/work/main/cpp/examples/gemm_raw" "-DQG_GENERATOR=Ninja" "-P" "/work/main/cpp/cmake/build_example.cmake")
set_tests_properties([=[cpp_example_find_package]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/CMakeLists.txt;105;add_test;/work/main/CMakeLists.txt;0;")
subdirs("cpp")
subdirs("tests/cpp")
