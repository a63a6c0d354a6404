# coverse_add_test(NAME <name> COMMAND <program> [args...] [PES <n>...] [TIMEOUT <s>]
#                  [SET <NAME=VALUE>...] [LABELS <label>...])
#
# One ctest entry per PE count, <name>_<n>, running the program through coverse-run:
#   coverse-run -n <n> <program> [args...] ++set NAME=VALUE...
# <program> may be a target of this project (its file is used) or a path. PES defaults to
# 1, TIMEOUT (seconds, for each entry; a hang is this kind of program's typical failure) to
# 60. ctest's timeout stops coverse-run, which stops every PE it started.
# The launcher is COVERSE_RUN (set by find_package(coverse)), or the coverse-run target
# inside the coverse build itself.
function(coverse_add_test)
    cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;PES;SET;LABELS" ${ARGN})
    if(NOT T_NAME OR NOT T_COMMAND)
        message(FATAL_ERROR "coverse_add_test: NAME and COMMAND are required")
    endif()
    if(T_UNPARSED_ARGUMENTS)
        message(FATAL_ERROR "coverse_add_test(${T_NAME}): unknown arguments ${T_UNPARSED_ARGUMENTS}")
    endif()
    if(NOT T_PES)
        set(T_PES 1)
    endif()
    if(NOT T_TIMEOUT)
        set(T_TIMEOUT 60)
    endif()
    if(COVERSE_RUN)
        set(run "${COVERSE_RUN}")
    elseif(TARGET coverse-run)
        set(run "$<TARGET_FILE:coverse-run>")
    else()
        message(FATAL_ERROR "coverse_add_test(${T_NAME}): no coverse-run; find_package(coverse) "
                            "sets COVERSE_RUN")
    endif()
    list(POP_FRONT T_COMMAND program)
    if(TARGET ${program})
        set(program "$<TARGET_FILE:${program}>")
    endif()
    set(settings)
    foreach(s IN LISTS T_SET)
        if(NOT s MATCHES "^[A-Za-z0-9_]+=")
            message(FATAL_ERROR "coverse_add_test(${T_NAME}): SET ${s}: expected NAME=VALUE")
        endif()
        list(APPEND settings ++set ${s})
    endforeach()
    foreach(n IN LISTS T_PES)
        if(NOT n MATCHES "^[1-9][0-9]*$")
            message(FATAL_ERROR "coverse_add_test(${T_NAME}): PES ${n}: expected a PE count")
        endif()
        add_test(NAME ${T_NAME}_${n}
            COMMAND ${run} -n ${n} ${program} ${T_COMMAND} ${settings})
        set_tests_properties(${T_NAME}_${n} PROPERTIES TIMEOUT ${T_TIMEOUT})
        if(T_LABELS)
            set_tests_properties(${T_NAME}_${n} PROPERTIES LABELS "${T_LABELS}")
        endif()
    endforeach()
endfunction()
