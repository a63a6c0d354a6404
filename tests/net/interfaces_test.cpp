// interfaces: NETWORK_INTERFACE parsing, the choice of a multi-host job's address among a
// given list of interfaces (include order, excludes, host bridges, the launcher's route),
// the nodelist reader and PE placement, and HOST_ID as the host identity.
#include <coverse/net/interfaces.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include <coverse/net/bootstrap.hpp>

namespace {

using namespace coverse::net;

interface_address iface(std::string name, std::string ip, std::uint32_t a, std::uint32_t len,
                        bool loopback = false) {
    return interface_address{std::move(name), std::move(ip), a, len, loopback};
}

std::vector<interface_address> sample() {
    return {iface("lo", "127.0.0.1", 0x7F000001, 8, true),
            iface("docker0", "172.17.0.1", 0xAC110001, 16),
            iface("eth0", "10.0.0.7", 0x0A000007, 24), iface("ib0", "10.1.0.7", 0x0A010007, 16)};
}

std::string chosen(std::string_view filter, std::string_view preferred = {}) {
    const auto c = choose_address(interface_filter::parse(filter), sample(), preferred);
    return c ? c->chosen.name : "none";
}

TEST(interface_filter, default_skips_loopback_and_host_bridges) {
    EXPECT_EQ(chosen(""), "eth0");
    EXPECT_EQ(chosen("", "10.1.0.7"), "ib0");  // the route to the launcher wins
    EXPECT_EQ(chosen("^eth0"), "ib0");
    EXPECT_EQ(chosen("^eth*,^ib*"), "none");
}

TEST(interface_filter, includes_are_a_preference_order) {
    EXPECT_EQ(chosen("ib0,eth0"), "ib0");
    EXPECT_EQ(chosen("eth9,eth0"), "eth0");
    EXPECT_EQ(chosen("10.1.0.0/16"), "ib0");
    EXPECT_EQ(chosen("10.0.0.0/8"), "eth0");             // first match in interface order
    EXPECT_EQ(chosen("10.0.0.0/8", "10.1.0.7"), "ib0");  // ... unless the launcher's route
    EXPECT_EQ(chosen("10.0.0.0/8,^eth0"), "ib0");
    EXPECT_EQ(chosen("docker0"), "docker0");  // asked for by name: allowed
    EXPECT_EQ(chosen("lo"), "lo");
    EXPECT_EQ(chosen("192.168.0.0/16"), "none");
}

TEST(interface_filter, malformed_items_are_named) {
    for (const char* bad : {"10.0.0/8", "10.0.0.0/33", "10.0.0.0/x", "^", "eth0,^"}) {
        SCOPED_TRACE(bad);
        try {
            (void)interface_filter::parse(bad);
            ADD_FAILURE() << "accepted";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("NETWORK_INTERFACE="), std::string::npos);
            EXPECT_NE(std::string(e.what()).find("CIDR"), std::string::npos);
        }
    }
}

TEST(interface_filter, no_address_says_what_there_is) {
    const auto text = describe_no_address(interface_filter::parse("eth9"), sample());
    EXPECT_NE(text.find("no interface matches NETWORK_INTERFACE"), std::string::npos);
    EXPECT_NE(text.find("eth0 10.0.0.7/24"), std::string::npos);
}

TEST(interfaces, loopback_hosts_and_this_host) {
    EXPECT_TRUE(is_loopback_host("127.0.0.1"));
    EXPECT_TRUE(is_loopback_host("127.8.9.10"));
    EXPECT_TRUE(is_loopback_host("localhost"));
    EXPECT_FALSE(is_loopback_host("10.0.0.1"));
    EXPECT_FALSE(is_loopback_host("node01"));
    bool lo = false;
    for (const auto& a : local_interfaces())
        lo = lo || a.loopback;
    EXPECT_TRUE(lo) << "this host's interfaces list no loopback";
}

TEST(host_identity, host_id_overrides_machine_id_and_namespace) {
    ::unsetenv("COVERSE_HOST_ID");
    const auto plain = local_host_identity();
    EXPECT_NE(plain.source.find("network namespace"), std::string::npos);
    ::setenv("COVERSE_HOST_ID", "box-a", 1);
    const auto a = local_host_identity();
    ::setenv("COVERSE_HOST_ID", "box-b", 1);
    const auto b = local_host_identity();
    ::unsetenv("COVERSE_HOST_ID");
    EXPECT_NE(a.id, b.id);
    EXPECT_NE(a.id, plain.id);
    EXPECT_EQ(a.source, "HOST_ID=box-a (COVERSE_HOST_ID)");
    EXPECT_EQ(local_machine_id(), plain.id);
}

std::string write_file(const std::string& text) {
    char path[] = "/tmp/coverse-nodelist-XXXXXX";
    const int fd = ::mkstemp(path);
    EXPECT_GE(fd, 0);
    std::FILE* f = ::fdopen(fd, "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
    return path;
}

TEST(nodelist, charmrun_format_and_placement) {
    const auto path = write_file(
        "# a comment\nhost early\ngroup main ++shell ssh -p 2222\nhost a ++cpus 2\n"
        "host b ++shell rsh\n\ngroup other\nhost c\n");
    const auto hosts = read_nodelist(path);
    ASSERT_EQ(hosts.size(), 3u);
    EXPECT_EQ(hosts[0].name, "early");
    EXPECT_EQ(hosts[0].shell, "");
    EXPECT_EQ(hosts[1].name, "a");
    EXPECT_EQ(hosts[1].cpus, 2u);
    EXPECT_EQ(hosts[1].shell, "ssh -p 2222");
    EXPECT_EQ(hosts[1].origin, path + ":4");
    EXPECT_EQ(hosts[2].shell, "rsh");
    EXPECT_EQ(read_nodelist(path, "other").at(0).name, "c");
    // Slots: early 1, a 2, b 1 -> early a a b early ...
    EXPECT_EQ(place_pes(hosts, 6, std::nullopt), (std::vector<std::size_t>{0, 1, 1, 2, 0, 1}));
    EXPECT_EQ(place_pes(hosts, 7, 2u), (std::vector<std::size_t>{0, 0, 1, 1, 2, 2, 0}));
    std::remove(path.c_str());
}

TEST(nodelist, bad_lines_name_file_and_line) {
    for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
             {"group main\nhots a\n", ":2: unknown keyword 'hots'"},
             {"host a ++cpus 0\n", ":1: ++cpus needs a count of 1 to 65536, not '0'"},
             {"host a ++cpus\n", ":1: ++cpus needs a count"},
             {"host\n", ":1: 'host' needs a name"},
             {"host a ++pathfix x y\n", "option '++pathfix' is not supported"},
             {"group x\nhost a\n", "has no host in group 'main'"}}) {
        SCOPED_TRACE(text);
        const auto path = write_file(text);
        try {
            (void)read_nodelist(path);
            ADD_FAILURE() << "accepted";
        } catch (const bootstrap_error& e) {
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
        }
        std::remove(path.c_str());
    }
    EXPECT_THROW((void)read_nodelist("/nonexistent/nodes"), bootstrap_error);
}

}  // namespace
