// bootstrap_crm: start-up through the resource manager, both sides. A PE registers
// {PE count, cluster, node context, job key, data address} with coverse-crm; once the job's
// PE count of processes with that key are in, each gets the node table. Protocol and
// errors: docs/startup.md.
//
// Stages of one registration at the CRM: connected -> hello read (key, PE count, cluster)
// -> register_node read (node context, address) -> waiting in its job -> node table sent,
// or refused (conflict, key already used, timeout, protocol error) -> closed.
#include <coverse/net/interfaces.hpp>
#include <coverse/net/startup.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include <coverse/net/detail/control_socket.hpp>
#include <coverse/net/detail/little_endian.hpp>
#include <coverse/net/wire.hpp>
#include <coverse/runtime/settings.hpp>

namespace coverse::net {

namespace {

using clock = std::chrono::steady_clock;
using detail::load_le;
using detail::store_le;

constexpr std::uint32_t max_job_pes = 65536;

std::string seconds_text(std::chrono::milliseconds d) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(d.count()) / 1000.0);
    return b;
}

std::string hex_key(std::uint64_t key) {
    char b[20];
    std::snprintf(b, sizeof b, "%016" PRIx64, key);
    return b;
}

std::vector<std::byte> frame_bytes(frame_type type, std::uint32_t source,
                                   std::span<const std::byte> payload) {
    frame_header h;
    h.type = type;
    h.source_pe = source;
    h.payload_length = static_cast<std::uint32_t>(payload.size());
    std::vector<std::byte> out(header_size + payload.size());
    encode_header(h, std::span<std::byte, header_size>(out.data(), header_size));
    std::copy(payload.begin(), payload.end(), out.begin() + header_size);
    return out;
}

std::vector<std::byte> cluster_mapping_payload(std::span<const std::uint32_t> clusters) {
    std::vector<std::byte> out(clusters.size() * 4);
    for (std::size_t i = 0; i < clusters.size(); ++i)
        store_le<std::uint32_t>(out.data() + 4 * i, clusters[i]);
    return out;
}

