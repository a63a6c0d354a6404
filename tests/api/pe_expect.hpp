// EXPECT(cond, fmt, ...) for the multi-PE test programs: a check that fails aborts the job
// (CmiAbort, which coverse-run turns into the job's failure) with the program's name, the PE,
// the condition and the printf-style message. The program defines `expect_program` (its name)
// before it uses the macro.
#pragma once

#include <converse.h>

#define EXPECT(cond, fmt, ...)                                     \
    do {                                                           \
        if (!(cond))                                               \
            CmiAbort("%s: PE %d: " #cond ": " fmt, expect_program, \
                     CmiMyPe() __VA_OPT__(, ) __VA_ARGS__);        \
    } while (0)
