// PLACEHOLDER until the launcher work lands (same interface); replaced by the real header.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coverse::net {
class bootstrap_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};
struct launch_info {
    std::string launcher_host;
    std::uint16_t launcher_port = 0;
    std::uint32_t pe = 0;
    std::uint32_t num_pes = 1;
    std::uint64_t job_key = 0;
};
std::optional<launch_info> launch_info_from_env();
struct node_entry {
    std::uint32_t pe = 0;
    std::string ip;
    std::uint16_t data_port = 0;
    std::uint64_t machine_id = 0;
};
class launcher_client {
public:
    launcher_client(const launch_info& info, std::chrono::milliseconds timeout);
    ~launcher_client();
    launcher_client(const launcher_client&) = delete;
    launcher_client& operator=(const launcher_client&) = delete;
    std::vector<node_entry> register_node(std::uint16_t data_port, const std::string& ip,
                                          std::chrono::milliseconds timeout);
    void print(std::string_view text);
    void error(std::string_view text);
    std::optional<std::string> read_line();
    void abort(int exit_code, std::string_view text) noexcept;
    int fd() const noexcept;
};
struct launch_options {
    std::uint32_t num_pes = 1;
    std::vector<std::string> argv;
    bool prefix = false;
    bool bind = false;
    std::chrono::milliseconds register_timeout{300000};
    bool verbose = false;
    std::vector<std::pair<std::string, std::string>> extra_env;
};
int run_job(const launch_options& opts);
}  // namespace coverse::net
