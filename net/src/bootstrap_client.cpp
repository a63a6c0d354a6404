// bootstrap_client: the PE's side of the launcher's control connection — the launch
// environment, the blocking socket to coverse-run, registration and the node table,
// print/error/scan, and abort with its acknowledgement.
#include <coverse/net/bootstrap.hpp>
#include <coverse/net/detail/control_socket.hpp>
#include <coverse/net/interfaces.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace coverse::net {

namespace {

using clock = std::chrono::steady_clock;

// Texts above this size go out as several frames, so a huge print never meets the
// launcher's payload cap (COVERSE_MAX_MESSAGE may be lowered).
constexpr std::size_t max_text_frame = 1u << 20;

std::string seconds_text(std::chrono::milliseconds d) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(d.count()) / 1000.0);
    return b;
}

template <class T>
std::optional<T> parse_decimal(std::string_view text) {
    T value{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) return std::nullopt;
    return value;
}

[[noreturn]] void malformed(const char* variable, std::string_view value, const char* expected) {
    std::string m = "coverse: ";
    m += variable;
    m += "='";
    m.append(value);
    m += "' is not ";
    m += expected;
    m += "; coverse-run sets it for the processes it starts (unset ";
    m += launcher_env;
    m += " to run without a launcher)";
    throw bootstrap_error(m);
}

std::string required(const char* variable) {
    const char* v = std::getenv(variable);
    if (v == nullptr) {
        throw bootstrap_error(std::string("coverse: ") + launcher_env + " is set but " + variable +
                              " is not; start the program with coverse-run, or unset " +
                              launcher_env + " to run without a launcher");
    }
    return v;
}

// Writes all of `text` to one of our own descriptors (the fallback when the launcher is
// not reachable); errors are ignored, there is nowhere left to report them.
void write_own(int fd, std::string_view text) noexcept {
    while (!text.empty()) {
        const ssize_t n = ::write(fd, text.data(), text.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        text.remove_prefix(static_cast<std::size_t>(n));
    }
}

std::span<const std::byte> as_bytes(std::string_view s) noexcept {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

std::optional<launch_info> launch_info_from_env() {
    const char* address = std::getenv(launcher_env);
    if (address == nullptr || *address == '\0') return std::nullopt;
    launch_info info;

    // host:port, or [v6 address]:port.
    const std::string_view a = address;
    const auto colon = a.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
        malformed(launcher_env, a, "host:port (e.g. 127.0.0.1:40211)");
    }
    std::string_view host = a.substr(0, colon);
    if (host.front() == '[') {
        if (host.size() < 3 || host.back() != ']') {
            malformed(launcher_env, a, "host:port (e.g. 127.0.0.1:40211)");
        }
        host = host.substr(1, host.size() - 2);
    } else if (host.find(':') != std::string_view::npos) {
        malformed(launcher_env, a, "host:port (an IPv6 address goes in brackets: [::1]:40211)");
    }
    const auto port = parse_decimal<std::uint16_t>(a.substr(colon + 1));
    if (!port || *port == 0) malformed(launcher_env, a, "host:port with a port of 1..65535");
    info.launcher_host = std::string(host);
    info.launcher_port = *port;

    const std::string num_pes = required(num_pes_env);
    const auto n = parse_decimal<std::uint32_t>(num_pes);
    if (!n || *n == 0) malformed(num_pes_env, num_pes, "a PE count of 1 or more");
    info.num_pes = *n;

    const std::string pe = required(pe_env);
    const auto p = parse_decimal<std::uint32_t>(pe);
    if (!p || *p >= info.num_pes) {
        const std::string expected = "a PE number below " + std::to_string(info.num_pes) + " (" +
                                     num_pes_env + "=" + num_pes + ")";
        malformed(pe_env, pe, expected.c_str());
    }
    info.pe = *p;

    const std::string key = required(job_key_env);
    std::uint64_t k = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), k, 16);
    if (key.size() != 16 || ec != std::errc{} || end != key.data() + key.size()) {
        malformed(job_key_env, key, "16 hex digits");
    }
    info.job_key = k;
    return info;
}

