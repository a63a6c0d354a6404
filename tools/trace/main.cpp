// coverse-trace: reads the per-PE trace files a COVERSE_TRACE=DIR run wrote; see
// `coverse-trace --help` and docs/trace.md.
#include <iostream>
#include <string>
#include <vector>

#include "trace_cli.hpp"

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    return coverse::trace_tool::run_cli(args, std::cout, std::cerr);
}
