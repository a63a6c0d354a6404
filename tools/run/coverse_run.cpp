// coverse-run: the launcher's command line — charmrun-compatible flags (+pN, +p N, ++local,
// ++verbose, ++nodelist, ++nodegroup, ++remote-shell, ++ppn) plus --fan-out, -n, --prefix, --bind,
// --timeout, --set, --trace and the hang report's
// --report-stuck-after, --json, --report-to, --dot — handed to net::run_job.
#include <coverse/net/bootstrap.hpp>
#include <coverse/net/mesh.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

// ON_PEER_LOST as the PEs will see it: the last `++set ON_PEER_LOST=...` among their
// arguments (--set adds those too), else the environment (COVERSE_ON_PEER_LOST or
// CMI_VMI_ON_PEER_LOST), else abort. The PEs check the value; the launcher only needs to
// know whether to stop the others when one fails.
std::string peer_lost_policy(const std::vector<std::string>& argv) {
    constexpr std::string_view key = "ON_PEER_LOST=";
    std::string found;
    for (std::size_t i = 0; i < argv.size(); ++i) {
        std::string_view a = argv[i];
        if (a == "++set" && i + 1 < argv.size())
            a = argv[++i];
        else if (a.starts_with("++set="))
            a.remove_prefix(6);
        else
            continue;
        if (a.starts_with(key)) found = std::string(a.substr(key.size()));
    }
    if (!found.empty()) return found;
    for (const char* var : {"COVERSE_ON_PEER_LOST", "CMI_VMI_ON_PEER_LOST"})
        if (const char* v = std::getenv(var); v && *v) return v;
    return "abort";
}

constexpr const char* usage_text =
    R"(Usage: coverse-run [options] [--] program [arguments...]

Starts one process per PE of a coverse/Converse program, on this host or on the
hosts of a nodelist, and relays their output; the job ends when every PE has
ended, or as soon as one fails (with ON_PEER_LOST=report, only when all have ended).

Options:
  -n N, +pN, +p N    number of PEs (default 1). Like charmrun, +pN or +p N among the
                     program's arguments sets it too (and is passed on unchanged).
  ++local            every PE runs on this host (a ++nodelist is then ignored)
  ++nodelist FILE    start the PEs on the hosts of FILE (charmrun's format: lines
                     'group main' and 'host NAME [++cpus N] [++shell CMD]'), each
                     through the remote shell; PE i takes the i-th slot, cycling
                     over the hosts. See docs/hosts.md
  ++nodegroup NAME   the nodelist's group to use (default main)
  ++remote-shell CMD how to run a command on a host: CMD HOST 'command line'
                     (default ssh; split at spaces, e.g. "ssh -p 2222")
  ++ppn N            N PEs on each host of the nodelist (instead of its ++cpus)
  --fan-out N        at most N remote PEs starting at once (default 10, sshd's
                     MaxStartups; raise both together); a remote
                     shell that exits with 255 before its PE registered is retried
                     (3 attempts, backoff from 0.25 s)
  -v, ++verbose      report start-up, registrations and exits on stderr; every
                     PE prints its address and its path to each peer
  --timings          at the end, say when every PE had started, when every PE had
                     registered, and when the first and the last PE ended
  --prefix           tag each output line with "[PE i] "
  --bind             pin PE i to CPU i mod (CPUs this launcher may use); the program
                     argument +setcpuaffinity does the same
  --timeout SECONDS  how long the PEs have to register (default: CONNECTION_TIMEOUT,
                     300 s)
  --set NAME=VALUE   append "++set NAME=VALUE" to every PE's arguments (repeatable)
  --trace DIR        record every PE's handle lifecycle into DIR (COVERSE_TRACE=DIR);
                     read it with coverse-trace summary|export|leaks|stalls DIR
  --report-stuck-after DURATION
                     once no PE has received a message or run a handler for
                     DURATION (30s, 500ms, 2m; a plain number is seconds), ask every
                     PE what it waits for, print one wait-for report, and stop the
                     job with exit status 124. SIGQUIT to coverse-run (Ctrl-\)
                     prints the same report at any time and the job goes on.
  --json             write reports as JSON instead of text
  --report-to FILE   append reports to FILE instead of stderr
  --dot FILE         also write each report's wait-for graph to FILE (Graphviz
                     DOT: dot -Tsvg FILE); see docs/doctor.md
  -h, --help         print this help and exit
  --version          print the version and exit

Exit status: 0 when every PE exited 0; otherwise the status of the failure that
stopped the job (a PE's exit code, 128+signal for a PE killed by a signal, the
abort's exit code); 1 when a PE never registered; 2 for a usage error; 124 when
--report-stuck-after found the job stuck; 127 when the program cannot be run.
)";

