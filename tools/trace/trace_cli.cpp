// trace_cli: coverse-trace's commands, options, help texts and exit statuses.
#include "trace_cli.hpp"

#include <exception>
#include <fstream>
#include <optional>

#include "trace_model.hpp"

namespace coverse::trace_tool {

namespace {

constexpr const char* general_help = R"(usage: coverse-trace [COMMAND] [OPTIONS] DIR

Reads the trace files (DIR/coverse-trace.<pe>.bin) that a run with COVERSE_TRACE=DIR
wrote, merges the PEs on one clock, and reports on handle lifecycles.

commands:
  summary DIR               per protocol: handles, latency p50/p99/max from allocation
                            to completion, bytes; credits; registrations; phases
                            (the default: `coverse-trace DIR` is `coverse-trace summary DIR`)
  export DIR [-o FILE]      Chrome trace / Perfetto JSON (to stdout without -o);
                            open it in ui.perfetto.dev
  leaks DIR                 handles never released, registrations never dropped,
                            credits never returned
  stalls DIR [--over D]     handles that stayed in one state longer than D
                            (default 10ms; units ns, us, ms, s)
  info DIR                  each PE's file: header, settings, events, dropped counts

`coverse-trace COMMAND --help` describes one command.

exit status:
  0  done, nothing found
  1  leaks or stalls found
  2  bad arguments
  3  no usable trace file in DIR, or the output file cannot be written
  4  a file was corrupt or truncated (named with its byte offset on stderr);
     everything that could be read was still reported
)";

constexpr const char* summary_help = R"(usage: coverse-trace summary DIR

Per protocol (inline, stream, rendezvous, eager short, eager long) and direction: how many
handles were allocated, completed and released, the latency from allocation to completion
(p50, p99, max; nearest-rank percentiles over completed handles), and the bytes. Then the
credits spent and returned (per protocol and per pair of PEs), memory registrations, the
start-up phases, and notes on what the PEs dropped.

Exit status 0, or 4 when a file was damaged.
)";

constexpr const char* export_help = R"(usage: coverse-trace export DIR [-o FILE]

Writes the merged trace as Trace Event Format JSON ({"traceEvents":[...]}) for the
Perfetto UI (ui.perfetto.dev, "Open trace file") or chrome://tracing:
  - one process per PE ("PE n", pid n+1); a "phases" thread with the start-up phases and
    barriers as slices, and "handles" threads with one slice per handle from allocation to
    release (never-released handles end where the PE's trace ends), its states as child
    slices;
  - a flow arrow ("message") from each send handle to the receive handle it became;
  - counters: live handles, credits outstanding per peer, registered memory.

options:
  -o, --output FILE   write to FILE instead of stdout ("-" is stdout)

Exit status 0, 3 when FILE cannot be written, 4 when an input file was damaged.
)";

constexpr const char* leaks_help = R"(usage: coverse-trace leaks DIR

Lists what a PE took and never gave back before its trace ended: handles never released,
memory registrations never dropped, credits spent to a peer and never returned. Each
with its PE, what it is (protocol, peer, sequence, bytes), its last state and when it got
there (milliseconds of trace time).

A PE whose trace lost its tail (limit reached in stop mode, writer behind) cannot prove a
leak: its open handles are listed as uncertain and do not count.

Exit status 1 when a leak was found, 0 when none, 4 when none but a file was damaged.
)";

constexpr const char* stalls_help = R"(usage: coverse-trace stalls DIR [--over DURATION]

Lists handles that stayed in one state (allocated, published, get posted, put done,
completed) longer than DURATION, longest first. A state still held when the PE's trace
ended counts up to that end.

options:
  --over DURATION   the bound, a number with a unit: ns, us, ms or s (default 10ms)

Exit status 1 when a stall was found, 0 when none, 4 when none but a file was damaged.
)";

constexpr const char* info_help = R"(usage: coverse-trace info DIR

Shows each PE's file: format version, event count, whether it was closed, backend,
provider, host, pid, the trace limit and mode, what was dropped, when the PE started on
the merged clock, and the effective settings it recorded.

Exit status 0, or 4 when a file was damaged.
)";

struct command {
    const char* name;
    const char* help;
    const char* usage;
};
constexpr command commands[] = {
    {"summary", summary_help, "coverse-trace summary DIR"},
    {"export", export_help, "coverse-trace export DIR [-o FILE]"},
    {"leaks", leaks_help, "coverse-trace leaks DIR"},
    {"stalls", stalls_help, "coverse-trace stalls DIR [--over DURATION]"},
    {"info", info_help, "coverse-trace info DIR"},
};

const command* find_command(const std::string& name) {
    for (const auto& c : commands)
        if (name == c.name) return &c;
    return nullptr;
}