template <class T>
std::optional<T> parse_number(std::string_view text) {
    T value{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
    return value;
}

// ---------------------------------------------------------------------------------------
// The PE's side

class crm_peer final : public startup_peer {
public:
    explicit crm_peer(const crm_request& request)
        : _req(request),
          _key(job_key_of(request.key)),
          _reader(decode_limits{default_max_payload, request.num_pes, true}) {
        // A CRM that is just starting gets a moment; a dead port is an error soon after.
        std::string last_error;
        _fd = detail::connect_retrying(_req.host, _req.port, clock::now() + std::chrono::seconds(2),
                                       std::chrono::milliseconds(20), last_error);
        if (_fd >= 0) return;
        const std::string port = std::to_string(_req.port);
        throw bootstrap_error("coverse: cannot reach the CRM at " + address() + " (++crm / CRM): " +
                              last_error + "; start coverse-crm there (coverse-crm --port " + port +
                              ") or point ++crm at the one that runs");
    }

    ~crm_peer() override {
        if (_fd >= 0) ::close(_fd);
    }

    std::optional<std::uint32_t> pe() const noexcept override { return _pe; }
    std::uint32_t num_pes() const noexcept override { return _req.num_pes; }
    std::uint64_t job_key() const noexcept override { return _key; }
    std::vector<std::uint32_t> clusters() const override { return _clusters; }
    host_span span() const override {
        // A CRM on loopback serves processes of this host only; one elsewhere may gather
        // several hosts, and the route to it picks among our interfaces.
        if (is_loopback_host(_req.host)) return {false, {}, "the CRM is on loopback"};
        return {true, _fd >= 0 ? socket_local_ip(_fd) : std::string(),
                "the CRM is on " + _req.host};
    }

    std::vector<node_entry> exchange(const node_entry& self,
                                     std::chrono::milliseconds timeout) override {
        hello_payload hello;
        hello.job_key = _key;
        hello.rank = _req.cluster;  // the CRM's use of the field: this process's cluster
        hello.num_pes = _req.num_pes;
        register_node_payload reg;
        reg.node = _req.node_context;  // the CRM's use: the place asked for in the numbering
        reg.pe_count = 1;
        reg.data_port = self.data_port;
        reg.machine_id = self.machine_id;
        reg.job_key = _key;
        reg.ip = self.ip;
        std::vector<std::byte> out =
            frame_bytes(frame_type::hello, _req.node_context, encode(hello));
        const auto second = frame_bytes(frame_type::register_node, _req.node_context, encode(reg));
        out.insert(out.end(), second.begin(), second.end());
        if (!detail::send_both(_fd, out, {}))
            throw bootstrap_error("coverse: " + name() +
                                  " closed the connection before our "
                                  "registration reached it (" +
                                  std::strerror(errno) + "); is coverse-crm still running?");

        const auto deadline = clock::now() + timeout;
        frame table_frame = receive(deadline, "the node table");
        if (table_frame.header.type != frame_type::node_table)
            protocol_error("a " + std::string(frame_type_name(table_frame.header.type)) +
                           " frame instead of the node table");
        const decode_limits limits{default_max_payload, _req.num_pes, true};
        auto table = decode_node_table(table_frame.payload_bytes(), limits);
        if (!table.ok()) protocol_error(describe(table.error, name()));
        if (table.value.status == node_table_status::refused)
            throw bootstrap_error("coverse: " + name() +
                                  " refused this process: " + std::string(table.value.text));
        std::vector<node_entry> entries;
        for (const node_record& r : node_records(table.value)) {
            if (r.pe_count != 1) protocol_error("a node of " + std::to_string(r.pe_count) + " PEs");
            entries.push_back(node_entry{r.node, std::string(r.ip), r.data_port, r.machine_id});
            if (r.ip == self.ip && r.data_port == self.data_port && r.machine_id == self.machine_id)
                _pe = r.node;
        }
        if (!_pe) protocol_error("a node table without this process's address");

        frame map = receive(deadline, "the cluster map");
        if (map.header.type != frame_type::cluster_mapping)
            protocol_error("a " + std::string(frame_type_name(map.header.type)) +
                           " frame instead of the cluster map");
        for (std::uint32_t p = 0; p < _req.num_pes; ++p)
            _clusters.push_back(load_le<std::uint32_t>(map.payload.get() + 4 * p));
        ::close(_fd);  // the CRM's part is done; the job runs without it
        _fd = -1;
        return entries;
    }

    [[noreturn]] void abort(int exit_code, std::string_view text) noexcept override {
        std::string line =
            "coverse: PE " + (_pe ? std::to_string(*_pe) : std::string("?")) + " aborted: ";
        line.append(text);
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(nullptr);
        std::_Exit(exit_code ? exit_code : 1);
    }

    std::string name() const override {
        return "the CRM at " + address() + " (key " + _req.key + ")";
    }

private:
    std::string address() const { return _req.host + ":" + std::to_string(_req.port); }

    [[noreturn]] void protocol_error(const std::string& what) const {
        throw bootstrap_error("coverse: " + name() + " sent " + what +
                              "; is that port a coverse-crm of this coverse version?");
    }

    frame receive(clock::time_point deadline, const char* waiting_for) {
        std::byte buf[4096];
        for (;;) {
            if (_reader.has_frame()) return _reader.take_frame();
            if (_reader.failed()) protocol_error(describe(_reader.error(), name()));
            if (_used < _inbox.size()) {
                _used += _reader.feed(std::span(_inbox).subspan(_used));
                continue;
            }
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
            if (left.count() <= 0)
                throw bootstrap_error(
                    "coverse: no answer from " + name() + " within the CONNECTION_TIMEOUT " +
                    "while waiting for " + waiting_for +
                    "; the CRM's own CRM_TIMEOUT should have answered first: is it stuck?");
            pollfd p{_fd, POLLIN, 0};
            const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
            if (r < 0 && errno != EINTR)
                throw bootstrap_error("coverse: poll on the CRM connection: " +
                                      std::string(std::strerror(errno)));
            if (r <= 0) continue;
            const ssize_t n = ::recv(_fd, buf, sizeof buf, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0)
                throw bootstrap_error(
                    "coverse: " + name() + " closed the connection while we waited for " +
                    waiting_for +
                    (n < 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string()) +
                    "; was coverse-crm stopped? See its output");
            _inbox.assign(buf, buf + n);
            _used = 0;
        }
    }

    crm_request _req;
    std::uint64_t _key;
    int _fd = -1;
    std::optional<std::uint32_t> _pe;
    std::vector<std::uint32_t> _clusters;
    frame_reader _reader;
    std::vector<std::byte> _inbox;
    std::size_t _used = 0;
};

}  // namespace

