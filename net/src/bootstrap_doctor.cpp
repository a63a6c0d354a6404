// bootstrap_doctor: the launcher's side of the hang report. Stages of one report: asked
// (a state_request {full} with the report's id to every live channel) -> answered (every
// live PE replied, or 2.5 s passed) -> written (stderr or --report-to, and --dot) ->
// for a stuck job, the launcher stops it. Progress polls (state_request {progress}, tag 0)
// run every quarter of --report-stuck-after (50 ms..1 s) and feed the stuck decision.
#include "bootstrap_doctor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <coverse/net/wire.hpp>

namespace coverse::net {

namespace {

/// How long PEs have to answer a report: a PE's responder waits 0.3 s for its scheduler,
/// then answers by itself, so only a dead or stopped process misses this.
constexpr auto answer_limit = std::chrono::milliseconds(2500);

std::chrono::milliseconds poll_interval(std::chrono::milliseconds stuck_after) {
    return std::clamp(stuck_after / 4, std::chrono::milliseconds(50),
                      std::chrono::milliseconds(1000));
}

std::string seconds_text(std::chrono::milliseconds d) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(d.count()) / 1000.0);
    return b;
}

void write_fd(int fd, std::string_view text) noexcept {
    while (!text.empty()) {
        const ssize_t n = ::write(fd, text.data(), text.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        text.remove_prefix(static_cast<std::size_t>(n));
    }
}

}  // namespace

doctor_channels::doctor_channels(const doctor::report_options& opts, std::uint32_t num_pes)
    : _opts(opts), _n(num_pes) {
    const decode_limits limits{default_max_payload, num_pes, false};
    _channels.reserve(num_pes);
    for (std::uint32_t i = 0; i < num_pes; ++i)
        _channels.emplace_back(limits);
    _last_progress = clock::now();
    _next_poll = _last_progress;
}

doctor_channels::~doctor_channels() {
    for (channel& c : _channels) {
        close_channel(c);
        if (c.child_fd >= 0) ::close(c.child_fd);
    }
}

std::string doctor_channels::prepare(std::uint32_t pe) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return {};
    channel& c = _channels[pe];
    c.fd = sv[0];
    c.child_fd = sv[1];
    ::fcntl(c.fd, F_SETFL, ::fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    return std::string(doctor::channel_env) + "=" + std::to_string(c.child_fd);
}

void doctor_channels::in_child(std::uint32_t pe) const noexcept {
    const int fd = _channels[pe].child_fd;
    if (fd >= 0) ::fcntl(fd, F_SETFD, 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGQUIT, &ignore, nullptr);
}

void doctor_channels::started(std::uint32_t pe, pid_t pid) noexcept {
    channel& c = _channels[pe];
    if (c.child_fd >= 0) ::close(c.child_fd);
    c.child_fd = -1;
    c.pid = pid;
    if (pid < 0) close_channel(c);
}

void doctor_channels::ended(std::uint32_t pe) noexcept {
    close_channel(_channels[pe]);
}

void doctor_channels::close_channel(channel& c) noexcept {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
}

void doctor_channels::add_fds(std::vector<pollfd>& fds) const {
    for (const channel& c : _channels)
        fds.push_back({c.fd, POLLIN, 0});
}

void doctor_channels::on_ready(std::span<const pollfd> fds, clock::time_point now) {
    for (std::uint32_t pe = 0; pe < _n && pe < fds.size(); ++pe)
        if (fds[pe].revents != 0 && _channels[pe].fd >= 0) read(pe, now);
}

void doctor_channels::read(std::uint32_t pe, clock::time_point now) {
    channel& c = _channels[pe];
    std::byte buf[16 * 1024];
    for (int rounds = 0; rounds < 16 && c.fd >= 0; ++rounds) {
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n <= 0) {  // the PE is gone (or never ran the responder); its exit says the rest
            close_channel(c);
            return;
        }
        c.reader.feed_all(std::span(buf, static_cast<std::size_t>(n)), [&](frame&& f) {
            if (c.fd >= 0) on_reply(pe, f, now);
        });
        if (c.reader.failed()) close_channel(c);  // not our protocol: no more reports from it
    }
}

void doctor_channels::on_reply(std::uint32_t pe, const frame& f, clock::time_point now) {
    channel& c = _channels[pe];
    if (f.header.type != frame_type::state_reply || f.header.source_pe != pe) {
        close_channel(c);
        return;
    }
    std::string why;
    auto state = doctor::decode_state(f.payload_bytes(), &why);
    if (!state) {
        close_channel(c);
        return;
    }
    // A PE with no progress yet is still starting (exec, ASan's start, the mesh): the stuck
    // clock runs only once it is up, so a slow start under load is not reported as a hang
    // (a start-up that never ends has its own limit, CONNECTION_TIMEOUT).
    if (!c.heard || state->progress != c.progress || state->progress == 0) _last_progress = now;
    c.heard = true;
    c.progress = state->progress;
    if (_pending && f.header.tag == _pending->id) c.answer = std::move(*state);
    if (_pending && all_answered()) finish_report();
}

