// coverse-crm: the resource manager's command line (--port, --bind, --timeout, --port-file,
// --verbose) handed to net::run_crm.
#include <coverse/net/startup.hpp>
#include <coverse/runtime/settings.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

namespace {

constexpr const char* usage_text =
    R"(Usage: coverse-crm [options]

The coverse resource manager. Processes of a job, started by hand or by any
spawner, register with it:  ./prog ++crm HOST:PORT ++key K +pN [++cluster C]
[++node-context I]. Once N processes have registered under key K, each gets the
node table (PEs numbered by node context, ties in order of arrival) and the job
runs without the CRM. A different PE count under the same key is an error sent
to every process involved; a job that does not fill within the timeout fails
with an error saying how many came; a key that already started a job is not
accepted again. Runs until SIGINT or SIGTERM.

Options:
  --port N          port to listen on (default CRM_PORT, 7777; 0: any free port)
  --bind ADDR       IPv4 address to listen on (default 127.0.0.1)
  --timeout SECONDS how long a job may take to fill (default CRM_TIMEOUT, 60)
  --port-file FILE  write the port there once listening (for scripts, with --port 0)
  -v, --verbose     log every job and disconnection
  -h, --help        print this help and exit
  --version         print the version and exit

Exit status: 0 after SIGINT/SIGTERM; 1 when it cannot listen; 2 for a usage error.
)";

struct usage_error {
    std::string message;
};

double seconds_arg(std::string_view text) {
    double v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || end != text.data() + text.size() || !(v > 0))
        throw usage_error{"--timeout needs a number of seconds above 0, got \"" +
                          std::string(text) + "\""};
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace coverse;
    try {
        net::crm_options o;
        o.port = static_cast<std::uint16_t>(settings::count("CRM_PORT"));
        o.fill_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
            settings::duration("CRM_TIMEOUT"));
        for (int i = 1; i < argc; ++i) {
            const std::string_view a = argv[i];
            auto value = [&]() -> std::string_view {
                if (i + 1 >= argc) throw usage_error{std::string(a) + " needs a value"};
                return argv[++i];
            };
            if (a == "-h" || a == "--help") {
                std::fputs(usage_text, stdout);
                return 0;
            } else if (a == "--version") {
                std::printf("coverse-crm %s\n", COVERSE_VERSION);
                return 0;
            } else if (a == "--port") {
                const std::string_view t = value();
                unsigned p = 0;
                const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), p);
                if (ec != std::errc{} || end != t.data() + t.size() || p > 65535)
                    throw usage_error{"--port needs a port from 0 to 65535, got \"" +
                                      std::string(t) + "\""};
                o.port = static_cast<std::uint16_t>(p);
            } else if (a == "--bind") {
                o.bind = value();
            } else if (a == "--timeout") {
                o.fill_timeout = std::chrono::milliseconds(
                    static_cast<long long>(seconds_arg(value()) * 1000.0));
            } else if (a == "--port-file") {
                o.port_file = value();
            } else if (a == "-v" || a == "--verbose") {
                o.verbose = true;
            } else {
                throw usage_error{"unknown option \"" + std::string(a) + "\""};
            }
        }
        return net::run_crm(o);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "coverse-crm: %s (see coverse-crm --help)\n", e.message.c_str());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}
