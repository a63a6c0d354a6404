// coverse-info: what coverse would use here — its version, io_uring and the features the kernel
// grants, the net backend it would choose and why, RDMA devices and their ports, whether the
// verbs provider can serve, the protocol table for each kind of peer, cores — and, with -c,
// every setting's effective value, where it came from, and warnings for misspelt variables.
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <coverse/net/transport.hpp>
#include <coverse/rdma/layer.hpp>
#include <coverse/rdma/protocols.hpp>
#include <coverse/rdma/shm_ring.hpp>
#include <coverse/rdma/verbs.hpp>
#include <coverse/runtime/reactor.hpp>
#include <coverse/runtime/scheduler.hpp>
#include <coverse/runtime/settings.hpp>

namespace {

namespace settings = coverse::settings;

constexpr const char* usage_text =
    "usage: coverse-info [-c | --config] [--json] [++set NAME=VALUE]...\n"
    "  (no flag)      version, io_uring, the net backend coverse would choose and why,\n"
    "                 RDMA devices and ports, the verbs provider, the protocol table for\n"
    "                 each kind of peer, cores\n"
    "  -c, --config   every setting: its effective value, where it came from (default,\n"
    "                 environment and the variable, command line) and its meaning; then\n"
    "                 warnings for COVERSE_*/CMI_VMI_* variables that name no setting\n"
    "  --json         all of the above as one JSON object\n"
    "  ++set N=V      override setting N for this run, as any coverse program accepts\n"
    "  -h, --help     this text\n"
    "Precedence: ++set N=V > COVERSE_N > N > CMI_VMI_N > default (docs/settings.md).\n"
    "Exit status: 0; 1 when a setting has a malformed value; 2 for a bad command line.\n";

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
    std::vector<coverse::rdma::verbs_device> devices;
    std::string note;  // why there is none
    bool verbs_usable = false;
    std::string verbs_line;  // "mlx5_0 port 1", or why verbs cannot serve
};

// The devices as libibverbs lists them, and whether the verbs provider opens (the same call a
// PE makes at start-up, so "usable" means what a job would get).
rdma_probe probe_rdma(coverse::scheduler& sched) {
    rdma_probe p;
    p.devices = coverse::rdma::list_verbs_devices(&p.note);
    if (p.devices.empty()) p.note += "; the cma/tcp providers serve";
    std::string why;
    p.verbs_usable = coverse::rdma::make_verbs_provider(sched, 0, 2, &why) != nullptr;
    p.verbs_line = why;
    if (p.verbs_usable) {
        for (const auto& d : p.devices)
            for (const auto& port : d.ports)
                if (p.verbs_line.empty() && port.state == "active")
                    p.verbs_line = d.name + " port " + std::to_string(port.number);
    }
    return p;
}

struct protocol_row {
    std::string peer;   // "same host", "other host, verbs", ...
    std::string table;  // protocol_table::describe(), or empty with a note
    std::string note;
};