std::uint64_t job_key_of(std::string_view text) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
    for (const char c : text) {
        h ^= static_cast<unsigned char>(c);
        h *= 0x100000001b3ull;
    }
    return h;
}

std::optional<crm_request> crm_request_from(int& argc, char** argv, std::uint32_t num_pes) {
    std::string address = settings::text("CRM");
    std::string key = settings::text("CRM_KEY");
    std::optional<std::string> cluster, context;
    for (int i = 1; i < argc;) {
        const std::string_view a = argv[i];
        std::string* into = a == "++crm"            ? &address
                            : a == "++key"          ? &key
                            : a == "++cluster"      ? &cluster.emplace()
                            : a == "++node-context" ? &context.emplace()
                                                    : nullptr;
        if (!into) {
            ++i;
            continue;
        }
        if (i + 1 >= argc)
            throw bootstrap_error("coverse: " + std::string(a) + " needs a value, e.g. " +
                                  "++crm 127.0.0.1:7777 ++key job1 +p4");
        *into = argv[i + 1];
        for (int j = i; j + 2 <= argc; ++j)
            argv[j] = argv[j + 2];
        argc -= 2;
    }
    if (address.empty()) return std::nullopt;
    crm_request r;
    const auto colon = address.rfind(':');
    r.host = address.substr(0, colon);
    const std::string port_text = colon == std::string::npos
                                      ? std::to_string(settings::count("CRM_PORT"))
                                      : address.substr(colon + 1);
    const auto port = parse_number<std::uint16_t>(port_text);
    if (r.host.empty() || !port || *port == 0)
        throw bootstrap_error("coverse: the CRM address \"" + address +
                              "\" (++crm / CRM) is not HOST:PORT with a port from 1 to 65535");
    r.port = *port;
    if (key.empty())
        throw bootstrap_error("coverse: ++crm " + address +
                              " needs the job's key: add ++key K (or set COVERSE_CRM_KEY), the "
                              "same in every process of the job");
    r.key = key;
    if (num_pes == 0)
        throw bootstrap_error("coverse: ++crm " + address +
                              " needs the job's PE count: add +pN, the same in every process");
    r.num_pes = num_pes;
    auto number = [&](const std::optional<std::string>& flag, const char* setting,
                      const char* what) -> std::uint32_t {
        const std::string text =
            flag ? *flag : std::to_string(settings::count(setting));  // settings checked it
        const auto v = parse_number<std::uint32_t>(text);
        if (!v || *v >= num_pes)
            throw bootstrap_error("coverse: " + std::string(what) + " \"" + text +
                                  "\" must be a number from 0 to " + std::to_string(num_pes - 1) +
                                  " (below the job's +p" + std::to_string(num_pes) + ")");
        return *v;
    };
    r.cluster = number(cluster, "CRM_CLUSTER", "++cluster");
    r.node_context = number(context, "CRM_NODE_CONTEXT", "++node-context");
    return r;
}

std::unique_ptr<startup_peer> crm_connect(const crm_request& request) {
    return std::make_unique<crm_peer>(request);
}

// ---------------------------------------------------------------------------------------
// coverse-crm

namespace {

struct registrant {
    int fd = -1;
    std::string from;  // "127.0.0.1:40123"
    // Its bytes not yet taken as frames. Not a frame_reader: that one checks a hello's PE
    // count against its job's, and here the hello is what says the job's PE count.
    std::vector<std::byte> pending;
    clock::time_point deadline;  // for its registration frames
    std::optional<hello_payload> hello;
    bool registered = false;  // its register_node arrived: it waits in a job
    std::uint64_t arrival = 0;
    std::uint32_t node_context = 0;
    std::uint16_t data_port = 0;
    std::uint64_t machine_id = 0;
    std::string ip;
};

struct waiting_job {
    std::uint32_t num_pes = 0;
    std::vector<int> members;  // fds, in arrival order
    clock::time_point deadline;
};

class crm_server {
public:
    explicit crm_server(const crm_options& o) : _opts(o) {}

