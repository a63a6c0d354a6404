// Ccd conditions and timed callbacks of the machine core: raised from the scheduler loop.
#include "pe_core.hpp"

#include <sched.h>
#include <unistd.h>

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

int pe_core::call_on_condition(int cond, CcdVoidFn fn, void* arg, bool keep) {
    if (cond < 0 || cond > CcdUSERMAX)
        fatal("CcdCallOnCondition: condition " + std::to_string(cond) + " is out of range (0.." +
              std::to_string(CcdUSERMAX) + ")");
    const int id = ++_condition_ids;
    (keep ? _conditions_keep : _conditions)[cond].push_back(condition_cb{fn, arg, id});
    return id;
}

void pe_core::cancel_condition(int cond, int idx, bool keep) {
    if (cond < 0 || cond > CcdUSERMAX) return;
    auto& v = (keep ? _conditions_keep : _conditions)[cond];
    v.erase(std::remove_if(v.begin(), v.end(), [&](const condition_cb& c) { return c.id == idx; }),
            v.end());
}

void pe_core::raise_condition(int cond) {
    if (cond < 0 || cond > CcdUSERMAX) return;
    const double now = wall_time();
    auto once = std::move(_conditions[cond]);
    _conditions[cond].clear();
    for (const auto& c : once)
        c.fn(c.arg, now);
    auto keep = _conditions_keep[cond];  // a callback may register more
    for (const auto& c : keep)
        c.fn(c.arg, now);
}

void pe_core::call_after(CcdVoidFn fn, void* arg, double msecs) {
    _timed.push_back(timed_call{wall_time() + msecs / 1000.0, fn, arg});
    std::push_heap(_timed.begin(), _timed.end(), std::greater<>{});
}

void pe_core::raise_periodic(double now) {
    // CcdPERIODIC (every loop turn with callbacks), 10 ms, 100 ms and 1 s conditions,
    // raised from the scheduler loop like Converse's periodic checks.
    static constexpr struct {
        int cond;
        double period;
    } periods[] = {
        {CcdPERIODIC_10ms, 0.010}, {CcdPERIODIC_100ms, 0.100}, {CcdPERIODIC_1second, 1.0}};
    if (!_conditions[CcdPERIODIC].empty() || !_conditions_keep[CcdPERIODIC].empty())
        raise_condition(CcdPERIODIC);
    for (const auto& p : periods) {
        double& next = _periodic_next[p.cond - CcdPERIODIC_10ms];
        if (now < next) continue;
        next = now + p.period;
        if (!_conditions[p.cond].empty() || !_conditions_keep[p.cond].empty())
            raise_condition(p.cond);
    }
}

bool pe_core::has_periodic() const noexcept {
    for (int cond = CcdPERIODIC; cond <= CcdPERIODIC_1second; ++cond)
        if (!_conditions[cond].empty() || !_conditions_keep[cond].empty()) return true;
    return false;
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