std::uint64_t local_machine_id() {
    return local_host_identity().id;  // HOST_ID, else machine id + network namespace
}

// ---------------------------------------------------------------------------------------
// Connecting

namespace detail {

// One non-blocking connect attempt with a deadline; returns the connected blocking socket,
// or -1 with errno set.
int connect_once(const addrinfo& ai, clock::time_point deadline) {
    const int fd =
        ::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai.ai_protocol);
    if (fd < 0) return -1;
    int err = 0;
    if (::connect(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
            const int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
            socklen_t len = sizeof err;
            if (r == 1) {
                ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            } else {
                err = r == 0 ? ETIMEDOUT : errno;
            }
        }
    }
    if (err != 0) {
        ::close(fd);
        errno = err;
        return -1;
    }
    // Blocking from here on: every later call bounds its own wait with poll().
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int connect_retrying(const std::string& host, std::uint16_t port_number, clock::time_point deadline,
                     std::chrono::milliseconds backoff, std::string& last_error) {
    const std::string port = std::to_string(port_number);
    last_error = "no attempt";
    for (;;) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV;
        addrinfo* list = nullptr;
        int fd = -1;
        const int gai = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &list);
        if (gai != 0) {
            last_error = std::string("cannot resolve the host: ") + ::gai_strerror(gai);
        } else {
            for (addrinfo* ai = list; ai != nullptr && fd < 0; ai = ai->ai_next) {
                fd = connect_once(*ai, deadline);
                if (fd < 0) last_error = std::strerror(errno);
            }
            ::freeaddrinfo(list);
        }
        if (fd >= 0) return fd;
        const auto now = clock::now();
        if (now >= deadline) return -1;
        std::this_thread::sleep_for(std::min<clock::duration>(backoff, deadline - now));
        backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
    }
}

}  // namespace detail

launcher_client::launcher_client(const launch_info& info, std::chrono::milliseconds timeout)
    : _info(info), _reader(decode_limits{default_max_payload, info.num_pes, true}) {
    const std::string port = std::to_string(info.launcher_port);
    std::string last_error;
    _fd = detail::connect_retrying(info.launcher_host, info.launcher_port, clock::now() + timeout,
                                   std::chrono::milliseconds(5), last_error);
    if (_fd >= 0) return;
    throw bootstrap_error("coverse: PE " + std::to_string(info.pe) +
                          ": could not connect to the launcher at " + info.launcher_host + ":" +
                          port + " within " + seconds_text(timeout) + " (" + last_error +
                          "); is coverse-run still running? " + launcher_env +
                          " is meant only for the processes it starts (unset it to run "
                          "without a launcher); raise CONNECTION_TIMEOUT if the launcher is "
                          "slow to answer");
}

launcher_client::~launcher_client() {
    if (_fd >= 0) ::close(_fd);
    // Text printed before a registration that never happened must not vanish.
    write_own(STDOUT_FILENO, _held_out);
    write_own(STDERR_FILENO, _held_err);
}

int launcher_client::fd() const noexcept {
    return _fd;
}

std::string launcher_client::launcher_name() const {
    return "the launcher (" + _info.launcher_host + ":" + std::to_string(_info.launcher_port) + ")";
}

namespace {

frame_header launcher_frame_header(frame_type type, std::uint32_t source, std::uint32_t tag,
                                   std::size_t payload_size) {
    frame_header h;
    h.type = type;
    h.source_pe = source;
    h.payload_length = static_cast<std::uint32_t>(payload_size);
    h.tag = tag;
    return h;
}

// Appends one frame to `out`.
void append_frame(std::vector<std::byte>& out, const frame_header& h,
                  std::span<const std::byte> payload) {
    const auto header = encode_header(h);
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), payload.begin(), payload.end());
}

}  // namespace