    int run() {
        listen_socket();
        sigset_t stop;
        sigemptyset(&stop);
        sigaddset(&stop, SIGINT);
        sigaddset(&stop, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &stop, nullptr);
        const int sfd = ::signalfd(-1, &stop, SFD_CLOEXEC);
        if (sfd < 0) throw bootstrap_error("coverse-crm: signalfd: " + errno_text());
        for (;;) {
            std::vector<pollfd> fds{{_listen_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
            for (const auto& [fd, r] : _clients)
                fds.push_back(pollfd{fd, POLLIN, 0});
            const int n = ::poll(fds.data(), fds.size(), next_wait_ms());
            if (n < 0 && errno != EINTR)
                throw bootstrap_error("coverse-crm: poll: " + errno_text());
            if (n > 0 && fds[1].revents) break;
            if (n > 0 && fds[0].revents) accept_all();
            for (std::size_t i = 2; n > 0 && i < fds.size(); ++i)
                if (fds[i].revents) readable(fds[i].fd);
            expire();
        }
        ::close(sfd);
        for (auto& [fd, r] : _clients)
            ::close(fd);
        ::close(_listen_fd);
        log("stopped");
        return 0;
    }

private:
    static std::string errno_text() { return std::strerror(errno); }

    void log(const std::string& text) const {
        std::fprintf(stdout, "coverse-crm: %s\n", text.c_str());
        std::fflush(stdout);
    }

    void listen_socket() {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(_opts.port);
        if (::inet_pton(AF_INET, _opts.bind.c_str(), &a.sin_addr) != 1)
            throw bootstrap_error("coverse-crm: --bind \"" + _opts.bind +
                                  "\" is not an IPv4 address");
        _listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        const int one = 1;
        ::setsockopt(_listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(_listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(_listen_fd, 1024) != 0)
            throw bootstrap_error("coverse-crm: cannot listen on " + _opts.bind + ":" +
                                  std::to_string(_opts.port) + ": " + errno_text() +
                                  (errno == EADDRINUSE
                                       ? "; another program (another coverse-crm?) has that "
                                         "port: stop it or choose another with --port / CRM_PORT"
                                       : ""));
        socklen_t len = sizeof a;
        ::getsockname(_listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
        _port = ntohs(a.sin_port);
        log("listening on " + _opts.bind + ":" + std::to_string(_port));
        if (!_opts.port_file.empty()) {
            const std::string tmp = _opts.port_file + ".tmp";
            std::ofstream(tmp) << _port << "\n";
            std::rename(tmp.c_str(), _opts.port_file.c_str());  // readers never see half
        }
    }

    int next_wait_ms() const {
        auto next = clock::now() + std::chrono::seconds(1);
        for (const auto& [fd, r] : _clients)
            if (!r.registered) next = std::min(next, r.deadline);
        for (const auto& [key, job] : _jobs)
            next = std::min(next, job.deadline);
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(next - clock::now()).count();
        return static_cast<int>(std::clamp<long long>(ms + 1, 0, 1000));
    }

    void accept_all() {
        for (;;) {
            sockaddr_in a{};
            socklen_t len = sizeof a;
            const int fd =
                ::accept4(_listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EMFILE || errno == ENFILE)
                    log("accept: " + errno_text() + " (raise the open-files limit: ulimit -n)");
                return;
            }
            // Blocking sends bounded by a timeout: a client that does not read cannot stall
            // the others for longer than this.
            timeval tv{2, 0};
            ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            const int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            char ip[INET_ADDRSTRLEN] = "?";
            ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
            registrant& r = _clients[fd];
            r.fd = fd;
            r.from = std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
            r.deadline = clock::now() + _opts.register_timeout;
            r.arrival = ++_arrivals;
        }
    }

    void readable(int fd) {
        auto it = _clients.find(fd);
        if (it == _clients.end()) return;
        registrant& r = it->second;
        std::byte buf[4096];
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
        if (n <= 0) {
            gone(fd, n < 0 ? errno_text() : "closed");
            return;
        }
        r.pending.insert(r.pending.end(), buf, buf + n);
        // Frames from a process of any job size: the payload checks need the hello first.
        const decode_limits any_job{64 * 1024, max_job_pes, true};
        std::size_t used = 0;
        while (r.pending.size() - used >= header_size) {
            const auto rest = std::span<const std::byte>(r.pending).subspan(used);
            const auto h = decode_header(rest.first(header_size), any_job);
            if (!h.ok()) return refuse(fd, describe(h.error, "the process at " + r.from));
            if (rest.size() < header_size + h.value.payload_length) break;
            used += header_size + h.value.payload_length;
            on_frame(fd, h.value, rest.subspan(header_size, h.value.payload_length));
            if (!_clients.contains(fd)) return;  // refused, or its job started
        }
        r.pending.erase(r.pending.begin(), r.pending.begin() + static_cast<std::ptrdiff_t>(used));
    }

    void on_frame(int fd, const frame_header& header, std::span<const std::byte> bytes) {
        registrant& r = _clients.at(fd);
        if (r.registered) {
            refuse(fd, "a " + std::string(frame_type_name(header.type)) +
                           " frame after its registration; it must wait for the node table");
        } else if (!r.hello) {
            if (header.type != frame_type::hello || bytes.size() != hello_payload::wire_size)
                return refuse(fd,
                              "it began with a " + std::string(frame_type_name(header.type)) +
                                  " frame, not hello; is it a coverse program of this version?");
            const std::uint32_t n = load_le<std::uint32_t>(bytes.data() + 12);
            if (n == 0 || n > max_job_pes)
                return refuse(fd, "a PE count of " + std::to_string(n) + "; use +p1 to +p" +
                                      std::to_string(max_job_pes));
            auto h = decode_hello(bytes, decode_limits{default_max_payload, n, true});
            if (!h.ok())
                return refuse(fd, describe(h.error, "the process at " + r.from) +
                                      " (the hello's rank is the cluster, below the PE count)");
            r.hello = h.value;
        } else {
            if (header.type != frame_type::register_node)
                return refuse(fd, "a " + std::string(frame_type_name(header.type)) +
                                      " frame after hello instead of register_node");
            auto reg = decode_register_node(
                bytes, decode_limits{default_max_payload, r.hello->num_pes, true});
            if (!reg.ok())
                return refuse(fd, describe(reg.error, "the process at " + r.from) +
                                      " (its node is the node context, below the PE count)");
            if (reg.value.job_key != r.hello->job_key || reg.value.pe_count != 1)
                return refuse(fd, "a register_node whose key or PE count differs from its hello");
            r.registered = true;
            r.node_context = reg.value.node;
            r.data_port = reg.value.data_port;
            r.machine_id = reg.value.machine_id;
            r.ip = std::string(reg.value.ip);
            join(fd);
        }
    }

    void join(int fd) {
        registrant& r = _clients.at(fd);
        const std::uint64_t key = r.hello->job_key;
        const std::uint32_t n = r.hello->num_pes;
        if (const auto done = _started.find(key); done != _started.end())
            return refuse(fd, "key " + hex_key(key) + " already started a job of " +
                                  std::to_string(done->second) +
                                  " PEs; two jobs cannot share a key: give this job its own "
                                  "++key (and check that no job starts more processes than +p)");
        auto [it, fresh] = _jobs.try_emplace(key);
        waiting_job& job = it->second;
        if (fresh) {
            job.num_pes = n;
            job.deadline = clock::now() + _opts.fill_timeout;
            if (_opts.verbose)
                log("job " + hex_key(key) + ": " + std::to_string(n) + " PEs, first from " +
                    r.from);
        } else if (job.num_pes != n) {
            const registrant& first = _clients.at(job.members.front());
            const std::string why =
                "PE count conflict under key " + hex_key(key) + ": the process at " + first.from +
                " registered for a job of " + std::to_string(job.num_pes) + " PEs, the one at " +
                r.from + " for " + std::to_string(n) +
                " PEs; give every process of one job the same +pN, and different jobs "
                "different keys";
            log(why);
            std::vector<int> all = job.members;
            all.push_back(fd);
            _jobs.erase(it);
            for (const int m : all)
                refuse(m, why, false);
            return;
        }
        job.members.push_back(fd);
        if (job.members.size() < job.num_pes) return;

        // Full: number the PEs by node context, ties in order of arrival.
        std::vector<int> order = job.members;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            const registrant& x = _clients.at(a);
            const registrant& y = _clients.at(b);
            return std::pair(x.node_context, x.arrival) < std::pair(y.node_context, y.arrival);
        });
        std::vector<node_record> records;
        std::vector<std::uint32_t> clusters;
        for (std::uint32_t pe = 0; pe < order.size(); ++pe) {
            const registrant& m = _clients.at(order[pe]);
            records.push_back(node_record{m.machine_id, pe, 1, m.data_port, m.ip});
            clusters.push_back(m.hello->rank);
        }
        std::vector<std::byte> out =
            frame_bytes(frame_type::node_table, launcher_pe, encode_node_table(records));
        const auto map = frame_bytes(frame_type::cluster_mapping, launcher_pe,
                                     cluster_mapping_payload(clusters));
        out.insert(out.end(), map.begin(), map.end());
        for (const int m : order) {
            if (!detail::send_both(m, out, {}))
                log("job " + hex_key(key) + ": could not send the node table to " +
                    _clients.at(m).from + ": " + errno_text());
            close_client(m);
        }
        _started[key] = job.num_pes;
        _jobs.erase(key);
        log("job " + hex_key(key) + ": " + std::to_string(order.size()) +
            " PEs registered; node table sent");
    }

    // Sends a refusal (a node_table with status refused) and closes the connection.
    void refuse(int fd, const std::string& why, bool say = true) {
        const auto it = _clients.find(fd);
        if (it == _clients.end()) return;
        if (say) log("refused " + it->second.from + ": " + why);
        const auto bytes =
            frame_bytes(frame_type::node_table, launcher_pe, encode_node_table_refusal(why));
        (void)detail::send_both(fd, bytes, {});
        leave_job(fd);
        close_client(fd);
    }

    // A client went away. If it waited in a job, the job waits for a replacement.
    void gone(int fd, const std::string& how) {
        const registrant& r = _clients.at(fd);
        if (r.registered || _opts.verbose)
            log(r.from + " disconnected (" + how + ")" +
                (r.registered ? "; its job " + hex_key(r.hello->job_key) + " waits for another"
                              : std::string()));
        leave_job(fd);
        close_client(fd);
    }

    void leave_job(int fd) {
        const registrant& r = _clients.at(fd);
        if (!r.registered) return;
        const auto it = _jobs.find(r.hello->job_key);
        if (it == _jobs.end()) return;
        std::erase(it->second.members, fd);
        if (it->second.members.empty()) _jobs.erase(it);
    }

    void close_client(int fd) {
        // Unread bytes at close() make the kernel reset the connection, and a reset can
        // discard our answer at the other end before it is read: read them first.
        std::byte sink[4096];
        while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
        }
        ::close(fd);
        _clients.erase(fd);
    }

