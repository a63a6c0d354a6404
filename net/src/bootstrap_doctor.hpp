// bootstrap_doctor: the launcher's side of the hang report — one socket pair per PE (the
// doctor channel: state_request down, state_reply up), the stuck detector
// (--report-stuck-after), reports on SIGQUIT, and writing a report out. Private to net/;
// the launcher (bootstrap_launcher.cpp) calls it from its poll loop. docs/doctor.md.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <coverse/net/doctor.hpp>
#include <coverse/net/frame_reader.hpp>

namespace coverse::net {

class doctor_channels {
public:
    using clock = std::chrono::steady_clock;

    doctor_channels(const doctor::report_options& opts, std::uint32_t num_pes);
    ~doctor_channels();
    doctor_channels(const doctor_channels&) = delete;
    doctor_channels& operator=(const doctor_channels&) = delete;

    /// Before the PE's fork: makes its socket pair and returns the environment entry
    /// "COVERSE_DOCTOR_FD=<n>" naming the child's end ("" when it could not be made).
    std::string prepare(std::uint32_t pe);
    /// In the child, between fork and exec (async-signal-safe): its end stays open across
    /// exec; SIGQUIT is ignored, so a Ctrl-\ at the terminal reaches the report, not a
    /// core dump of every PE.
    void in_child(std::uint32_t pe) const noexcept;
    /// In the launcher after the fork: closes the child's end. `pid` < 0: it did not start.
    void started(std::uint32_t pe, pid_t pid) noexcept;
    /// The PE was reaped: its channel closes.
    void ended(std::uint32_t pe) noexcept;

    /// Appends one pollfd per PE (fd -1 for a closed channel); on_ready takes those back.
    void add_fds(std::vector<pollfd>& fds) const;
    void on_ready(std::span<const pollfd> fds, clock::time_point now);
    /// When tick() next has something to do.
    std::optional<clock::time_point> next_deadline() const;
    /// Progress polls, the stuck decision, a report's deadline. Returns the reason to stop
    /// the job with once a stuck job's report has been written.
    std::optional<std::string> tick(clock::time_point now);
    /// Asks every PE for its state and writes the report when all answered (or after
    /// 2.5 s); the job goes on (SIGQUIT).
    void request_report(std::string reason, clock::time_point now);

private:
    struct channel {
        explicit channel(const decode_limits& l) : reader(l) {}
        int fd = -1;        // the launcher's end, non-blocking
        int child_fd = -1;  // the PE's end, until the fork is done
        pid_t pid = -1;
        frame_reader reader;
        std::uint64_t progress = 0;
        bool heard = false;                      // answered at least once
        std::optional<doctor::pe_state> answer;  // to the pending report
    };
    struct pending_report {
        std::uint32_t id = 0;
        std::string reason;
        clock::time_point deadline;
        bool stuck = false;
    };

    void start_report(std::string reason, clock::time_point now, bool stuck);
    void send(channel& c, state_want want, std::uint32_t tag);
    void read(std::uint32_t pe, clock::time_point now);
    void close_channel(channel& c) noexcept;
    void on_reply(std::uint32_t pe, const frame& f, clock::time_point now);
    bool all_answered() const;
    void finish_report();
    void write_out(const std::string& text, const std::string& dot) const;

    doctor::report_options _opts;
    std::uint32_t _n;
    std::vector<channel> _channels;
    std::optional<pending_report> _pending;
    std::uint32_t _next_id = 1;
    clock::time_point _last_progress;
    clock::time_point _next_poll;
    bool _stuck_reported = false;
    std::optional<std::string> _stop_with;
};

}  // namespace coverse::net
