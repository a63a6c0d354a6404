# Helpers shared by every folder's CMakeLists.

# coverse_check_headers(<target> <include_dir>)
# Compiles every public header of a layer on its own (one generated .cpp per header), so a
# header that forgets an include fails the build. Built as part of ALL.
function(coverse_check_headers target include_dir)
    if(NOT COVERSE_HEADER_CHECKS)
        return()
    endif()
    file(GLOB_RECURSE headers RELATIVE ${include_dir} CONFIGURE_DEPENDS
        ${include_dir}/coverse/*.hpp ${include_dir}/*.h)
    set(sources)
    foreach(h IN LISTS headers)
        string(MAKE_C_IDENTIFIER ${h} id)
        set(src ${CMAKE_CURRENT_BINARY_DIR}/header_check/${id}.cpp)
        file(CONFIGURE OUTPUT ${src} CONTENT "#include <${h}>\n#include <${h}>\n")
        list(APPEND sources ${src})
    endforeach()
    if(sources)
        add_library(${target}_header_check OBJECT ${sources})
        target_link_libraries(${target}_header_check PRIVATE ${target})
    endif()
endfunction()

# coverse_add_gtest(<name> LABEL <layer> [TIMEOUT <s>] SOURCES ... LIBS ...)
# One ctest entry per executable (not per case): keeps ctest's process count and the
# suite's wall time low on a 2-core CI machine. Every test gets a timeout and a label.
function(coverse_add_gtest name)
    cmake_parse_arguments(T "" "LABEL;TIMEOUT" "SOURCES;LIBS" ${ARGN})
    if(NOT T_LABEL)
        message(FATAL_ERROR "coverse_add_gtest(${name}): LABEL is required")
    endif()
    if(NOT T_TIMEOUT)
        set(T_TIMEOUT 120)
    endif()
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main coverse_flags)
    # Helpers every test folder shares (coverse/test/*.hpp).
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS ${T_LABEL})
endfunction()
