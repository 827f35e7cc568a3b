# check_isa_objects.cmake: the files compiled for an ISA extension (AVX2,
# AVX-VNNI, AVX-512, AMX) must define no weak symbols. An inline function or template instance
# that the compiler emits out of line in such a file is a weak definition,
# and the linker keeps one of the copies that every file using it emitted:
# if it keeps this one, code built for AVX2 alone calls AVX-512 instructions
# and dies on CPUs without them. Registered for Release builds (what pip
# and the tests' script build): at -O2, -Os or -O0 the compiler emits out of
# line inline functions it inlines at -O3 (epilogue.h's, Status), and the
# AVX-512 files then do define such symbols; that is not closed yet. Run by
# ctest:
#   cmake -DQG_NM=<nm> -DQG_LIB=<libqg_core.a> -P check_isa_objects.cmake
execute_process(COMMAND ${QG_NM} -C ${QG_LIB} OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${QG_NM} failed on ${QG_LIB}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(member "")
set(checked 0)
set(bad "")
foreach(line IN LISTS lines)
  if(line MATCHES "^(.+\\.o):$")
    set(member "${CMAKE_MATCH_1}")
    if(member MATCHES "avx|amx|_simd")
      math(EXPR checked "${checked} + 1")
    endif()
  elseif(member MATCHES "avx|amx|_simd" AND line MATCHES " [WV] " AND NOT line MATCHES "DW\\.ref\\.__gxx_personality")
    string(APPEND bad "\n  ${member}: ${line}")
  endif()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no ISA-specific object found in ${QG_LIB}")
endif()
if(bad)
  message(FATAL_ERROR "weak symbols in files compiled for an ISA extension (give them internal linkage):${bad}")
endif()
message(STATUS "${checked} ISA-specific objects define no weak symbols")
