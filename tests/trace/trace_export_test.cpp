// coverse-trace export: the JSON follows the Trace Event Format rules the Perfetto UI's
// importer depends on — valid JSON, required fields, B/E balanced (X used instead), slices
// on one thread nested or disjoint, flows with both ends bound to slices, ts monotonic per
// track — and shows what the run did: a slice per handle, a flow per message, phases,
// counters.
#include <sys/wait.h>

#include <cstdlib>
#include <set>

#include "trace_test_support.hpp"

namespace coverse::test {
namespace {

using trace::protocol;

struct checked_export {
    json doc;
    std::vector<const json*> events;
    std::map<std::string, std::size_t> phase_count;  // by ph
    std::size_t flows = 0;
};

std::string where(const json& e) {
    std::string s = "event";
    if (e.has("name") && e["name"].is_string()) s += " '" + e["name"].str() + "'";
    if (e.has("ph") && e["ph"].is_string()) s += " ph " + e["ph"].str();
    if (e.has("ts") && e["ts"].is_number()) s += " ts " + std::to_string(e["ts"].num());
    return s;
}

// Checks the rules; records failures with ADD_FAILURE and returns what it saw.
checked_export check_trace_event_format(const std::string& text) {
    checked_export out;
    try {
        out.doc = json_parser(text).parse();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "not valid JSON: " << e.what();
        return out;
    }
    if (!out.doc.is_object() || !out.doc.has("traceEvents") || !out.doc["traceEvents"].is_array()) {
        ADD_FAILURE() << "top level must be {\"traceEvents\": [...]}";
        return out;
    }
    using track = std::pair<double, double>;  // pid, tid
    struct slice {
        double begin, end;
    };
    std::map<track, double> last_ts;
    std::map<track, std::vector<slice>> open_x;  // nesting stack per track
    std::map<track, std::vector<slice>> all_x;
    std::map<track, std::vector<std::string>> open_b;
    struct flow_end {
        int starts = 0, finishes = 0;
        std::string cat, name;
    };
    std::map<double, flow_end> flows;
    std::vector<std::pair<track, double>> flow_points;

    for (const auto& e : out.doc["traceEvents"].array()) {
        out.events.push_back(&e);
        if (!e.is_object()) {
            ADD_FAILURE() << "an event is not an object";
            continue;
        }
        for (const char* field : {"name", "ph", "pid"})
            if (!e.has(field)) ADD_FAILURE() << where(e) << " lacks " << field;
        if (!e.has("ph") || !e["ph"].is_string() || !e.has("pid") || !e["pid"].is_number())
            continue;
        const std::string ph = e["ph"].str();
        ++out.phase_count[ph];
        if (ph == "M") {
            if (!e.has("args") || !e["args"].is_object())
                ADD_FAILURE() << where(e) << ": metadata needs args";
            else if ((e["name"].str() == "process_name" || e["name"].str() == "thread_name") &&
                     (!e["args"].has("name") || !e["args"]["name"].is_string()))
                ADD_FAILURE() << where(e) << ": args.name must be a string";
            if (e["name"].str() == "thread_name" && !e.has("tid"))
                ADD_FAILURE() << where(e) << ": thread_name needs tid";
            continue;
        }
        if (!e.has("ts") || !e["ts"].is_number() || !e.has("tid") || !e["tid"].is_number()) {
            ADD_FAILURE() << where(e) << " needs numeric ts and tid";
            continue;
        }
        const track t{e["pid"].num(), e["tid"].num()};
        const double ts = e["ts"].num();
        if (ts < 0) ADD_FAILURE() << where(e) << ": negative ts";
        if (last_ts.count(t) && ts < last_ts[t])
            ADD_FAILURE() << where(e) << ": ts goes back on its track (after " << last_ts[t] << ")";
        last_ts[t] = ts;
        if (ph == "X") {
            if (!e.has("dur") || !e["dur"].is_number() || e["dur"].num() < 0) {
                ADD_FAILURE() << where(e) << ": X needs dur >= 0";
                continue;
            }
            const slice s{ts, ts + e["dur"].num()};
            auto& stack = open_x[t];
            while (!stack.empty() && stack.back().end <= s.begin + 1e-9)
                stack.pop_back();
            if (!stack.empty() && s.end > stack.back().end + 1e-9)
                ADD_FAILURE() << where(e) << ": overlaps the slice [" << stack.back().begin << ", "
                              << stack.back().end << "] on its thread without nesting";
            stack.push_back(s);
            all_x[t].push_back(s);
        } else if (ph == "B") {
            open_b[t].push_back(e["name"].str());
        } else if (ph == "E") {
            if (open_b[t].empty())
                ADD_FAILURE() << where(e) << ": E without B";
            else
                open_b[t].pop_back();
        } else if (ph == "s" || ph == "f") {
            if (!e.has("id") || !e["id"].is_number() || !e.has("cat")) {
                ADD_FAILURE() << where(e) << ": flow events need id and cat";
                continue;
            }
            auto& f = flows[e["id"].num()];
            (ph == "s" ? f.starts : f.finishes)++;
            const std::string cat = e["cat"].str(), name = e["name"].str();
            if (!f.cat.empty() && (f.cat != cat || f.name != name))
                ADD_FAILURE() << where(e) << ": flow ends must share cat and name";
            f.cat = cat;
            f.name = name;
            if (ph == "f" && (!e.has("bp") || e["bp"].str() != "e"))
                ADD_FAILURE() << where(e) << ": a flow end binds to its enclosing slice (bp e)";
            flow_points.push_back({t, ts});
        } else if (ph == "C") {
            if (!e.has("args") || !e["args"].is_object() || e["args"].object().empty()) {
                ADD_FAILURE() << where(e) << ": counter needs args";
                continue;
            }
            for (const auto& [k, v] : e["args"].object())
                if (!v.is_number())
                    ADD_FAILURE() << where(e) << ": counter " << k << " not a number";
        } else {
            ADD_FAILURE() << where(e) << ": unexpected phase";
        }
    }
    for (const auto& [t, stack] : open_b)
        if (!stack.empty()) ADD_FAILURE() << "B '" << stack.back() << "' without E";
    for (const auto& [id, f] : flows) {
        if (f.starts != 1 || f.finishes != 1)
            ADD_FAILURE() << "flow " << id << " has " << f.starts << " starts and " << f.finishes
                          << " ends";
        ++out.flows;
    }
    for (const auto& [t, ts] : flow_points) {
        bool bound = false;
        for (const auto& s : all_x[t])
            bound = bound || (s.begin <= ts && ts <= s.end);
        if (!bound) ADD_FAILURE() << "flow point at " << ts << " is inside no slice of its thread";
    }
    return out;
}

std::vector<const json*> with(const checked_export& c, const std::string& ph,
                              const std::string& cat = "") {
    std::vector<const json*> out;
    for (const auto* e : c.events)
        if ((*e)["ph"].str() == ph && (cat.empty() || (e->has("cat") && (*e)["cat"].str() == cat)))
            out.push_back(e);
    return out;
}

class trace_export_test : public trace_dir_test {
protected:
    checked_export export_dir() {
        const auto out = (dir / "trace.json").string();
        const auto r = cli({"export", dir.string(), "-o", out});
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_NE(r.err.find("ui.perfetto.dev"), std::string::npos) << r.err;
        return check_trace_event_format(read_text(out));
    }
};

TEST_F(trace_export_test, pingpong_between_two_pe_threads_exports_slices_flows_and_phases) {
    constexpr std::uint32_t rounds = 20;
    pingpong(dir, rounds, protocol::eager_short);
    const auto c = export_dir();

    // One process per PE, named.
    std::set<std::string> names;
    for (const auto* e : with(c, "M"))
        if ((*e)["name"].str() == "process_name") names.insert((*e)["args"]["name"].str());
    EXPECT_EQ(names, (std::set<std::string>{"PE 0", "PE 1"}));
    // A slice per handle (2 per round per PE), with its lifecycle in args.
    const auto handles = with(c, "X", "handle");
    EXPECT_EQ(handles.size(), 4 * rounds);
    for (const auto* h : handles) {
        EXPECT_EQ((*h)["args"]["protocol"].str(), "eager short");
        EXPECT_TRUE(std::get<bool>((*h)["args"]["released"].v));
    }
    EXPECT_EQ(with(c, "X", "state").size(), 2 * handles.size()) << "allocated + completed each";
    // A flow per message, from PE 0's process to PE 1's and back.
    EXPECT_EQ(c.flows, 2 * rounds);
    std::map<double, double> start_pid;
    for (const auto* s : with(c, "s"))
        start_pid[(*s)["id"].num()] = (*s)["pid"].num();
    for (const auto* f : with(c, "f"))
        EXPECT_NE(start_pid[(*f)["id"].num()], (*f)["pid"].num()) << "a flow crosses PEs";
    // Start-up phases 1-3 and the shutdown handshake on each PE.
    const auto phases = with(c, "X", "phase");
    EXPECT_EQ(phases.size(), 8u);
    std::set<std::string> phase_names;
    for (const auto* p : phases)
        phase_names.insert((*p)["name"].str());
    EXPECT_EQ(phase_names, (std::set<std::string>{"register with launcher", "mesh connect",
                                                  "start-up barrier", "shutdown handshake"}));
    // Live-handle counters go up and back to zero.
    double last_send = -1;
    for (const auto* ctr : with(c, "C"))
        if ((*ctr)["name"].str() == "live handles" && (*ctr)["pid"].num() == 1)
            last_send = (*ctr)["args"]["send"].num();
    EXPECT_EQ(last_send, 0);
}

TEST_F(trace_export_test, overlapping_handles_get_lanes_and_a_leak_runs_to_the_pe_end) {
    run_pes(
        dir, {[] {
            trace::emit(kind::phase_begin, 3);
            trace::emit(kind::phase_begin, 5, 1);  // a barrier inside start-up: nests
            trace::emit(kind::phase_end, 5, 1);
            trace::emit(kind::phase_end, 3);
            // Five async sends outstanding at once, completed out of order.
            for (std::uint32_t i = 0; i < 5; ++i)
                trace::emit_handle_allocated(
                    i, {i, 1000, 1, trace::direction::send, protocol::rendezvous});
            for (std::uint32_t i : {3u, 1u, 4u, 0u}) {
                trace::emit(kind::handle_published, i);
                trace::emit(kind::handle_get_posted, i);
                trace::emit(kind::handle_completed, i);
                trace::emit(kind::handle_released, i);
            }
            trace::emit(kind::handle_published, 2);  // handle 2 is never released
            trace::emit(kind::credit_spent, 1, 2, trace::credit_protocol(protocol::eager_short));
            trace::emit(kind::credit_returned, 1, 2, trace::credit_protocol(protocol::eager_short));
            trace::emit(kind::registration_added, 9, 4096);
            trace::emit(kind::counter, 1, static_cast<std::uint64_t>(-3));
            trace::emit(kind::phase_begin, 4);  // no end: the PE died in shutdown
        }});
    const auto c = export_dir();
    const auto handles = with(c, "X", "handle");
    ASSERT_EQ(handles.size(), 5u);
    std::set<double> tids;
    for (const auto* h : handles)
        tids.insert((*h)["tid"].num());
    EXPECT_EQ(tids.size(), 5u) << "overlapping handles each need a lane";
    const json* leaked = nullptr;
    double end_of_pe = 0;
    for (const auto* e : c.events)
        if ((*e)["ph"].str() == "X")
            end_of_pe = std::max(end_of_pe, (*e)["ts"].num() + (*e)["dur"].num());
    for (const auto* h : handles)
        if (!std::get<bool>((*h)["args"]["released"].v)) leaked = h;
    ASSERT_NE(leaked, nullptr);
    EXPECT_EQ((*leaked)["args"]["last_state"].str(), "published");
    EXPECT_NEAR((*leaked)["ts"].num() + (*leaked)["dur"].num(), end_of_pe, 0.0005);
    // Nested phases share the phases thread; the unfinished one is marked.
    std::set<double> phase_tids;
    bool unfinished = false;
    for (const auto* p : with(c, "X", "phase")) {
        phase_tids.insert((*p)["tid"].num());
        if ((*p)["args"].has("ended")) unfinished = (*p)["name"].str() == "shutdown handshake";
    }
    EXPECT_EQ(phase_tids.size(), 1u);
    EXPECT_TRUE(unfinished);
    std::set<std::string> counters;
    for (const auto* ctr : with(c, "C"))
        counters.insert((*ctr)["name"].str());
    EXPECT_EQ(counters, (std::set<std::string>{"live handles", "credits to PE 1",
                                               "registered memory", "counter 1"}));
    EXPECT_EQ(c.flows, 0u) << "no receiver: no half flows";
}

TEST_F(trace_export_test, four_pes_all_to_all_match_every_flow) {
    constexpr std::uint32_t n = 4, per_pair = 10;
    // Every PE sends per_pair messages to every other PE, then receives as many from each,
    // in order; a barrier between keeps each receive after its send.
    std::mutex mu;
    std::condition_variable cv;
    std::uint32_t sent_done = 0;
    std::vector<std::function<void()>> bodies;
    for (std::uint32_t pe = 0; pe < n; ++pe)
        bodies.push_back([&, pe] {
            std::uint64_t id = 0;
            for (std::uint32_t to = 0; to < n; ++to)
                for (std::uint32_t k = 0; to != pe && k < per_pair; ++k)
                    send_life(id++, to, k, 32, protocol::stream);
            {
                std::unique_lock lock(mu);
                ++sent_done;
                cv.notify_all();
                cv.wait(lock, [&] { return sent_done == n; });
            }
            for (std::uint32_t from = 0; from < n; ++from)
                for (std::uint32_t k = 0; from != pe && k < per_pair; ++k)
                    receive_life(id++, from, k, 32, protocol::stream);
        });
    run_pes(dir, bodies);
    const auto c = export_dir();
    EXPECT_EQ(c.flows, n * (n - 1) * per_pair);
    const auto r = cli({"summary", dir.string()});
    EXPECT_NE(r.out.find("flows: 120 send/receive pairs matched, 0 handles without"),
              std::string::npos)
        << r.out;
}

TEST_F(trace_export_test, odd_strings_still_make_valid_json) {
    raw_file r;
    r.backend = "io\"uring\\\n\x01\xff\xc3\xa9";  // quote, backslash, control, bad and good UTF-8
    const auto h = trace::handle_allocation{0, 1, 0, trace::direction::send, protocol::inlined};
    r.add(1, kind::handle_allocated, 1, h.a(), h.b());
    r.add(2, kind::handle_released, 1);
    r.write(dir);
    const auto c = export_dir();
    bool found = false;
    for (const auto* e : with(c, "M"))
        if ((*e)["name"].str() == "process_labels") {
            found = true;
            EXPECT_NE((*e)["args"]["labels"].str().find("io\"uring\\"), std::string::npos);
        }
    EXPECT_TRUE(found);
}

}  // namespace
}  // namespace coverse::test

