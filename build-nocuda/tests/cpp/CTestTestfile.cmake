# CMake generated Testfile for 
# Source directory: /work/main/tests/cpp
# Build directory: /work/main/build-nocuda/tests/cpp
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/main/build-nocuda/tests/cpp/qg_tests[1]_include.cmake")