    void expire() {
        const auto now = clock::now();
        std::vector<int> slow;
        for (const auto& [fd, r] : _clients)
            if (!r.registered && r.deadline <= now) slow.push_back(fd);
        for (const int fd : slow)
            refuse(fd, "no complete registration (hello, register_node) within " +
                           seconds_text(_opts.register_timeout));
        std::vector<std::uint64_t> late;
        for (const auto& [key, job] : _jobs)
            if (job.deadline <= now) late.push_back(key);
        for (const std::uint64_t key : late) {
            const waiting_job job = _jobs.at(key);
            const std::string why =
                "timeout: only " + std::to_string(job.members.size()) + " of the " +
                std::to_string(job.num_pes) + " PEs of the job with key " + hex_key(key) +
                " registered within " + seconds_text(_opts.fill_timeout) +
                " (CRM_TIMEOUT of coverse-crm); start the missing processes, or fix +p";
            log(why);
            _jobs.erase(key);
            for (const int m : job.members)
                refuse(m, why, false);
        }
    }

    crm_options _opts;
    int _listen_fd = -1;
    std::uint16_t _port = 0;
    std::uint64_t _arrivals = 0;
    std::map<int, registrant> _clients;
    std::map<std::uint64_t, waiting_job> _jobs;
    std::map<std::uint64_t, std::uint32_t> _started;  // key -> PE count, never reused
};

}  // namespace

int run_crm(const crm_options& options) {
    crm_server server(options);
    return server.run();
}

}  // namespace coverse::net