struct usage_error {
    std::string message;
};

// "30s", "500ms", "2m", "1.5" (seconds): a positive duration of at most a day.
std::optional<std::chrono::milliseconds> parse_duration(const std::string& text) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end == text.c_str() || !(v > 0)) return std::nullopt;
    const std::string_view unit = end;
    double ms = 0;
    if (unit.empty() || unit == "s")
        ms = v * 1000.0;
    else if (unit == "ms")
        ms = v;
    else if (unit == "m" || unit == "min")
        ms = v * 60'000.0;
    else
        return std::nullopt;
    if (ms < 1 || ms > 86'400'000.0) return std::nullopt;
    return std::chrono::milliseconds(static_cast<long long>(ms));
}

// Library messages start "coverse: "; ours already say "coverse-run: ".
std::string without_tag(std::string text) {
    constexpr std::string_view tag = "coverse: ";
    if (text.starts_with(tag)) text.erase(0, tag.size());
    return text;
}

std::optional<std::uint32_t> parse_count(std::string_view text) {
    std::uint32_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || v == 0) {
        return std::nullopt;
    }
    return v;
}

std::uint32_t pe_count(std::string_view flag, std::string_view text) {
    const auto v = parse_count(text);
    if (!v) {
        throw usage_error{std::string(flag) + " needs a PE count of 1 or more, not '" +
                          std::string(text) + "'"};
    }
    return *v;
}

struct command_line {
    coverse::net::launch_options opts;
    std::optional<std::uint32_t> num_pes;
    std::optional<double> timeout_seconds;
    std::vector<std::string> sets;
    std::string nodelist;
    std::string nodegroup = "main";
    bool local = false;
    bool help = false;
    bool version = false;
};

command_line parse(int argc, char** argv) {
    command_line cl;
    int i = 1;
    // The value of an option: "--timeout 5", "--timeout=5", and for -n also "-n5".
    auto value = [&](std::string_view arg, std::string_view name) -> std::string {
        if (arg.size() > name.size()) {
            const auto rest = arg.substr(name.size());
            return std::string(rest.front() == '=' ? rest.substr(1) : rest);
        }
        if (i + 1 >= argc) throw usage_error{std::string(name) + " needs a value"};
        return argv[++i];
    };
    for (; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a.empty() || (a[0] != '-' && a[0] != '+')) break;  // the program
        if (a == "-h" || a == "--help") {
            cl.help = true;
        } else if (a == "--version") {
            cl.version = true;
        } else if (a == "-n" || (a.starts_with("-n") && a.size() > 2)) {
            cl.num_pes = pe_count("-n", value(a, "-n"));
        } else if (a == "+p") {
            if (i + 1 >= argc) throw usage_error{"+p needs a PE count (+p 4 or +p4)"};
            cl.num_pes = pe_count("+p", argv[++i]);
        } else if (a.starts_with("+p") && a.size() > 2 && a[2] >= '0' && a[2] <= '9') {
            cl.num_pes = pe_count("+p", a.substr(2));
        } else if (a == "++local") {
            cl.local = true;
        } else if (a == "++nodelist" || a.starts_with("++nodelist=")) {
            cl.nodelist = value(a, "++nodelist");
            if (cl.nodelist.empty()) throw usage_error{"++nodelist needs a file"};
        } else if (a == "++nodegroup" || a.starts_with("++nodegroup=")) {
            cl.nodegroup = value(a, "++nodegroup");
            if (cl.nodegroup.empty()) throw usage_error{"++nodegroup needs a group name"};
        } else if (a == "++remote-shell" || a.starts_with("++remote-shell=")) {
            cl.opts.remote_shell = value(a, "++remote-shell");
            if (cl.opts.remote_shell.find_first_not_of(' ') == std::string::npos)
                throw usage_error{"++remote-shell needs a command (e.g. ssh)"};
        } else if (a == "++ppn" || a.starts_with("++ppn=")) {
            cl.opts.ppn = pe_count("++ppn", value(a, "++ppn"));
        } else if (a == "--fan-out" || a.starts_with("--fan-out=")) {
            cl.opts.fan_out = pe_count("--fan-out", value(a, "--fan-out"));
        } else if (a == "++verbose" || a == "-v" || a == "--verbose") {
            cl.opts.verbose = true;
            cl.opts.extra_env.emplace_back("COVERSE_VERBOSE", "1");  // PE 0 prints its protocols
        } else if (a == "--timings") {
            cl.opts.timings = true;
        } else if (a == "--prefix") {
            cl.opts.prefix = true;
        } else if (a == "--bind") {
            cl.opts.bind = true;
        } else if (a == "--timeout" || a.starts_with("--timeout=")) {
            const std::string v = value(a, "--timeout");
            char* end = nullptr;
            const double s = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(s > 0) || s > 1e9) {
                throw usage_error{"--timeout needs a positive number of seconds, not '" + v + "'"};
            }
            cl.timeout_seconds = s;
        } else if (a == "--trace" || a.starts_with("--trace=")) {
            const std::string v = value(a, "--trace");
            if (v.empty()) throw usage_error{"--trace needs a directory"};
            cl.opts.extra_env.emplace_back("COVERSE_TRACE", v);
        } else if (a == "--report-stuck-after" || a.starts_with("--report-stuck-after=")) {
            const std::string v = value(a, "--report-stuck-after");
            const auto d = parse_duration(v);
            if (!d) {
                throw usage_error{
                    "--report-stuck-after needs a duration such as 30s, 500ms "
                    "or 2m (up to a day), not '" +
                    v + "'"};
            }
            cl.opts.report.stuck_after = *d;
        } else if (a == "--json") {
            cl.opts.report.format = coverse::net::doctor::report_format::json;
        } else if (a == "--report-to" || a.starts_with("--report-to=")) {
            cl.opts.report.report_file = value(a, "--report-to");
            if (cl.opts.report.report_file.empty()) throw usage_error{"--report-to needs a file"};
        } else if (a == "--dot" || a.starts_with("--dot=")) {
            cl.opts.report.dot_file = value(a, "--dot");
            if (cl.opts.report.dot_file.empty()) throw usage_error{"--dot needs a file"};
        } else if (a == "--set" || a.starts_with("--set=")) {
            const std::string v = value(a, "--set");
            const auto eq = v.find('=');
            if (eq == std::string::npos || eq == 0) {
                throw usage_error{"--set needs NAME=VALUE, not '" + v + "'"};
            }
            cl.sets.push_back(v);
        } else {
            throw usage_error{"unknown option '" + std::string(a) + "'"};
        }
    }
    if (cl.help || cl.version) return cl;
    if (i >= argc) throw usage_error{"no program to run"};
    for (; i < argc; ++i)
        cl.opts.argv.emplace_back(argv[i]);
    return cl;
}

}  // namespace