// One table per kind of peer, built as the layer builds them (layer.cpp table_for) from the
// same settings: SMALL/MEDIUM_MESSAGE_BOUNDARY, RNDV_SPLIT, SHM and RDMA_PROVIDER.
std::vector<protocol_row> protocol_rows(const coverse::rdma::layer_config& cfg, bool verbs) {
    using namespace coverse::rdma;
    const auto table = [&](stream_path path, provider_kind kind) {
        const bool split = kind == provider_kind::cma && path == stream_path::shm_ring;
        std::string t = make_protocol_table(path, kind, cfg.small_boundary, cfg.medium_boundary,
                                            split ? cfg.rndv_split : 0)
                            .describe();
        if (cfg.eager)
            t += "; " + describe_eager(path, kind, cfg.eager_by_put(kind), cfg.eager_short_bytes,
                                       cfg.eager_short_minimum, cfg.eager_slots,
                                       cfg.eager_threshold, cfg.eager_interval_ns);
        return t;
    };
    const auto stops = [](std::string why) { return protocol_row{"", "", std::move(why)}; };
    std::vector<protocol_row> rows;
    const auto same_path = cfg.shm ? stream_path::shm_ring : stream_path::connection;
    if (cfg.forced == provider_kind::verbs && !verbs) {
        protocol_row r = stops(
            "RDMA_PROVIDER=verbs, but verbs cannot serve here: a job of two or "
            "more PEs stops at start-up");
        r.peer = "every peer";
        return {r};
    }
    rows.push_back({"same host", table(same_path, cfg.forced.value_or(provider_kind::cma)), ""});
    if (cfg.forced == provider_kind::cma) {
        protocol_row r = stops(
            "cma reaches same-host peers only: a job across hosts stops at "
            "start-up");
        r.peer = "other host";
        rows.push_back(r);
        return rows;
    }
    if (verbs || cfg.forced == provider_kind::verbs)
        rows.push_back({"other host, verbs",
                        table(stream_path::connection, cfg.forced.value_or(provider_kind::verbs)),
                        ""});
    if (cfg.forced != provider_kind::verbs)
        rows.push_back({"other host, no verbs",
                        table(stream_path::connection, cfg.forced.value_or(provider_kind::tcp)),
                        ""});
    return rows;
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

// "auto: same host cma, ...", or what forces one provider and where that came from.
std::string provider_choice(const coverse::rdma::layer_config& cfg) {
    if (!cfg.forced)
        return "RDMA_PROVIDER=auto: same host cma, other hosts verbs where both PEs can use it, "
               "else tcp";
    return "RDMA_PROVIDER=" + std::string(coverse::rdma::to_string(*cfg.forced)) + " (" +
           from_text(settings::resolve("RDMA_PROVIDER")) + "): every peer uses it";
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

    const rdma_probe rdma = probe_rdma(sched);
    if (rdma.devices.empty()) std::printf("RDMA devices  %s\n", rdma.note.c_str());
    for (std::size_t i = 0; i < rdma.devices.size(); ++i) {
        const auto& d = rdma.devices[i];
        std::printf("%s%s (GUID %s)\n", i == 0 ? "RDMA devices  " : "              ",
                    d.name.c_str(), d.node_guid.c_str());
        for (const auto& port : d.ports)
            std::printf("                port %u: %s, %s, LID %u, MTU %s\n", port.number,
                        port.state.c_str(), port.link_layer.c_str(), port.lid,
                        port.active_mtu.c_str());
    }
    std::printf("verbs         %s: %s\n", rdma.verbs_usable ? "usable" : "not usable",
                rdma.verbs_line.c_str());
    try {
        const auto cfg = coverse::rdma::layer_config::from_settings();
        std::printf("protocols     %s\n", provider_choice(cfg).c_str());
        for (const protocol_row& r : protocol_rows(cfg, rdma.verbs_usable))
            std::printf("              %-21s %s\n", (r.peer + ":").c_str(),
                        r.table.empty() ? r.note.c_str() : r.table.c_str());
    } catch (const std::exception& e) {
        std::printf("protocols     cannot be shown: %s\n", e.what());
    }
    std::printf("shm wake-up   %s\n",
                coverse::rdma::shm_heavy_fence_ready()
                    ? "membarrier (global expedited): a sleeping PE's senders fence nothing "
                      "per message"
                    : "full fences: membarrier's global expedited command is unavailable here "
                      "(each same-host message pays a fence)");
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
    const core_count cores = count_cores();
    coverse::scheduler sched(coverse::scheduler_options::from_env());
    const auto net = coverse::net::describe_backend_choice(sched);
    const rdma_probe rdma = probe_rdma(sched);

    std::printf("{\n  \"version\": %s,\n", quoted(COVERSE_VERSION).c_str());
    std::printf("  \"io_uring\": {\"available\": %s, \"used\": %s, \"reason\": %s, ",
                uring.available ? "true" : "false", sched.io() ? "true" : "false",
                quoted(uring.available ? sched.io_unavailable_reason() : uring.why_not).c_str());
    std::printf("\"entries\": %u, \"features\": %s},\n", uring.features.entries,
                string_array(coverse::reactor::feature_names(uring.features)).c_str());
    std::printf("  \"net\": {\"backend\": %s, \"why\": %s, \"details\": %s, \"asked_by\": %s},\n",
                quoted(net.name).c_str(), quoted(net.why).c_str(), quoted(net.details).c_str(),
                quoted(net.asked_by).c_str());
    std::vector<std::string> names;
    std::string ports;
    for (const auto& d : rdma.devices) {
        names.push_back(d.name);
        for (const auto& p : d.ports)
            ports +=
                std::string(ports.empty() ? "" : ", ") + "{\"device\": " + quoted(d.name) +
                ", \"guid\": " + quoted(d.node_guid) + ", \"port\": " + std::to_string(p.number) +
                ", \"state\": " + quoted(p.state) + ", \"link_layer\": " + quoted(p.link_layer) +
                ", \"lid\": " + std::to_string(p.lid) + ", \"mtu\": " + quoted(p.active_mtu) + "}";
    }
    std::string protocols, choice;
    try {
        const auto cfg = coverse::rdma::layer_config::from_settings();
        choice = provider_choice(cfg);
        for (const protocol_row& r : protocol_rows(cfg, rdma.verbs_usable))
            protocols += std::string(protocols.empty() ? "" : ", ") +
                         "{\"peer\": " + quoted(r.peer) + ", \"table\": " + quoted(r.table) +
                         ", \"note\": " + quoted(r.note) + "}";
    } catch (const std::exception& e) {
        choice = std::string("cannot be shown: ") + e.what();
    }
    std::printf("  \"rdma\": {\"checked\": true, \"devices\": %s, \"note\": %s, \"ports\": [%s],\n",
                string_array(names).c_str(), quoted(rdma.note).c_str(), ports.c_str());
    std::printf("           \"verbs\": {\"usable\": %s, \"why\": %s},\n",
                rdma.verbs_usable ? "true" : "false",
                quoted(rdma.verbs_usable ? "" : rdma.verbs_line).c_str());
    std::printf("           \"provider\": %s, \"protocols\": [%s]},\n", quoted(choice).c_str(),
                protocols.c_str());
    std::printf("  \"shm_sleep_fence\": %s,\n",
                quoted(coverse::rdma::shm_heavy_fence_ready() ? "membarrier" : "full").c_str());
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
