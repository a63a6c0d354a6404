// interfaces: the NETWORK_INTERFACE filter, this host's IPv4 addresses, the choice of the
// address a multi-host job listens on, and the host identity (HOST_ID, else machine id and
// network namespace). Rules and examples: docs/hosts.md.
#include <coverse/net/interfaces.hpp>

#include <arpa/inet.h>
#include <fnmatch.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <stdexcept>

#include <coverse/alloc/config.hpp>

namespace coverse::net {

namespace {

constexpr std::string_view setting_name = "NETWORK_INTERFACE";

// Bridges a host makes for its own containers and VMs: an address there reaches nothing
// on another host, so a multi-host job does not pick one unless an include item asks.
constexpr std::string_view host_bridges[] = {"docker*", "virbr*", "br-*", "lxcbr*", "cni*"};

bool glob_matches(std::string_view glob, const std::string& name) {
    return ::fnmatch(std::string(glob).c_str(), name.c_str(), 0) == 0;
}

bool is_host_bridge(const std::string& name) {
    for (auto g : host_bridges)
        if (glob_matches(g, name)) return true;
    return false;
}

std::uint64_t fnv1a(std::string_view text) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (char c : text) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3ull;
    }
    return h;
}

std::string with_prefix(const interface_address& a) {
    return a.name + " " + a.ip + "/" + std::to_string(a.prefix_length);
}

}  // namespace

std::vector<interface_address> local_interfaces() {
    std::vector<interface_address> out;
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return out;
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
        if ((i->ifa_flags & IFF_UP) == 0) continue;
        interface_address a;
        a.name = i->ifa_name;
        const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
        a.address = ntohl(sin->sin_addr.s_addr);
        char text[INET_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET, &sin->sin_addr, text, sizeof text);
        a.ip = text;
        if (i->ifa_netmask != nullptr) {
            const std::uint32_t mask =
                ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
            a.prefix_length = static_cast<std::uint32_t>(__builtin_popcount(mask));
        }
        a.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0 || (a.address >> 24) == 127;
        out.push_back(std::move(a));
    }
    ::freeifaddrs(list);
    return out;
}

bool interface_filter::item::matches(const interface_address& a) const {
    if (!name_glob.empty()) return glob_matches(name_glob, a.name);
    const std::uint32_t mask = prefix_length == 0 ? 0 : ~0u << (32 - prefix_length);
    return (a.address & mask) == (network & mask);
}

bool interface_filter::has_includes() const noexcept {
    for (const auto& i : _items)
        if (!i.exclude) return true;
    return false;
}

interface_filter interface_filter::parse(std::string_view text) {
    interface_filter f;
    f._text = std::string(text);
    auto bad = [&](std::string_view item, std::string_view why) {
        throw std::invalid_argument(
            "coverse: NETWORK_INTERFACE=" + std::string(text) + ": item '" + std::string(item) +
            "' " + std::string(why) +
            "; items are interface names or globs (eth0, ib*), IPv4 CIDR blocks "
            "(10.1.0.0/16), each optionally preceded by ^ to exclude, separated by commas");
    };
    while (!text.empty()) {
        const auto comma = text.find(',');
        std::string_view raw = text.substr(0, comma);
        text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
        while (!raw.empty() && raw.front() == ' ')
            raw.remove_prefix(1);
        while (!raw.empty() && raw.back() == ' ')
            raw.remove_suffix(1);
        if (raw.empty()) continue;
        item it;
        std::string_view body = raw;
        if (body.front() == '^') {
            it.exclude = true;
            body.remove_prefix(1);
            if (body.empty()) bad(raw, "excludes nothing");
        }
        const bool looks_numeric = body.front() >= '0' && body.front() <= '9';
        if (looks_numeric) {
            const auto slash = body.find('/');
            const std::string ip(body.substr(0, slash));
            in_addr addr{};
            if (::inet_pton(AF_INET, ip.c_str(), &addr) != 1) bad(raw, "is not an IPv4 address");
            it.network = ntohl(addr.s_addr);
            it.prefix_length = 32;
            if (slash != std::string_view::npos) {
                const auto len = body.substr(slash + 1);
                std::uint32_t v = 0;
                const auto [end, ec] = std::from_chars(len.data(), len.data() + len.size(), v);
                if (len.empty() || ec != std::errc{} || end != len.data() + len.size() || v > 32)
                    bad(raw, "has a prefix length that is not 0..32");
                it.prefix_length = v;
            }
        } else {
            if (body.size() >= IF_NAMESIZE + 8) bad(raw, "is too long for an interface name");
            it.name_glob = std::string(body);
        }
        f._items.push_back(std::move(it));
    }
    return f;
}

