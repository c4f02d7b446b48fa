# The kernel files built with their own target flags (kernels/src/cpu/isa_*.cpp:
# -mavx2, -mavx512f, ...) must not define code that other files define too
# (kernels/src/cpu/isa.h): the linker keeps one copy of an inline function or a
# template instance (a weak symbol), and it may keep the AVX-512 one for a
# caller on a CPU without AVX-512. Fails on any weak symbol such an object
# defines (nm's W and V), naming the file and the symbol.
#
#   cmake -DNM=<nm> "-DOBJECTS=a.o|b.o|..." -P isa_symbols.cmake
string(REPLACE "|" ";" objects "${OBJECTS}")
set(checked 0)
set(found "")
foreach(obj IN LISTS objects)
  get_filename_component(name "${obj}" NAME)
  if(NOT name MATCHES "^isa_")
    continue()
  endif()
  execute_process(COMMAND "${NM}" -C "${obj}" OUTPUT_VARIABLE out RESULT_VARIABLE rc
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${obj}: ${err}")
  endif()
  math(EXPR checked "${checked} + 1")
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    # The exception-handling personality reference every C++ object carries.
    if(line MATCHES " [WV] " AND NOT line MATCHES "__gxx_personality")
      string(APPEND found "\n  ${name}: ${line}")
    endif()
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no isa_*.o among the objects given")
endif()
if(found)
  message(FATAL_ERROR "weak symbols in ISA-flagged objects (kernels/src/cpu/isa.h):${found}")
endif()
message(STATUS "${checked} ISA objects define no weak symbols")
