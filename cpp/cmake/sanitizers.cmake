# SPDX-License-Identifier: MIT
# QG_SANITIZE: build everything (core, tests, bench, extension) with GCC/Clang
# sanitizers, so the CPU backend is checked as reliability.md asks:
#   -DQG_SANITIZE=address,undefined   ASan + UBSan (tests/run_all.sh runs this)
#   -DQG_SANITIZE=thread              TSan (the thread pool)
#   -DQG_SANITIZE=                    off (default)
# Options go to every target of the tree, so included before any target is
# made. Device code is left alone: nvcc host passes would need -Xcompiler and
# the CUDA runtime is not sanitizer-clean; sanitize CPU-only builds
# (-DQG_CUDA=OFF) and use compute-sanitizer for the kernels. The Python
# extension of an ASan build needs libasan preloaded into the interpreter.
set(QG_SANITIZE "" CACHE STRING "Sanitizers: empty, \"address,undefined\" or \"thread\"")
set_property(CACHE QG_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

if(QG_SANITIZE)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "QG_SANITIZE=${QG_SANITIZE} needs GCC or Clang, not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(QG_SANITIZE MATCHES "thread" AND QG_SANITIZE MATCHES "address")
    message(FATAL_ERROR "QG_SANITIZE: thread cannot be combined with address (got ${QG_SANITIZE})")
  endif()
  # -fno-omit-frame-pointer: usable stacks in reports; -fno-sanitize-recover:
  # a UBSan finding fails the test instead of printing and carrying on.
  set(_qg_san_flags -fsanitize=${QG_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_qg_san_flags}>")
  # Host links only: an nvcc device-link step would reject the flag.
  add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fsanitize=${QG_SANITIZE}>")
  # A sanitized libqg_core.a references the sanitizer runtime, so whoever links
  # the installed qg::core must link it too (the find_package example test
  # does). qg_core is created after this file runs: attach it at the end.
  function(_qg_sanitize_installed_core)
    target_link_options(qg_core INTERFACE "$<INSTALL_INTERFACE:-fsanitize=${QG_SANITIZE}>")
  endfunction()
  cmake_language(DEFER CALL _qg_sanitize_installed_core)
  message(STATUS "qg: sanitizers ${QG_SANITIZE}")
endif()