std::optional<address_choice> choose_address(const interface_filter& filter,
                                             const std::vector<interface_address>& candidates,
                                             std::string_view preferred) {
    auto excluded = [&](const interface_address& a) {
        for (const auto& i : filter.items())
            if (i.exclude && i.matches(a)) return true;
        return false;
    };
    auto pick = [&](auto&& fits) -> const interface_address* {
        const interface_address* first = nullptr;
        for (const auto& a : candidates) {
            if (excluded(a) || !fits(a)) continue;
            if (a.ip == preferred) return &a;
            if (!first) first = &a;
        }
        return first;
    };
    if (filter.has_includes()) {
        // Include items are a preference order: the first one that matches decides.
        for (const auto& i : filter.items()) {
            if (i.exclude) continue;
            const auto* a = pick([&](const interface_address& c) { return i.matches(c); });
            if (!a) continue;
            const std::string item_text =
                i.name_glob.empty() ? "the CIDR item" : "the interface item";
            return address_choice{*a, item_text + " of " + interface_setting_text()};
        }
        return std::nullopt;
    }
    const auto* a =
        pick([](const interface_address& c) { return !c.loopback && !is_host_bridge(c.name); });
    if (!a) return std::nullopt;
    const std::string why = a->ip == preferred
                                ? "the interface that reaches the launcher or the CRM"
                                : "the first interface up (not loopback, not a host bridge)";
    return address_choice{*a, why};
}

std::string describe_no_address(const interface_filter& filter,
                                const std::vector<interface_address>& candidates) {
    std::string have;
    for (const auto& a : candidates)
        have += (have.empty() ? "" : ", ") + with_prefix(a);
    if (have.empty()) have = "no IPv4 interface that is up";
    std::string why = filter.has_includes()
                          ? "no interface matches " + interface_setting_text()
                          : "no interface fits a multi-host job (loopback and the host bridges "
                            "docker*, virbr*, br-*, lxcbr*, cni* are skipped unless "
                            "NETWORK_INTERFACE names them; " +
                                interface_setting_text() + ")";
    return why + "; this host has " + have +
           "; set NETWORK_INTERFACE to one of those names or to a CIDR block such as 10.0.0.0/24";
}

std::string interface_setting_text() {
    const auto v = alloc::env_setting(setting_name);
    if (!v || v->value.empty()) return std::string(setting_name) + " (unset)";
    return std::string(setting_name) + "=" + v->value + " (" + v->variable + ")";
}

interface_filter interface_filter_from_env() {
    const auto v = alloc::env_setting(setting_name);
    return interface_filter::parse(v ? v->value : std::string());
}

std::string socket_local_ip(int fd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (fd < 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
        a.sin_family != AF_INET)
        return {};
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    return text;
}

bool is_loopback_host(std::string_view host) {
    if (host == "localhost") return true;
    in_addr addr{};
    const std::string h(host);
    if (::inet_pton(AF_INET, h.c_str(), &addr) != 1) return false;
    return (ntohl(addr.s_addr) >> 24) == 127;
}

host_identity local_host_identity() {
    if (const auto v = alloc::env_setting("HOST_ID"); v && !v->value.empty())
        return {fnv1a("host-id:" + v->value), "HOST_ID=" + v->value + " (" + v->variable + ")"};
    std::string base;
    std::string source;
    for (const char* path : {"/etc/machine-id", "/var/lib/dbus/machine-id"}) {
        std::ifstream in(path);
        if (in >> base && !base.empty()) {
            source = path;
            break;
        }
    }
    if (base.empty()) {
        char host[256] = {};
        if (::gethostname(host, sizeof host - 1) == 0) base = host;
        source = "host name " + base;
    }
    // Two network namespaces of one machine are two hosts for coverse: their loopback
    // listeners cannot reach each other.
    struct stat ns {};
    if (::stat("/proc/self/ns/net", &ns) == 0) {
        base += ":netns:" + std::to_string(ns.st_ino);
        source += " + network namespace " + std::to_string(ns.st_ino);
    }
    return {fnv1a(base), source};
}

}  // namespace coverse::net
