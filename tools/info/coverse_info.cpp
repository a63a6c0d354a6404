// coverse-info: what coverse would use here — its version, io_uring and the features the kernel
// grants, the net backend it would choose and why, RDMA devices, cores — and, with -c, every
// setting's effective value, where it came from, and warnings for misspelt variables.
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if COVERSE_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif

#include <coverse/net/transport.hpp>
#include <coverse/runtime/reactor.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/settings.hpp>

namespace {

namespace settings = coverse::settings;

constexpr const char* usage_text =
    "usage: coverse-info [-c | --config] [--json] [++set NAME=VALUE]...\n"
    "  (no flag)      version, io_uring, the net backend coverse would choose and why,\n"
    "                 RDMA devices, cores\n"
    "  -c, --config   every setting: its effective value, where it came from (default,\n"
    "                 environment and the variable, command line) and its meaning; then\n"
    "                 warnings for COVERSE_*/CMI_VMI_* variables that name no setting\n"
    "  --json         all of the above as one JSON object\n"
    "  ++set N=V      override setting N for this run, as any coverse program accepts\n"
    "  -h, --help     this text\n"
    "Precedence: ++set N=V > COVERSE_N > N > CMI_VMI_N > default (docs/settings.md).\n"
    "Exit status: 0; 1 when a setting has a malformed value; 2 for a bad command line.\n";

constexpr std::string_view no_rdma_devices =
    "no RDMA devices found (the kernel has no InfiniBand support or no device); the cma/tcp "
    "providers serve";

// ---- what is probed -------------------------------------------------------------------------

struct uring_probe {
    bool available = false;
    std::string why_not;  // when unavailable
    coverse::reactor_features features;
    std::string line;  // reactor::describe()
};

// The kernel's answer, independent of the IO_URING setting (which only says whether coverse
// uses it).
uring_probe probe_uring() {
    uring_probe p;
    if (auto r = coverse::reactor::create(256, &p.why_not)) {
        p.available = true;
        p.features = r->features();
        p.line = r->describe();
        constexpr std::string_view prefix = "io_uring: ";
        if (p.line.starts_with(prefix)) p.line.erase(0, prefix.size());
    }
    return p;
}

struct rdma_probe {
    bool checked = false;
    std::vector<std::string> devices;
    std::string note;
};

rdma_probe probe_rdma() {
    rdma_probe p;
#if COVERSE_HAVE_IBVERBS
    p.checked = true;
    int n = 0;
    // Null (errno set) when the kernel has no verbs support at all: the same answer for us.
    if (ibv_device** list = ibv_get_device_list(&n)) {
        for (int i = 0; i < n; ++i)
            p.devices.emplace_back(ibv_get_device_name(list[i]));
        ibv_free_device_list(list);
    }
    if (p.devices.empty()) p.note = no_rdma_devices;
#else
    p.note =
        "not checked: coverse-info was built without libibverbs (install libibverbs-dev and "
        "reconfigure); the cma/tcp providers serve";
#endif
    return p;
}

struct core_count {
    unsigned online = 0;
    unsigned usable = 0;  // in this process's affinity mask
};

core_count count_cores() {
    core_count c;
    c.online = std::thread::hardware_concurrency();
    cpu_set_t set;
    CPU_ZERO(&set);
    c.usable = sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set))
                                                           : c.online;
    return c;
}

struct setting_row {
    const settings::setting_info* info;
    settings::resolved value;
    std::optional<std::string> error;  // the whole message, naming the variable
};

