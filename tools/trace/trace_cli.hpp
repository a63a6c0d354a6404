// trace_cli: coverse-trace's command line — argument parsing, help texts, exit statuses —
// kept apart from main() so tests can run it in-process.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace coverse::trace_tool {

/// Exit statuses of coverse-trace (docs/trace.md lists them too).
enum exit_status : int {
    exit_ok = 0,        // done, nothing found
    exit_found = 1,     // leaks or stalls found
    exit_usage = 2,     // bad arguments
    exit_no_input = 3,  // no usable trace file in DIR, or the output cannot be written
    exit_damaged = 4,   // a file was corrupt or truncated; what could be read was reported
};

/// Runs coverse-trace with `args` (without the program name); reports go to `out`,
/// warnings and errors to `err`. Returns the exit status.
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace coverse::trace_tool