int usage_error(std::ostream& err, const command* cmd, const std::string& why) {
    err << "coverse-trace" << (cmd ? std::string(" ") + cmd->name : "") << ": " << why << "\n"
        << "usage: " << (cmd ? cmd->usage : "coverse-trace [COMMAND] [OPTIONS] DIR") << "\n"
        << "Try 'coverse-trace" << (cmd ? std::string(" ") + cmd->name : "")
        << " --help' for more.\n";
    return exit_usage;
}

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
    if (args.empty()) return usage_error(err, nullptr, "missing DIR");
    std::size_t i = 0;
    const command* cmd = nullptr;
    if (args[0] == "-h" || args[0] == "--help") {
        out << general_help;
        return exit_ok;
    }
    if (args[0] == "help") {
        if (args.size() == 1) {
            out << general_help;
            return exit_ok;
        }
        const command* c = find_command(args[1]);
        if (!c) return usage_error(err, nullptr, "no command '" + args[1] + "'");
        out << c->help;
        return exit_ok;
    }
    if ((cmd = find_command(args[0]))) {
        i = 1;
    } else {
        if (!args[0].empty() && args[0][0] == '-')
            return usage_error(err, nullptr, "unknown option '" + args[0] + "'");
        cmd = find_command("summary");
    }
    const std::string name = cmd->name;

    std::optional<std::string> dir, output;
    std::optional<std::string> over;
    bool options_done = false;
    for (; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (!options_done && a.size() > 1 && a[0] == '-') {
            if (a == "--") {
                options_done = true;
                continue;
            }
            if (a == "-h" || a == "--help") {
                out << cmd->help;
                return exit_ok;
            }
            const auto value = [&](const std::string& opt) -> std::optional<std::string> {
                if (a == opt) {
                    if (i + 1 >= args.size()) return std::nullopt;
                    return args[++i];
                }
                return a.substr(opt.size() + 1);  // --opt=value
            };
            if (name == "export" &&
                (a == "-o" || a == "--output" || a.rfind("--output=", 0) == 0)) {
                auto v = value(a == "-o" ? "-o" : "--output");
                if (!v || v->empty()) return usage_error(err, cmd, a + " needs a file name");
                output = v;
                continue;
            }
            if (name == "stalls" && (a == "--over" || a.rfind("--over=", 0) == 0)) {
                auto v = value("--over");
                if (!v || v->empty()) return usage_error(err, cmd, "--over needs a duration");
                over = v;
                continue;
            }
            return usage_error(err, cmd, "unknown option '" + a + "'");
        }
        if (dir) return usage_error(err, cmd, "unexpected argument '" + a + "' (one DIR only)");
        dir = a;
    }
    if (!dir) return usage_error(err, cmd, "missing DIR");

    std::uint64_t bound_ns = 10'000'000;
    if (over) {
        auto d = parse_duration(*over);
        if (!d)
            return usage_error(err, cmd,
                               "--over " + *over +
                                   " is not a duration; give a number with a unit: ns, us, ms "
                                   "or s (e.g. --over 10ms)");
        bound_ns = *d;
    }

    trace_set set;
    try {
        set = load_dir(*dir);
    } catch (const input_error& e) {
        err << e.what() << "\n";
        return exit_no_input;
    }
    for (const auto& p : set.problems)
        err << p.message << (p.file_unused ? " (file not used)" : "") << "\n";
    const model m = analyse(set);

    int rc = exit_ok;
    if (name == "summary") {
        print_summary(set, m, summarize(m), out);
    } else if (name == "info") {
        print_info(set, out);
    } else if (name == "export") {
        export_stats st;
        if (!output || *output == "-") {
            st = export_json(set, m, out);
            out.flush();
        } else {
            std::ofstream file(*output, std::ios::binary | std::ios::trunc);
            if (!file) {
                err << "coverse-trace export: cannot write " << *output
                    << " (does its directory exist and is it writable?)\n";
                return exit_no_input;
            }
            st = export_json(set, m, file);
            file.close();
            if (!file) {
                err << "coverse-trace export: writing " << *output << " failed (disk full?)\n";
                return exit_no_input;
            }
        }
        err << "coverse-trace export: " << (output && *output != "-" ? *output : "stdout") << ": "
            << st.slices << " slices on " << st.lanes << " threads, " << st.flows << " flows ("
            << st.unmatched << " handles without their other end), " << st.counters
            << " counter events; open it in ui.perfetto.dev\n";
    } else if (name == "leaks") {
        const auto leaks = find_leaks(set, m);
        if (print_leaks(set, leaks, out) > 0) rc = exit_found;
    } else if (name == "stalls") {
        const auto stalls = find_stalls(set, m, bound_ns);
        print_stalls(m, stalls, bound_ns, out);
        if (!stalls.empty()) rc = exit_found;
    }
    if (rc == exit_ok && set.damaged()) rc = exit_damaged;
    return rc;
}

}  // namespace coverse::trace_tool