namespace detail {

// Blocking send of `a` then `b` as one stream of bytes; false on a broken connection.
bool send_both(int fd, std::span<const std::byte> a, std::span<const std::byte> b) noexcept {
    iovec iov[2] = {{const_cast<std::byte*>(a.data()), a.size()},
                    {const_cast<std::byte*>(b.data()), b.size()}};
    int first = 0;
    while (first < 2) {
        while (first < 2 && iov[first].iov_len == 0)
            ++first;
        if (first == 2) break;
        msghdr msg{};
        msg.msg_iov = iov + first;
        msg.msg_iovlen = static_cast<std::size_t>(2 - first);
        const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        auto left = static_cast<std::size_t>(n);
        while (first < 2 && left >= iov[first].iov_len) {
            left -= iov[first].iov_len;
            ++first;
        }
        if (first < 2) {
            iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
            iov[first].iov_len -= left;
        }
    }
    return true;
}

}  // namespace detail
using detail::send_both;

bool launcher_client::send_frame(frame_type type, std::uint32_t tag,
                                 std::span<const std::byte> payload) {
    if (_fd < 0 || _broken) return false;
    const auto header = encode_header(launcher_frame_header(type, _info.pe, tag, payload.size()));
    if (!send_both(_fd, header, payload)) _broken = true;
    return !_broken;
}

void launcher_client::send_text(frame_type type, std::string_view text) {
    const std::lock_guard lock(_write_lock);
    if (!_registered && !_broken) {
        (type == frame_type::print ? _held_out : _held_err).append(text);
        return;
    }
    while (!text.empty()) {
        const auto chunk = text.substr(0, max_text_frame);
        if (!send_frame(type, 0, as_bytes(chunk))) {
            write_own(type == frame_type::print ? STDOUT_FILENO : STDERR_FILENO, text);
            return;
        }
        text.remove_prefix(chunk.size());
    }
}

void launcher_client::print(std::string_view text) {
    send_text(frame_type::print, text);
}

void launcher_client::error(std::string_view text) {
    send_text(frame_type::error, text);
}

std::optional<frame> launcher_client::receive(clock::time_point deadline,
                                              std::string_view waiting_for) {
    const std::string who = "PE " + std::to_string(_info.pe);
    auto lost = [&](const std::string& what) {
        std::string m = "coverse: " + who + ": " + what + " while waiting for ";
        m.append(waiting_for);
        m += " from " + launcher_name() + "; the launcher stopped the job or died";
        return bootstrap_error(m);
    };
    for (;;) {
        if (auto f = buffered_frame()) return f;
        if (_eof) throw lost("the connection was closed");
        if (_fd < 0) throw lost("the connection is closed");

        int wait_ms = -1;
        if (deadline != clock::time_point::max()) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
            if (left.count() <= 0) return std::nullopt;
            wait_ms = static_cast<int>(std::min<long long>(left.count(), 1 << 30));
        }
        pollfd p{_fd, POLLIN, 0};
        const int r = ::poll(&p, 1, wait_ms);
        if (r < 0 && errno != EINTR)
            throw lost(std::string("poll failed: ") + std::strerror(errno));
        if (r <= 0) continue;
        _inbox.resize(64 * 1024);
        _inbox_used = 0;
        const ssize_t n = ::recv(_fd, _inbox.data(), _inbox.size(), 0);
        if (n < 0) {
            _inbox.clear();
            if (errno == EINTR) continue;
            throw lost(std::string("the connection failed (") + std::strerror(errno) + ")");
        }
        _inbox.resize(static_cast<std::size_t>(n));
        if (n == 0) throw lost("the connection was closed");
    }
}