int main(int argc, char** argv) {
    command_line cl;
    try {
        cl = parse(argc, argv);
        if (cl.help) {
            std::fputs(usage_text, stdout);
            return 0;
        }
        if (cl.version) {
            std::printf("coverse-run (coverse) %s\n", COVERSE_VERSION);
            return 0;
        }
        // charmrun style: +pN among the program's arguments sets the PE count too.
        const std::vector<std::string> program_args(cl.opts.argv.begin() + 1, cl.opts.argv.end());
        std::optional<std::uint32_t> from_program;
        try {
            from_program = coverse::net::pe_count_in_args(program_args);
        } catch (const coverse::net::bootstrap_error& e) {
            throw usage_error{without_tag(e.what())};
        }
        if (cl.num_pes && from_program && *cl.num_pes != *from_program) {
            throw usage_error{"conflicting PE counts: " + std::to_string(*cl.num_pes) +
                              " for the launcher but +p" + std::to_string(*from_program) +
                              " among the program's arguments"};
        }
        cl.opts.num_pes = cl.num_pes ? *cl.num_pes : from_program.value_or(1);
        if (!cl.nodelist.empty() && !cl.local) {
            try {
                cl.opts.hosts = coverse::net::read_nodelist(cl.nodelist, cl.nodegroup);
            } catch (const coverse::net::bootstrap_error& e) {
                throw usage_error{without_tag(e.what())};
            }
            cl.opts.nodelist_file = cl.nodelist;
        } else if (cl.opts.ppn && !cl.local) {
            throw usage_error{"++ppn places PEs on the hosts of a ++nodelist; give one"};
        }
        for (const auto& s : cl.sets) {
            cl.opts.argv.emplace_back("++set");
            cl.opts.argv.push_back(s);
        }
        if (cl.timeout_seconds) {
            cl.opts.register_timeout =
                std::chrono::milliseconds(static_cast<long long>(*cl.timeout_seconds * 1000.0));
            cl.opts.timeout_setting = "--timeout (CONNECTION_TIMEOUT when it is not given)";
        } else {
            try {
                cl.opts.register_timeout = coverse::net::connection_timeout_from_env();
            } catch (const std::invalid_argument& e) {
                throw usage_error{without_tag(e.what())};
            }
        }
    } catch (const usage_error& e) {
        std::fprintf(stderr, "coverse-run: %s\n\n%s", e.message.c_str(), usage_text);
        return 2;
    }
    cl.opts.stop_on_pe_failure = peer_lost_policy(cl.opts.argv) != "report";
    try {
        return coverse::net::run_job(cl.opts);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
