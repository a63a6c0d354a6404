// interfaces: which address a PE (or the launcher) of a multi-host job listens on — the
// NETWORK_INTERFACE filter (names, globs or CIDR blocks; include and ^exclude items), this
// host's IPv4 interfaces, the choice among them — and the host identity that decides which
// peers share memory. How to use it: docs/hosts.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coverse::net {

/// One IPv4 address of one interface that is up.
struct interface_address {
    std::string name;           // "eth0"
    std::string ip;             // "10.0.0.7"
    std::uint32_t address = 0;  // host byte order
    std::uint32_t prefix_length = 32;
    bool loopback = false;
};

/// This host's IPv4 addresses on interfaces that are up, in getifaddrs order.
std::vector<interface_address> local_interfaces();

/// The parsed NETWORK_INTERFACE setting: a comma-separated list of items, each an interface
/// name (a shell glob: `eth*`) or an IPv4 CIDR block (`10.1.0.0/16`); an item that starts
/// with `^` excludes what it matches. Includes are a preference order: the first include
/// item that matches some address decides. With no include item every interface may serve,
/// except loopback and the host bridges (`docker*`, `virbr*`, `br-*`, `lxcbr*`, `cni*`)
/// unless an include item names them.
class interface_filter {
public:
    /// Throws std::invalid_argument naming the item and the accepted forms.
    static interface_filter parse(std::string_view text);

    struct item {
        bool exclude = false;
        std::string name_glob;  // empty for a CIDR item
        std::uint32_t network = 0;
        std::uint32_t prefix_length = 0;
        bool matches(const interface_address& a) const;
    };
    const std::vector<item>& items() const noexcept { return _items; }
    bool has_includes() const noexcept;
    std::string text() const { return _text; }

private:
    std::vector<item> _items;
    std::string _text;
};

/// The result of choose_address.
struct address_choice {
    interface_address chosen;
    std::string why;  // "NETWORK_INTERFACE item 10.1.0.0/16", "the route to the launcher"
};

/// Picks the address to listen on among `candidates` under `filter`. `preferred` (the local
/// address of the socket that reaches the launcher or the CRM) wins a tie. nullopt when nothing
/// fits; describe_no_address then says what was there.
std::optional<address_choice> choose_address(const interface_filter& filter,
                                             const std::vector<interface_address>& candidates,
                                             std::string_view preferred = {});
/// "no interface matches NETWORK_INTERFACE=eth9 (this host has lo 127.0.0.1/8, eth0
/// 10.0.0.7/24); name one of them, or a CIDR block such as 10.0.0.0/24"
std::string describe_no_address(const interface_filter& filter,
                                const std::vector<interface_address>& candidates);

/// The NETWORK_INTERFACE setting's value and where it came from, for error texts:
/// "NETWORK_INTERFACE=eth0 (COVERSE_NETWORK_INTERFACE)" or "NETWORK_INTERFACE (unset)".
std::string interface_setting_text();
/// The parsed NETWORK_INTERFACE setting (empty filter when unset).
interface_filter interface_filter_from_env();

/// The local IPv4 address of a connected socket ("10.0.0.7"), or "" when it has none.
std::string socket_local_ip(int fd);

/// True for 127.0.0.0/8 and "localhost".
bool is_loopback_host(std::string_view host);

/// Where the host identity came from, for ++verbose and coverse-info.
struct host_identity {
    std::uint64_t id = 0;
    std::string
        source;  // "HOST_ID=a (COVERSE_HOST_ID)", "/etc/machine-id + net namespace 4026531992"
};
/// This process's host identity. Equal ids mean "same host": the pair shares memory (rings,
/// cma). HOST_ID, when set, is the identity; otherwise /etc/machine-id (or the host name)
/// together with the inode of the network namespace, because processes in two network
/// namespaces of one machine cannot reach each other's loopback listeners and are, for
/// coverse, two hosts (the test bed in tests/hosts relies on it).
host_identity local_host_identity();

}  // namespace coverse::net