std::optional<frame> launcher_client::buffered_frame() {
    if (!_pending.empty()) {
        frame f = std::move(_pending.front());
        _pending.erase(_pending.begin());
        return f;
    }
    for (;;) {
        if (_inbox_used < _inbox.size()) {
            _inbox_used +=
                _reader.feed(std::span(_inbox).subspan(_inbox_used, _inbox.size() - _inbox_used));
        }
        if (!_reader.has_frame()) break;
        frame f = _reader.take_frame();
        if (f.header.source_pe != launcher_pe) {
            throw bootstrap_error(
                "coverse: PE " + std::to_string(_info.pe) + ": " + launcher_name() + " sent a '" +
                std::string(frame_type_name(f.header.type)) + "' frame from PE " +
                std::to_string(f.header.source_pe) +
                " instead of the launcher's id; COVERSE_LAUNCHER does not point at a "
                "coverse launcher");
        }
        if (f.header.type != frame_type::peer_lost) return f;
        // A notice can come between any two frames; it is not what anyone waits for here.
        const auto d = decode_peer_lost(f.payload_bytes(), _reader.limits());
        if (d.ok()) _notices.push_back(notice{d.value.pe, std::string(d.value.text)});
    }
    if (_reader.failed()) throw bootstrap_error(describe(_reader.error(), launcher_name()));
    return std::nullopt;
}

std::vector<launcher_client::notice> launcher_client::take_notices() {
    std::unique_lock read(_read_lock, std::try_to_lock);
    if (!read.owns_lock()) return {};
    try {
        for (;;) {
            while (auto f = buffered_frame())
                _pending.push_back(std::move(*f));
            if (_fd < 0 || _eof) break;
            _inbox.resize(64 * 1024);
            _inbox_used = 0;
            const ssize_t n = ::recv(_fd, _inbox.data(), _inbox.size(), MSG_DONTWAIT);
            if (n < 0) {
                _inbox.clear();
                if (errno == EINTR) continue;
                break;  // EAGAIN: all read; an error: the next blocking read reports it
            }
            _inbox.resize(static_cast<std::size_t>(n));
            if (n == 0) _eof = true;
        }
    } catch (const bootstrap_error&) {
        // Bytes that are not the launcher's protocol: the next blocking read reports them.
    }
    return std::exchange(_notices, {});
}

std::vector<node_entry> launcher_client::register_node(std::uint16_t data_port,
                                                       const std::string& ip,
                                                       std::chrono::milliseconds timeout) {
    const std::string who = "coverse: PE " + std::to_string(_info.pe) + ": ";
    const std::lock_guard read(_read_lock);
    {
        const std::lock_guard write(_write_lock);
        if (_registered) throw bootstrap_error(who + "register_node called twice");
        register_node_payload p;
        p.node = _info.pe;
        p.pe_count = 1;
        p.data_port = data_port;
        p.machine_id = local_machine_id();
        p.job_key = _info.job_key;
        p.ip = ip;
        // Our own decoder's rules, so a bad argument is reported here, not as a refusal.
        const auto bytes = encode(p);
        if (const auto e = decode_register_node(bytes, _reader.limits()).error) {
            throw bootstrap_error(who + "cannot register: " + describe(e, "this PE"));
        }
        // The registration and the text held until now leave in one send: the launcher
        // sees a PE's early output before it can hand out the node table (and so before
        // any PE can fail and stop the job).
        std::vector<std::byte> burst;
        append_frame(burst,
                     launcher_frame_header(frame_type::register_node, _info.pe, 0, bytes.size()),
                     bytes);
        for (auto [type, held] :
             {std::pair{frame_type::print, &_held_out}, std::pair{frame_type::error, &_held_err}}) {
            for (std::string_view text = *held; !text.empty();) {
                const auto chunk = as_bytes(text.substr(0, max_text_frame));
                append_frame(burst, launcher_frame_header(type, _info.pe, 0, chunk.size()), chunk);
                text.remove_prefix(chunk.size());
            }
        }
        if (_fd < 0 || !send_both(_fd, burst, {})) {
            _broken = true;
            throw bootstrap_error(who + "could not send the registration to " + launcher_name() +
                                  " (" + std::strerror(errno) +
                                  "); the launcher stopped the job or died");
        }
        _held_out.clear();
        _held_err.clear();
        _registered = true;
    }
    const auto deadline = clock::now() + timeout;
    for (;;) {
        auto f = receive(deadline, "the node table");
        if (!f) {
            throw bootstrap_error(who + launcher_name() + " sent no node table within " +
                                  seconds_text(timeout) +
                                  " of our registration: other PEs have not registered yet "
                                  "(coverse-run names them); raise CONNECTION_TIMEOUT if the "
                                  "PEs start slowly");
        }
        if (f->header.type != frame_type::node_table) {
            throw bootstrap_error(who + launcher_name() + " sent a '" +
                                  std::string(frame_type_name(f->header.type)) +
                                  "' frame before the node table; it does not speak this "
                                  "coverse's launcher protocol (run the same release)");
        }
        const auto table = decode_node_table(f->payload_bytes(), _reader.limits());
        if (!table.ok()) throw bootstrap_error(describe(table.error, launcher_name()));
        if (table.value.status == node_table_status::refused) {
            throw bootstrap_error(who + launcher_name() +
                                  " refused our registration: " + std::string(table.value.text));
        }
        std::vector<node_entry> out;
        out.reserve(_info.num_pes);
        for (const node_record& n : node_records(table.value)) {
            for (std::uint32_t i = 0; i < n.pe_count; ++i) {
                out.push_back(node_entry{n.node + i, std::string(n.ip), n.data_port, n.machine_id});
            }
        }
        return out;
    }
}

