# SPDX-License-Identifier: MIT
# ctest helper: install qg's dev component into a prefix, build the C++ example
# against it with find_package(qg), and run it.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()
file(REMOVE_RECURSE ${QG_PREFIX} ${QG_PREFIX}-build)
run(${CMAKE_COMMAND} --install ${QG_BUILD_DIR} --prefix ${QG_PREFIX} --component dev)
run(${CMAKE_COMMAND} -S ${QG_EXAMPLE_SRC} -B ${QG_PREFIX}-build -G ${QG_GENERATOR}
    -DCMAKE_PREFIX_PATH=${QG_PREFIX})
run(${CMAKE_COMMAND} --build ${QG_PREFIX}-build)
run(${QG_PREFIX}-build/${QG_EXAMPLE_BIN})