#ifdef COVERSE_RUN_PATH
namespace coverse::test {
namespace {

// Runs `program` on `pes` PEs through coverse-run, recording into `dir` with the
// environment (COVERSE_TRACE=dir) or with the launcher's flag (--trace dir).
int run_traced_job(const fs::path& dir, int pes, const std::string& program,
                   const std::string& args = "", bool use_flag = false) {
    const std::string trace = "'" + dir.string() + "'";
    const std::string cmd =
        (use_flag ? std::string() : "COVERSE_TRACE=" + trace + " ") + "'" COVERSE_RUN_PATH "' " +
        (use_flag ? "--trace " + trace + " " : std::string()) + "-n " + std::to_string(pes) + " '" +
        program + "' " + args + " > '" + (dir / "job.out").string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

TEST_F(trace_export_test, a_real_four_pe_job_exports_closed_slices_and_paired_flows_and_no_leak) {
    ASSERT_EQ(run_traced_job(dir, 4, TRACE_JOB_PE), 0) << read_text(dir / "job.out");
    for (int pe = 0; pe < 4; ++pe)
        EXPECT_TRUE(fs::exists(dir / trace::file_name(pe))) << "no trace file for PE " << pe;
    const auto c = export_dir();
    EXPECT_GT(c.flows, 100u) << "every message is a flow from its send to its receive";
    for (const auto* h : with(c, "X", "handle"))
        EXPECT_TRUE(std::get<bool>((*h)["args"]["released"].v)) << "an unreleased handle";
    std::set<std::string> phase_names;
    for (const auto* p : with(c, "X", "phase"))
        phase_names.insert((*p)["name"].str());
    EXPECT_TRUE(phase_names.count("register with launcher"));
    EXPECT_TRUE(phase_names.count("mesh connect"));
    EXPECT_TRUE(phase_names.count("shutdown handshake"));
    const auto leaks = cli({"leaks", dir.string()});
    EXPECT_EQ(leaks.status, 0) << leaks.out << leaks.err;
    EXPECT_NE(leaks.out.find("none"), std::string::npos) << leaks.out;
}

TEST_F(trace_export_test, a_handle_the_program_never_releases_is_reported_by_leaks) {
    ASSERT_EQ(run_traced_job(dir, 2, TRACE_LEAKY_PE, "", true), 0) << read_text(dir / "job.out");
    const auto leaks = cli({"leaks", dir.string()});
    EXPECT_EQ(leaks.status, 1) << leaks.out << leaks.err;
    EXPECT_NE(leaks.out.find("PE 0"), std::string::npos) << leaks.out;
    EXPECT_NE(leaks.out.find("send"), std::string::npos) << leaks.out;
    EXPECT_NE(leaks.out.find("1 found"), std::string::npos) << leaks.out;

    // The same program releasing its handle leaves nothing behind.
    fs::remove_all(dir);
    fs::create_directories(dir);
    ASSERT_EQ(run_traced_job(dir, 2, TRACE_LEAKY_PE, "-clean"), 0) << read_text(dir / "job.out");
    const auto clean = cli({"leaks", dir.string()});
    EXPECT_EQ(clean.status, 0) << clean.out << clean.err;
}

}  // namespace
}  // namespace coverse::test
#endif