std::optional<std::string> launcher_client::read_line() {
    const std::string who = "coverse: PE " + std::to_string(_info.pe) + ": ";
    const std::lock_guard read(_read_lock);
    const std::uint32_t tag = _next_scan++;
    {
        const std::lock_guard write(_write_lock);
        if (!_registered) {
            throw bootstrap_error(who +
                                  "read_line before register_node: the launcher answers "
                                  "scan requests only from registered PEs");
        }
        if (!send_frame(frame_type::scan, tag, {})) {
            throw bootstrap_error(who + "could not ask " + launcher_name() +
                                  " for a line of input; the launcher stopped the job or died");
        }
    }
    for (;;) {
        auto f = receive(clock::time_point::max(), "a line of the launcher's standard input");
        if (f->header.type == frame_type::scan_reply && f->header.tag == tag) {
            const auto bytes = f->payload_bytes();
            if (bytes.empty()) return std::nullopt;  // end of input
            std::string line(reinterpret_cast<const char*>(bytes.data()), bytes.size());
            if (line.back() == '\n') line.pop_back();
            return line;
        }
        throw bootstrap_error(who + launcher_name() + " sent a '" +
                              std::string(frame_type_name(f->header.type)) + "' frame (tag " +
                              std::to_string(f->header.tag) + ") instead of the scan reply " +
                              std::to_string(tag) + "; run the same coverse release everywhere");
    }
}

void launcher_client::abort(int exit_code, std::string_view text) noexcept {
    const auto deadline = clock::now() + std::chrono::seconds(1);
    bool sent = false;
    try {
        // Timed locks: an abort must not hang behind a thread stuck in read_line.
        std::unique_lock write(_write_lock, std::defer_lock);
        if (write.try_lock_until(deadline)) {
            abort_payload p{exit_code, _info.pe, text};
            sent = send_frame(frame_type::abort, 0, encode(p));
        }
    } catch (...) {
        sent = false;
    }
    if (!sent) {
        // The launcher cannot hear us; the message must still reach someone.
        std::string m = "PE " + std::to_string(_info.pe) + " aborted: ";
        m.append(text);
        if (m.back() != '\n') m += '\n';
        write_own(STDERR_FILENO, m);
        return;
    }
    try {
        std::unique_lock read(_read_lock, std::defer_lock);
        if (!read.try_lock_until(deadline)) return;
        // The launcher answers with an abort frame of its own once the text is printed.
        while (auto f = receive(deadline, "the abort acknowledgement")) {
            if (f->header.type == frame_type::abort) return;
        }
    } catch (...) {
        // EOF or a broken connection: the launcher has what it needs, or is gone.
    }
}

}  // namespace coverse::net