void doctor_channels::send(channel& c, state_want want, std::uint32_t tag) {
    if (c.fd < 0) return;
    const auto payload = encode(state_request_payload{want});
    frame_header h;
    h.type = frame_type::state_request;
    h.source_pe = launcher_pe;
    h.payload_length = static_cast<std::uint32_t>(payload.size());
    h.tag = tag;
    std::byte bytes[header_size + state_request_payload::wire_size];
    const auto head = encode_header(h);
    std::memcpy(bytes, head.data(), head.size());
    std::memcpy(bytes + header_size, payload.data(), payload.size());
    // 28 bytes into a socket the PE's responder drains: a full buffer means the PE does not
    // read, and the request is dropped (it then "did not answer"), never queued without end.
    for (;;) {
        const ssize_t n = ::send(c.fd, bytes, sizeof bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN) close_channel(c);
        return;
    }
}

std::optional<doctor_channels::clock::time_point> doctor_channels::next_deadline() const {
    std::optional<clock::time_point> next;
    if (_pending) next = _pending->deadline;
    if (_opts.stuck_after && !_stuck_reported && (!next || _next_poll < *next)) next = _next_poll;
    return next;
}

std::optional<std::string> doctor_channels::tick(clock::time_point now) {
    if (_pending && now >= _pending->deadline) finish_report();
    if (_opts.stuck_after && !_stuck_reported) {
        if (now >= _next_poll) {
            for (channel& c : _channels)
                send(c, state_want::progress, 0);
            _next_poll = now + poll_interval(*_opts.stuck_after);
        }
        // A PE whose responder has not answered yet is still starting (exec, the dynamic
        // loader, ASan's start on a loaded machine can take seconds): the stuck clock runs
        // only once every live PE has answered, so a slow start is not reported as a hang.
        if (std::any_of(_channels.begin(), _channels.end(),
                        [](const channel& c) { return c.fd >= 0 && !c.heard; }))
            _last_progress = now;
        if (!_pending && now - _last_progress >= *_opts.stuck_after) {
            _stuck_reported = true;
            start_report("stuck: no PE made progress for " + seconds_text(*_opts.stuck_after), now,
                         true);
        }
    }
    return std::exchange(_stop_with, std::nullopt);
}

void doctor_channels::request_report(std::string reason, clock::time_point now) {
    if (_pending) return;  // one at a time; the one under way answers this too
    start_report(std::move(reason), now, false);
}

void doctor_channels::start_report(std::string reason, clock::time_point now, bool stuck) {
    _pending = pending_report{_next_id++, std::move(reason), now + answer_limit, stuck};
    for (channel& c : _channels) {
        c.answer.reset();
        send(c, state_want::full, _pending->id);
    }
    if (all_answered()) finish_report();  // every channel is closed
}

bool doctor_channels::all_answered() const {
    return std::all_of(_channels.begin(), _channels.end(),
                       [](const channel& c) { return c.fd < 0 || c.answer.has_value(); });
}

void doctor_channels::finish_report() {
    const pending_report p = std::move(*_pending);
    _pending.reset();
    std::vector<doctor::pe_answer> answers;
    for (std::uint32_t pe = 0; pe < _n; ++pe) {
        channel& c = _channels[pe];
        doctor::pe_answer a;
        a.pe = pe;
        a.pid = c.pid;
        if (c.answer) {
            a.state = std::move(c.answer);
            c.answer.reset();
        } else if (c.pid < 0) {
            a.missing = "not started";
        } else if (c.fd < 0) {
            a.missing =
                "its doctor channel is closed (the process exited, or is not a coverse program)";
        } else {
            a.missing = "did not answer within " + seconds_text(answer_limit) +
                        " (stopped, or its responder thread is not running)";
        }
        answers.push_back(std::move(a));
    }
    const auto r = doctor::analyze(p.reason, _n, std::move(answers));
    write_out(_opts.format == doctor::report_format::json ? doctor::render_json(r)
                                                          : doctor::render_text(r),
              _opts.dot_file.empty() ? std::string() : doctor::render_dot(r));
    if (p.stuck) {
        std::string why =
            "the job was stuck: no PE made progress for " + seconds_text(*_opts.stuck_after);
        if (!r.blamed.empty()) {
            std::vector<std::uint32_t> top;
            for (const auto& b : r.blamed)
                if (b.waiting == r.blamed.front().waiting) top.push_back(b.pe);
            why += "; the others wait on " + doctor::pe_list(top);
        }
        if (!r.cycles.empty()) why += "; the wait-for graph has a cycle";
        _stop_with = why;
    }
}

void doctor_channels::write_out(const std::string& text, const std::string& dot) const {
    if (_opts.report_file.empty()) {
        write_fd(STDERR_FILENO, text);
    } else {
        const int fd =
            ::open(_opts.report_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            write_fd(fd, text);
            ::close(fd);
        } else {
            write_fd(STDERR_FILENO, "coverse-run: cannot write the report to " + _opts.report_file +
                                        ": " + std::strerror(errno) + "\n");
            write_fd(STDERR_FILENO, text);
        }
    }
    if (!dot.empty()) {
        const int fd =
            ::open(_opts.dot_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            write_fd(fd, dot);
            ::close(fd);
        }
    }
}

}  // namespace coverse::net