std::vector<setting_row> resolve_all() {
    std::vector<setting_row> rows;
    for (const settings::setting_info& s : settings::all()) {
        setting_row row{&s, settings::resolve(s.name), std::nullopt};
        if (row.value.from != settings::source::default_value) {
            if (auto problem = settings::check(s, row.value.value))
                row.error = "coverse: " + row.value.variable + "='" + row.value.value +
                            "' is not a valid " + row.value.name + ": " + *problem;
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

std::string from_text(const settings::resolved& r) {
    if (r.from == settings::source::default_value) return "default";
    return std::string(settings::to_string(r.from)) + " (" + r.variable + ")";
}

std::string shown_value(const std::string& v) {
    return v.empty() ? "\"\"" : v;
}

// ---- text output ----------------------------------------------------------------------------

void print_warnings(const std::vector<setting_row>& rows,
                    const std::vector<std::string>& warnings) {
    std::vector<std::string> lines;
    for (const setting_row& row : rows) {
        if (row.error) lines.push_back(*row.error);
        for (const std::string& ignored : row.value.shadowed)
            lines.push_back("coverse: " + ignored + " is ignored: " + row.value.variable + "=" +
                            row.value.value + " takes precedence");
    }
    lines.insert(lines.end(), warnings.begin(), warnings.end());
    if (lines.empty()) return;
    std::printf("\nwarnings:\n");
    for (const std::string& line : lines)
        std::printf("  %s\n", line.c_str());
}

void print_overview(const std::vector<setting_row>& rows,
                    const std::vector<std::string>& warnings) {
    const uring_probe uring = probe_uring();
    const rdma_probe rdma = probe_rdma();
    const core_count cores = count_cores();

    std::printf("coverse       %s\n", COVERSE_VERSION);
    if (uring.available) {
        std::printf("io_uring      available: %s\n", uring.line.c_str());
    } else {
        std::printf("io_uring      unavailable: %s\n", uring.why_not.c_str());
    }

    coverse::scheduler sched(coverse::scheduler_options::from_env());
    if (!sched.io() && uring.available)
        std::printf("              coverse does not use it: %s\n",
                    sched.io_unavailable_reason().c_str());
    const auto net = coverse::net::describe_backend_choice(sched);
    std::printf("net           %s\n", net.why.c_str());
    if (!net.asked_by.empty()) {
        std::printf("              asked for by %s\n", net.asked_by.c_str());
    } else if (!net.name.empty()) {
        std::printf(
            "              NET_BACKEND=auto (the default): io_uring where the scheduler has a "
            "ring, else asio\n");
    }
    if (!net.details.empty()) std::printf("              %s\n", net.details.c_str());

    if (!rdma.devices.empty()) {
        std::string names;
        for (const std::string& d : rdma.devices)
            names += (names.empty() ? "" : ", ") + d;
        std::printf("RDMA devices  %s\n", names.c_str());
    } else {
        std::printf("RDMA devices  %s\n", rdma.note.c_str());
    }
    std::printf("cores         %u online, %u usable by this process\n", cores.online, cores.usable);

    std::size_t from_env = 0, from_command_line = 0;
    for (const setting_row& row : rows) {
        from_env += row.value.from == settings::source::environment;
        from_command_line += row.value.from == settings::source::command_line;
    }
    std::printf(
        "settings      %zu of %zu set (%zu by the environment, %zu on the command line); "
        "coverse-info -c lists them\n",
        from_env + from_command_line, rows.size(), from_env, from_command_line);
    print_warnings(rows, warnings);
}

void print_config(const std::vector<setting_row>& rows, const std::vector<std::string>& warnings) {
    struct line {
        std::string name, value, type, from, layer, meaning;
    };
    std::vector<line> lines{{"SETTING", "VALUE", "TYPE", "FROM", "LAYER", "MEANING"}};
    bool any_planned = false;
    for (const setting_row& row : rows) {
        any_planned |= row.info->planned;
        lines.push_back({row.value.name, shown_value(row.value.value),
                         std::string(settings::to_string(row.info->type)), from_text(row.value),
                         std::string(row.info->layer) + (row.info->planned ? "*" : ""),
                         std::string(row.info->meaning)});
    }
    std::size_t w_name = 0, w_value = 0, w_type = 0, w_from = 0, w_layer = 0;
    for (const line& l : lines) {
        w_name = std::max(w_name, l.name.size());
        w_value = std::max(w_value, l.value.size());
        w_type = std::max(w_type, l.type.size());
        w_from = std::max(w_from, l.from.size());
        w_layer = std::max(w_layer, l.layer.size());
    }
    for (const line& l : lines)
        std::printf("%-*s  %-*s  %-*s  %-*s  %-*s  %s\n", static_cast<int>(w_name), l.name.c_str(),
                    static_cast<int>(w_value), l.value.c_str(), static_cast<int>(w_type),
                    l.type.c_str(), static_cast<int>(w_from), l.from.c_str(),
                    static_cast<int>(w_layer), l.layer.c_str(), l.meaning.c_str());
    if (any_planned)
        std::printf("\n* not read yet: the layer named will read it (docs/settings.md)\n");
    std::printf("precedence: ++set NAME=VALUE > COVERSE_NAME > NAME > CMI_VMI_NAME > default\n");
    print_warnings(rows, warnings);
}

// ---- JSON output ----------------------------------------------------------------------------

std::string quoted(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
    return out + "\"";
}

std::string string_array(const std::vector<std::string>& items) {
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); ++i)
        out += (i ? ", " : "") + quoted(items[i]);
    return out + "]";
}

void print_json(const std::vector<setting_row>& rows, const std::vector<std::string>& warnings) {
    const uring_probe uring = probe_uring();
    const rdma_probe rdma = probe_rdma();
    const core_count cores = count_cores();
    coverse::scheduler sched(coverse::scheduler_options::from_env());
    const auto net = coverse::net::describe_backend_choice(sched);

    std::printf("{\n  \"version\": %s,\n", quoted(COVERSE_VERSION).c_str());
    std::printf("  \"io_uring\": {\"available\": %s, \"used\": %s, \"reason\": %s, ",
                uring.available ? "true" : "false", sched.io() ? "true" : "false",
                quoted(uring.available ? sched.io_unavailable_reason() : uring.why_not).c_str());
    std::printf("\"entries\": %u, \"features\": %s},\n", uring.features.entries,
                string_array(coverse::reactor::feature_names(uring.features)).c_str());
    std::printf("  \"net\": {\"backend\": %s, \"why\": %s, \"details\": %s, \"asked_by\": %s},\n",
                quoted(net.name).c_str(), quoted(net.why).c_str(), quoted(net.details).c_str(),
                quoted(net.asked_by).c_str());
    std::printf("  \"rdma\": {\"checked\": %s, \"devices\": %s, \"note\": %s},\n",
                rdma.checked ? "true" : "false", string_array(rdma.devices).c_str(),
                quoted(rdma.note).c_str());
    std::printf("  \"cores\": {\"online\": %u, \"usable\": %u},\n", cores.online, cores.usable);
    std::printf("  \"settings\": {\n");
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const setting_row& row = rows[i];
        const settings::setting_info& s = *row.info;
        std::printf(
            "    %s: {\"value\": %s, \"source\": %s, \"variable\": %s, \"default\": %s, "
            "\"type\": %s, \"layer\": %s, \"planned\": %s, \"meaning\": %s, \"error\": %s, "
            "\"shadowed\": %s}%s\n",
            quoted(s.name).c_str(), quoted(row.value.value).c_str(),
            quoted(settings::to_string(row.value.from)).c_str(), quoted(row.value.variable).c_str(),
            quoted(s.default_value).c_str(), quoted(settings::to_string(s.type)).c_str(),
            quoted(s.layer).c_str(), s.planned ? "true" : "false", quoted(s.meaning).c_str(),
            row.error ? quoted(*row.error).c_str() : "null",
            string_array(row.value.shadowed).c_str(), i + 1 < rows.size() ? "," : "");
    }
    std::printf("  },\n  \"warnings\": %s\n}\n", string_array(warnings).c_str());
}

int usage_error(const std::string& what) {
    std::fprintf(stderr, "coverse-info: %s\n%s", what.c_str(), usage_text);
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        settings::consume_command_line(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
    bool config = false, json = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            std::fputs(usage_text, stdout);
            return 0;
        }
        if (arg == "-c" || arg == "--config") {
            config = true;
        } else if (arg == "--json") {
            json = true;
        } else {
            return usage_error("unknown argument '" + std::string(arg) + "'");
        }
    }
    try {
        const std::vector<setting_row> rows = resolve_all();
        const std::vector<std::string> warnings = settings::unknown_environment_warnings();
        if (json) {
            print_json(rows, warnings);
        } else if (config) {
            print_config(rows, warnings);
        } else {
            print_overview(rows, warnings);
        }
        for (const setting_row& row : rows)
            if (row.error) return 1;
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "coverse-info: %s\n", e.what());
        return 1;
    }
}
