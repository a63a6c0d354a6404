// Ccd conditions and timed callbacks of the machine core: raised from the scheduler loop.
#include "pe_core.hpp"

#include "compat.hpp"

#include <sched.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include <coverse/alloc/config.hpp>
#include <coverse/alloc/message.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/timer.hpp>

namespace coverse::detail {

// ---------------------------------------------------------------------------------------
// Conditions and timed callbacks

namespace {
// CcdSIGUSR1/2: the signal handler only sets a flag; the scheduler loop raises the condition
// at its next periodic check (every few ms while a callback for it is registered).
volatile std::sig_atomic_t signal_seen[2];

void on_user_signal(int sig) {
    signal_seen[sig == SIGUSR1 ? 0 : 1] = 1;
}

void catch_user_signal(int cond) {
    static bool installed[2];
    const int i = cond == CcdSIGUSR1 ? 0 : 1;
    if (installed[i]) return;
    installed[i] = true;
    struct sigaction sa {};
    sa.sa_handler = on_user_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(i == 0 ? SIGUSR1 : SIGUSR2, &sa, nullptr);
}

}  // namespace

int pe_core::call_on_condition(int cond, CcdCondFn fn, CcdVoidFn timed, void* arg, bool keep) {
    if (cond < 0 || cond > CcdUSERMAX)
        fatal("CcdCallOnCondition: condition " + std::to_string(cond) + " is out of range (0.." +
              std::to_string(CcdUSERMAX) + ")");
    if (!fn && !timed) fatal("CcdCallOnCondition: the callback is null");
    const int id = ++_condition_ids;
    (keep ? _conditions_keep : _conditions)[cond].push_back(condition_cb{fn, timed, arg, id});
    _periodic_known = -1;
    if (cond == CcdQUIESCENCE) quiescence_start(*this);  // someone waits for it: detect it
    if (cond == CcdSIGUSR1 || cond == CcdSIGUSR2) catch_user_signal(cond);
    return id;
}

void pe_core::cancel_condition(int cond, int idx, bool keep) {
    if (cond < 0 || cond > CcdUSERMAX) return;
    auto& v = (keep ? _conditions_keep : _conditions)[cond];
    v.erase(std::remove_if(v.begin(), v.end(), [&](const condition_cb& c) { return c.id == idx; }),
            v.end());
    _periodic_known = -1;
}

void pe_core::raise_condition(int cond) {
    if (cond < 0 || cond > CcdUSERMAX) return;
    // Raised around every idle spell, so once per message in a ping-pong: without callbacks
    // it costs the bookkeeping below and nothing else.
    const bool none = _conditions[cond].empty() && _conditions_keep[cond].empty();
    double now = -1;
    if (cond == CcdPROCESSOR_BEGIN_IDLE) {
        // The idle spell's start matters to the idle callbacks only (STILL_IDLE, LONG_IDLE:
        // periodic ones); without any, the clock is not read once per message. A callback
        // registered during the spell starts it at its first periodic check (-2).
        if (has_periodic()) now = wall_time();
        _idle_since = now >= 0 ? now : -2;
        _long_idle_raised = false;
        quiescence_idle(*this);  // a pending detection round is answered from an idle PE
    } else if (cond == CcdPROCESSOR_BEGIN_BUSY) {
        _idle_since = -1;
    }
    if (none) return;
    if (now < 0) now = wall_time();
    if (!_conditions[cond].empty()) _periodic_known = -1;  // once-callbacks go now
    auto call = [now](const condition_cb& c) {
        if (c.fn)
            c.fn(c.arg);
        else
            c.timed(c.arg, now);
    };
    auto once = std::move(_conditions[cond]);
    _conditions[cond].clear();
    for (const auto& c : once)
        call(c);
    auto keep = _conditions_keep[cond];  // a callback may register more
    for (const auto& c : keep)
        call(c);
}

void pe_core::call_after(CcdVoidFn fn, void* arg, double msecs) {
    _timed.push_back(timed_call{wall_time() + msecs / 1000.0, fn, arg});
    std::push_heap(_timed.begin(), _timed.end(), std::greater<>{});
}

namespace {
double long_idle_time() {
    static const double seconds =
        std::chrono::duration<double>(settings::duration("LONG_IDLE_TIME")).count();
    return seconds;
}
}  // namespace

std::uint64_t pe_core::messages_sent() const noexcept {
    std::uint64_t n = 0;
    for (auto c : _send_seq)
        n += c;
    return n;
}

std::uint64_t pe_core::messages_received() const noexcept {
    std::uint64_t n = 0;
    for (auto c : _recv_seq)
        n += c;
    return n;
}

void pe_core::raise_periodic(double now) {
    // CcdPERIODIC (every check, at most every 5 ms) and the ladder from 10 ms to a day,
    // raised from the scheduler loop like Converse's periodic checks; while the PE is idle,
    // CcdPROCESSOR_STILL_IDLE on each check and CcdPROCESSOR_LONG_IDLE once an idle spell
    // passes LONG_IDLE_TIME.
    static constexpr double periods[CcdPERIODIC_LAST - CcdPERIODIC_10ms] = {
        0.010, 0.100, 1.0, 5.0, 10.0, 60.0, 120.0, 300.0, 600.0, 3600.0, 43200.0, 86400.0};
    auto wanted = [this](int cond) {
        return !_conditions[cond].empty() || !_conditions_keep[cond].empty();
    };
    if (wanted(CcdPERIODIC)) raise_condition(CcdPERIODIC);
    for (int cond = CcdPERIODIC_10ms; cond < CcdPERIODIC_LAST; ++cond) {
        double& next = _periodic_next[cond - CcdPERIODIC_10ms];
        if (now < next) continue;
        next = now + periods[cond - CcdPERIODIC_10ms];
        if (wanted(cond)) raise_condition(cond);
    }
    for (int i = 0; i < 2; ++i)
        if (signal_seen[i]) {
            signal_seen[i] = 0;
            raise_condition(i == 0 ? CcdSIGUSR1 : CcdSIGUSR2);
        }
    if (_idle && _idle_since == -2) _idle_since = now;  // idle since before this check
    if (_idle && _idle_since >= 0) {
        if (wanted(CcdPROCESSOR_STILL_IDLE)) raise_condition(CcdPROCESSOR_STILL_IDLE);
        if (!_long_idle_raised && now - _idle_since >= long_idle_time() &&
            wanted(CcdPROCESSOR_LONG_IDLE)) {
            _long_idle_raised = true;
            raise_condition(CcdPROCESSOR_LONG_IDLE);
        }
    }
}

bool pe_core::has_periodic() const noexcept {
    // Asked between every two messages: the answer is kept until a callback comes or goes.
    if (_periodic_known >= 0) return _periodic_known != 0;
    _periodic_known = 0;
    for (int cond = CcdPROCESSOR_STILL_IDLE; cond < CcdPERIODIC_LAST; ++cond)
        if (!_conditions[cond].empty() || !_conditions_keep[cond].empty()) _periodic_known = 1;
    for (int cond : {CcdSIGUSR1, CcdSIGUSR2})
        if (!_conditions[cond].empty() || !_conditions_keep[cond].empty()) _periodic_known = 1;
    return _periodic_known != 0;
}

void pe_core::fire_timers() {
    // Called between messages: without timed or periodic callbacks, not even a clock read.
    const bool periodic = has_periodic();
    if (_timed.empty() && !periodic) return;
    const double now = wall_time();
    if (periodic && now >= _periodic_due) {
        _periodic_due = now + 0.005;  // check the periodic conditions every 5 ms at most
        raise_periodic(now);
    }
    while (!_timed.empty() && _timed.front().due <= now) {
        std::pop_heap(_timed.begin(), _timed.end(), std::greater<>{});
        const timed_call c = _timed.back();
        _timed.pop_back();
        c.fn(c.arg, now);
    }
}

}  // namespace coverse::detail
