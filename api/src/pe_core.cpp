// The machine core of one PE: start-up (flags, launcher registration, the mesh), the handler
// table, output and abort, and shutdown. The other units: handle_table.cpp, send_path.cpp,
// dispatch.cpp, conditions.cpp, collectives.cpp, pe_core_shm.cpp (see pe_core.hpp).
#include "pe_core.hpp"

#include "compat.hpp"

#include <poll.h>
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
#include <coverse/net/interfaces.hpp>
#include <coverse/runtime/io.hpp>
#include <coverse/runtime/settings.hpp>
#include <coverse/runtime/sync_wait.hpp>
#include <coverse/runtime/timer.hpp>

namespace coverse::detail {

std::unique_ptr<pe_core>& core_slot();  // converse.cpp: the process's PE

pe_core* pe_core::_instance = nullptr;

void wait_list::notify_all() {
    if (_waiters.empty()) return;
    auto waiters = std::move(_waiters);
    _waiters.clear();
    auto& s = scheduler::this_thread();
    for (auto h : waiters)
        s.schedule(h);
}

namespace {

// Removes argv[i .. i+k) and keeps the NULL terminator.
void remove_args(int& argc, char** argv, int i, int k) {
    for (int j = i; j + k <= argc; ++j)
        argv[j] = argv[j + k];
    argc -= k;
}

std::uint32_t parse_pe_count(const char* text, const char* flag) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno || end == text || *end || v < 1 || v > 65536)
        throw std::runtime_error(std::string("coverse: ") + flag + " needs a PE count from 1 to " +
                                 "65536, got \"" + text + "\"");
    return static_cast<std::uint32_t>(v);
}

// The CPUs this job's PEs run on: the launcher's count when it pinned us (our own mask
// then holds one CPU), else our mask.
std::uint32_t cores_for_pes() {
    auto n = static_cast<std::uint32_t>(CmiNumCores());
    if (const char* b = std::getenv(net::bound_cpus_env)) {
        char* end = nullptr;
        const unsigned long v = std::strtoul(b, &end, 10);
        if (end != b && *end == 0 && v > 0 && v < 0x10000) n = static_cast<std::uint32_t>(v);
    }
    return n;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Start-up

pe_core& pe_core::get(const char* caller) {
    if (!_instance) {
        std::fprintf(stderr,
                     "coverse: %s called before ConverseInit (or after ConverseExit); start "
                     "the runtime with ConverseInit or coverse::run first\n",
                     caller);
        std::abort();
    }
    return *_instance;
}

void pe_core::consume_flags(int& argc, char** argv) {
    // coverse-run ++verbose asks its PEs too (COVERSE_VERBOSE=1).
    if (const char* v = std::getenv("COVERSE_VERBOSE"); v && *v && std::string_view(v) != "0")
        _opts.verbose = true;
    for (int i = 1; i < argc;) {
        const std::string_view a = argv[i];
        if (a == "+p" && i + 1 < argc) {
            _opts.num_pes_flag = parse_pe_count(argv[i + 1], "+p");
            remove_args(argc, argv, i, 2);
        } else if (a.size() > 2 && a.substr(0, 2) == "+p" && a[2] >= '0' && a[2] <= '9') {
            _opts.num_pes_flag = parse_pe_count(argv[i] + 2, "+p");
            remove_args(argc, argv, i, 1);
        } else if (a == "++local" || a == "++quiet") {
            remove_args(argc, argv, i, 1);
        } else if (a == "++verbose") {
            _opts.verbose = true;
            remove_args(argc, argv, i, 1);
        } else if (a == "+setcpuaffinity") {
            _opts.set_affinity = true;
            remove_args(argc, argv, i, 1);
        } else {
            ++i;
        }
    }
}

pe_core::pe_core(int& argc, char** argv) : _t0(std::chrono::steady_clock::now()) {
    if (_instance)
        throw std::runtime_error("coverse: the runtime is already initialised in this process");
    // The self-launch needs the arguments as given (the PEs consume them themselves).
    std::vector<std::string> original(argv, argv + argc);
    settings::consume_command_line(argc, argv);  // ++set NAME=VALUE
    consume_flags(argc, argv);

    // Who started us, first match wins: coverse-run (COVERSE_LAUNCHER), the CRM (++crm or
    // CRM), a PMIx server (PMIX_NAMESPACE / PMIX_RANK), else +pN launches itself.
    std::optional<net::launch_info> info = net::launch_info_from_env();
    std::optional<net::crm_request> crm = net::crm_request_from(argc, argv, _opts.num_pes_flag);
    if (!info && crm) {
        _startup = net::crm_connect(*crm);
    } else if (!info && net::pmix_in_environment()) {
        _startup = net::pmix_connect();
    } else if (!info) {
        net::check_spawner_without_pmix();
    }
    if (_startup)
        info = net::launch_info{"", 0, _startup->pe().value_or(0), _startup->num_pes(),
                                _startup->job_key()};
    if (!info && _opts.num_pes_flag > 1) {
        // Started directly with +pN: become the launcher of N copies of ourselves, the
        // same way coverse-run would, and exit with the job's status.
        net::launch_options lo;
        lo.num_pes = _opts.num_pes_flag;
        lo.argv = std::move(original);
        lo.argv[0] = "/proc/self/exe";
        lo.bind = _opts.set_affinity;
        lo.verbose = _opts.verbose;
        lo.register_timeout = net::connection_timeout_from_env();
        lo.stop_on_pe_failure = settings::text("ON_PEER_LOST") != "report";
        std::fflush(nullptr);
        std::exit(net::run_job(lo));
    }

    _broadcast_tree = settings::enabled("BROADCAST_TREE");
    _report_lost = settings::text("ON_PEER_LOST") == "report";
    _layer_cfg = rdma::layer_config::from_settings();
    _lazy = _layer_cfg.lazy;
    _small_boundary = _layer_cfg.small_boundary;
    _medium_boundary = _layer_cfg.medium_boundary;
    const std::size_t max_handles = std::max<std::size_t>(1, settings::count("MAXIMUM_HANDLES"));
    _held_limit = std::max<std::size_t>(1, settings::count("SEND_QUEUE_BYTES"));
    _slots.resize(max_handles);
    _free_slots.reserve(max_handles);
    for (std::size_t i = max_handles; i-- > 0;)
        _free_slots.push_back(static_cast<std::uint32_t>(i));
    _conditions.resize(CcdUSERMAX + 1);
    _internal[static_cast<std::uint32_t>(internal_handler::reduce_contribution)] = handler_entry{
        [](void* m) { pe_core::get("reduce").reduce_contribution(m); }, nullptr, nullptr};
    _internal[static_cast<std::uint32_t>(internal_handler::reduce_struct_result)] = handler_entry{
        [](void* m) {
            void* fields[2];
            std::memcpy(fields, static_cast<std::byte*>(m) + CmiMsgHeaderSizeBytes, sizeof fields);
            alloc::msg_free(m);
            reinterpret_cast<CmiHandler>(fields[0])(fields[1]);
        },
        nullptr, nullptr};
    _conditions_keep.resize(CcdUSERMAX + 1);
    compat_install(*this);  // Cth threads, futures, quiescence

    const net::backend_kind kind = net::backend_kind_from_env();
    scheduler_options so = scheduler_options::from_env();
    if (kind == net::backend_kind::asio) so.use_io_uring = false;  // Asio blocks by itself
    // More PEs on this host than cores we may run on: spinning PEs would take the core from
    // the PE they wait for, so an idle PE yields while it spins. A PE the launcher pinned
    // sees one CPU in its mask; the launcher says how many it spread the PEs over (counting
    // the one CPU made every bound job of 2 PEs yield on each idle poll: a system call).
    if (info && info->num_pes > cores_for_pes()) so.yield_while_spinning = true;
    _sched = std::make_unique<scheduler>(so);
    _instance = this;
    // A constructor that throws from here on leaves no instance behind (the exit handler
    // below, run by the caller's exit(1), reads it).
    struct instance_guard {
        bool kept = false;
        ~instance_guard() {
            if (!kept) _instance = nullptr;
        }
    } guard;
    // Registered after the PE's slot (a static made before this PE): it runs before that
    // slot's destructor does.
    [[maybe_unused]] static const bool exit_handler = ::on_exit(&on_process_exit, nullptr) == 0;

    if (info) {
        if (!_startup) relay_stdout();  // printf lines through the launcher, in order
        start_networked(*info);
    } else {
        _pe = 0;
        _num_pes = 1;
        start_trace(_sched->io() ? "io_uring (no network: one PE)" : "none (one PE)");
    }
    if (_pe == 0)  // once per job: a misspelt COVERSE_* or CMI_VMI_* variable does nothing
        for (const std::string& w : settings::unknown_environment_warnings())
            std::fprintf(stderr, "%s\n", w.c_str());
    if (_send_seq.size() != _num_pes) {  // one PE: no network start-up set them
        _send_seq.assign(_num_pes, 0);
        _recv_seq.assign(_num_pes, 0);
    }
    _grid.configure();
    _latency.reset(_num_pes);  // unknown until a probe
    if (settings::enabled("PROBE_CLUSTERS")) probe_latencies();

    if (_opts.set_affinity) {
        cpu_set_t allowed;
        if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
            std::vector<int> cpus;
            for (int c = 0; c < CPU_SETSIZE; ++c)
                if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
            if (!cpus.empty()) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(cpus[_pe % cpus.size()], &one);
                sched_setaffinity(0, sizeof one, &one);
            }
        }
    }

    // Last, when nothing here can throw any more: a spawned task that throws fails this
    // PE, which says so through the launcher (the default handler's abort() left the
    // others to see a SIGABRT).
    _previous_spawn_failure =
        set_spawn_failure_handler([this](std::string_view name, std::exception_ptr e) {
            fail_pe("spawned task '" + std::string(name) + "' failed: " + exception_text(e));
        });
    guard.kept = true;
}

void pe_core::start_networked(const net::launch_info& info) {
    _pe = info.pe;
    _num_pes = info.num_pes;
    // Counted from the first frame: messages may arrive while start-up still waits in
    // its barrier (a faster PE's start function already sends).
    _send_seq.assign(_num_pes, 0);
    _recv_seq.assign(_num_pes, 0);
    _vote_out.assign(_num_pes, 0);
    _vote_in.assign(_num_pes, 0);
    const std::string starter = _startup ? _startup->name() : "the launcher";
    if (_opts.num_pes_flag && _opts.num_pes_flag != _num_pes)
        throw std::runtime_error("coverse: PE " + std::to_string(_pe) + ": +p" +
                                 std::to_string(_opts.num_pes_flag) + " disagrees with " + starter +
                                 "'s job of " + std::to_string(_num_pes) +
                                 " PEs; drop +p or make them match");
    const auto timeout = net::connection_timeout_from_env();
    if (!_startup) _launcher = std::make_unique<net::launcher_client>(info, timeout);
    start_doctor();

    _backend = net::make_backend(*_sched, net::backend_kind_from_env(), &_backend_why);
    if (!_backend)
        throw std::runtime_error("coverse: PE " + std::to_string(_pe) +
                                 ": no network backend: " + _backend_why);
    const data_address where = choose_data_address(info);
    net::endpoint here{where.ip, 0};
    auto l = _backend->listen(here);
    if (l.error)
        throw std::runtime_error("coverse: PE " + std::to_string(_pe) + ": cannot listen on " +
                                 where.ip + " (" + where.why + "): " + std::strerror(-l.error));
    const std::uint16_t port = l.value->local().port;

    // The rdma layer is made before registering, so its rings exist before any peer can
    // map them; the CRM numbers the PEs only in its node table, so there it follows the
    // table (still before this PE takes part in the mesh's set-up).
    auto prepare_rdma = [&] {
        rdma::layer_config rc = _layer_cfg;
        rc.rank = _pe;
        rc.num_pes = _num_pes;
        rc.job_key = info.job_key;
        _shm_prefix = net::shm_name_prefix(info.job_key);
        _rdma = std::make_unique<rdma::layer>(*_sched, rc, static_cast<rdma::upcalls&>(*this));
        _rdma->prepare();
        start_trace(_backend_why);
    };
    if (!_startup || _startup->pe()) prepare_rdma();
    // Under the CRM the trace starts with the rdma layer, after registration: no phase 1.
    const bool trace_registration = _rdma != nullptr;
    if (trace_registration) trace::emit(trace::kind::phase_begin, 1);
    auto say_where = [&] {
        if (_opts.verbose)
            print("coverse: PE " + std::to_string(_pe) + " listens on " + where.ip + ":" +
                      std::to_string(port) + " (" + where.why + "); host identity " +
                      net::local_host_identity().source + "\n",
                  true);
    };
    if (_rdma) say_where();  // else the CRM's table gives our PE first
    std::vector<net::node_entry> table;
    if (_startup)
        table = _startup->exchange(net::node_entry{_pe, where.ip, port, net::local_machine_id()},
                                   timeout);
    else
        table = _launcher->register_node(port, where.ip, timeout);
    if (!_rdma) {
        _pe = _startup->pe().value_or(0);
        prepare_rdma();
        say_where();
    }
    if (trace_registration) trace::emit(trace::kind::phase_end, 1);
    if (table.size() != _num_pes)
        throw std::runtime_error("coverse: PE " + std::to_string(_pe) + ": " + starter + " sent " +
                                 std::to_string(table.size()) + " entries for a job of " +
                                 std::to_string(_num_pes) + " PEs");

    net::mesh_config cfg;
    cfg.rank = _pe;
    cfg.num_pes = _num_pes;
    cfg.job_key = info.job_key;
    cfg.connect_timeout = timeout;
    // Payloads land in message memory: a standard frame's payload is the Converse message.
    cfg.payload_alloc.allocate = static_cast<void* (*)(std::size_t) noexcept>(&alloc::msg_alloc);
    cfg.payload_alloc.release = &alloc::msg_free;
    for (const auto& e : table) {
        cfg.peers.push_back(net::endpoint{e.ip, e.data_port});
        _host_ids.push_back(e.machine_id);
    }
    if (where.multi_host)
        cfg.address_note =
            "each host picks its PEs' data addresses by NETWORK_INTERFACE (on "
            "this host: " +
            net::interface_setting_text() + "; see docs/hosts.md)";
    cfg.peer_failure_ends_receive = !_report_lost;
    cfg.connect = _lazy ? net::connect_mode::lazy : net::connect_mode::eager;
    _mesh = std::make_unique<net::mesh>(*_backend, std::move(l.value), std::move(cfg));
    _rdma->attach(*_mesh);
    _mesh->on_peer_failure([this](std::uint32_t pe, const std::string& why) {
        // Said before the layer fails what waits for that PE: a failed send may stop the job
        // at once, and this is the text that names the cause.
        if (_shut_down) {
        } else if (_report_lost) {
            lose_peer(pe, why);
        } else {
            std::string text = "PE " + std::to_string(_pe) + " lost PE " + std::to_string(pe) +
                               ": " + why + "; stopping the job";
            if (_loss_text.empty()) _loss_text = text;  // what the job stops with
            if (_launcher)
                _launcher->error(text + "\n");
            else
                std::fprintf(stderr, "coverse: %s\n", text.c_str());
        }
        if (_rdma) _rdma->peer_lost(pe);
    });
    if (_num_pes > 1) {
        trace::emit(trace::kind::phase_begin, 2);
        sync_wait(_mesh->establish());
        trace::emit(trace::kind::phase_end, 2);
        _receiving = true;
        _sched->spawn(receive_loop(), "coverse receive loop");
        std::vector<rdma::peer_info> peers;
        for (const auto& e : table)
            peers.push_back(rdma::peer_info{e.machine_id});
        _rdma->connect(peers);
        if (_opts.verbose && _pe == 0) print("coverse: protocols\n" + _rdma->describe(), true);
        if (_opts.verbose && !_lazy) {
            std::string paths;
            for (std::uint32_t p = 0; p < _num_pes; ++p)
                if (p != _pe)
                    paths += "coverse: PE " + std::to_string(_pe) + " -> PE " + std::to_string(p) +
                             ": " + _rdma->path_to(p) + "\n";
            print(paths, true);
        }
        // Lazy: a PE hears of a death through its own connections only; under report the
        // launcher tells every PE (peer_lost notices on the control connection).
        if (_lazy && _report_lost && _launcher)
            _sched->spawn(watch_launcher(this), "launcher notices");
    }
}

// ++verbose under CONNECT=lazy: one line per peer once the pair is set up, as eager prints
// them all at start-up, saying who dialed.
void pe_core::on_peer_ready(std::uint32_t pe) {
    if (_opts.verbose && _lazy) print_path(pe);
}

// Messages the fast path copied for a connection that failed with them queued: as a failed
// frame of the full path (frame_done), the job stops. Under ON_PEER_LOST=report the mesh's
// failure already made the PE lost (lose_peer), and the copies are dropped, Converse
// messages among them, as messages in a lost PE's ring are: unlike frame_done, which
// still stops the job for a Converse send, nothing here says which API a copy came from.
void pe_core::on_copies_lost(std::uint32_t pe, int result) {
    if (_shut_down || _report_lost) return;
    send_failed(pe, result);
}

void pe_core::print_path(std::uint32_t pe) {
    std::string how;
    for (const net::link_info& l : _mesh->links())
        if (l.pe == pe)
            how = std::string("; connected on first use, dialed by PE ") +
                  std::to_string(l.dialed ? _pe : pe);
    print("coverse: PE " + std::to_string(_pe) + " -> PE " + std::to_string(pe) + ": " +
              _rdma->path_to(pe) + how + "\n",
          true);
}

task<void> pe_core::watch_launcher(pe_core* self) {
    const int fd = self->_launcher->fd();
    for (;;) {
        // Notices another read took in with its own frame wait in the client's buffer, where
        // no poll fires for them: one that came in the same read as the node table (a PE
        // that died while this one was still starting) was never handed on, and this PE's
        // collectives then waited for the dead PE (tutorial_farm crash, 1 run in ~100
        // under load). So the buffer is looked at before each wait.
        if (self->_shut_down || !self->_launcher) co_return;
        for (const auto& n : self->_launcher->take_notices())
            self->on_launcher_notice(n.pe, n.text);
        if (self->_launcher->closed()) co_return;
        int r = -ENOSYS;
        try {
            r = co_await poll_fd(fd, POLLIN);
            if (r == -ECANCELED) co_return;
            // Without a ring (the Asio backend) look every 50 ms instead.
            if (r == -ENOSYS) co_await sleep_for(std::chrono::milliseconds(50));
        } catch (const cancelled_error&) {
            co_return;
        }
        // Shutdown closes the launcher connection before the scheduler stops this task: a
        // poll that fires in between finds no connection to read (the loop's top looks).
    }
}

void pe_core::on_launcher_notice(std::uint32_t pe, const std::string& text) {
    if (_shut_down || pe >= _num_pes || pe == _pe || is_lost(pe)) return;
    // The mesh says it as a failure of that peer (at once when we have no connection to it;
    // else after what the PE sent before it died), which lose_peer() turns into peer_lost.
    if (_mesh) _mesh->peer_gone(pe, text + " (the launcher saw it end)");
}

pe_core::data_address pe_core::choose_data_address(const net::launch_info& info) const {
    // A job on one host listens on loopback only, whatever the interfaces: a launcher on
    // loopback, a PMIx job of one node, a CRM on loopback. Otherwise NETWORK_INTERFACE picks
    // the address, the route to the launcher (or the CRM) breaking a tie.
    std::string preferred;
    std::string spans;
    if (_startup) {
        auto s = _startup->span();
        if (!s.multi_host) return {"127.0.0.1", "loopback: " + s.why, false};
        preferred = std::move(s.local_ip);
        spans = std::move(s.why);
    } else {
        if (net::is_loopback_host(info.launcher_host))
            return {"127.0.0.1", "loopback: the job runs on one host", false};
        preferred = net::socket_local_ip(_launcher->fd());
        spans = "the launcher is on " + info.launcher_host;
    }
    const auto filter = net::interface_filter_from_env();  // a bad value names itself
    const auto candidates = net::local_interfaces();
    const auto c = net::choose_address(filter, candidates, preferred);
    if (!c)
        throw std::runtime_error("coverse: PE " + std::to_string(_pe) +
                                 ": no address to listen on for a multi-host job (" + spans +
                                 "): " + net::describe_no_address(filter, candidates));
    return {c->chosen.ip, c->chosen.name + ", " + c->why + "; " + spans, true};
}

pe_core::~pe_core() {
    if (!_shut_down) shutdown();
    set_spawn_failure_handler(std::move(_previous_spawn_failure));
    _instance = nullptr;
}

void pe_core::start_trace(const std::string& backend) {
    trace::session_info info;
    info.pe = _pe;
    info.num_pes = _num_pes;
    info.backend = backend;
    info.provider = _rdma ? _rdma->provider_summary() : "none (one PE)";
    for (const auto& s : settings::all()) {
        try {
            const auto r = settings::resolve(s.name);
            info.config +=
                r.name + "=" + r.value + " (" + std::string(settings::to_string(r.from)) + ")\n";
        } catch (const std::exception&) {
        }
    }
    _trace = trace::start_from_env(info);  // null unless TRACE is set; throws on a bad DIR
    if (_trace) {
        _trace_flush = std::make_unique<trace::flush_poller>(_trace->recorder());
        _sched->add_poller(*_trace_flush);
    }
}

void pe_core::stop_trace() noexcept {
    // A handler that called ConverseExit never returns: its receive handle ends here.
    for (auto it = _running_receives.rbegin(); it != _running_receives.rend(); ++it)
        trace::emit(trace::kind::handle_released, *it);
    _running_receives.clear();
    if (_trace_flush) {
        _sched->remove_poller(*_trace_flush);
        _trace_flush.reset();
    }
    _trace.reset();  // flushes, closes, uninstalls
}

double pe_core::wall_time() const noexcept {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - _t0).count();
}

[[noreturn]] void pe_core::fatal(const std::string& text) {
    abort_job(text);
}

[[noreturn]] void pe_core::peer_lost(const std::string& text) {
    // A dead peer is usually seen by the launcher too (it reaps the process). Give it a
    // moment to stop the job and name the PE that died and how; abort only if it does not.
    if (_launcher) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    abort_job(text);
}

void pe_core::lose_peer(std::uint32_t pe, const std::string& why) {
    if (pe >= _num_pes || pe == _pe || is_lost(pe) || _shut_down) return;
    _lost.resize(_num_pes, false);
    _lost[pe] = true;
    if (!_first_lost) _first_lost = pe;
    _lost_order.push_back(pe);
    if (_rdma) _rdma->peer_lost(pe);  // fails its transfers and queued sends (idempotent)
    const std::string text =
        "PE " + std::to_string(_pe) + " lost PE " + std::to_string(pe) + ": " + why;
    // The Converse facade has no way to hear of it: a barrier or reduction of its waiting
    // for every PE would wait forever. Stop the job, as the default does.
    if (!_barrier_waiters.empty() || !_reductions.empty())
        peer_lost(text + "; a Converse barrier or reduction waits for it, stopping the job");
    print("coverse: " + text + "; ON_PEER_LOST=report: the job goes on without it\n", true);
    // Queued behind the messages that came from it (the connection's frames are delivered
    // before its failure is), so a stream hands those out before it reports the loss.
    const int size = static_cast<int>(CmiMsgHeaderSizeBytes + sizeof(std::uint32_t));
    void* notice = alloc::msg_alloc(static_cast<std::size_t>(size));
    if (!notice) fatal("out of memory noting the loss of PE " + std::to_string(pe));
    CmiInitMsgHeader(notice, size);
    CmiSetHandler(notice, static_cast<int>(internal_handler::peer_lost_notice));
    std::memcpy(static_cast<std::byte*>(notice) + CmiMsgHeaderSizeBytes, &pe, sizeof pe);
    _net_queue.push_back(notice);
    _slot_waiters.notify_all();  // sends to it waiting for a handle slot fail now
    vote_step();                 // ConverseExit's vote goes on without it
    _sched->end_turn();
}

// ---------------------------------------------------------------------------------------
// Handlers

int pe_core::register_handler(CmiHandler h, CmiHandlerEx hx, void* user, batch_handler hb) {
    _handlers.push_back(handler_entry{h, hx, user, hb});
    return static_cast<int>(_handlers.size() - 1);
}

void pe_core::number_handler(int n, CmiHandler h, CmiHandlerEx hx, void* user) {
    if (n < 0 || static_cast<std::uint32_t>(n) >= internal_handler_base)
        fatal("CmiNumberHandler: handler number " + std::to_string(n) +
              " is out of range; use numbers from 0 up");
    if (static_cast<std::size_t>(n) >= _handlers.size()) _handlers.resize(n + 1);
    _handlers[n] = handler_entry{h, hx, user};
}

CmiHandler pe_core::handler_function(int n) const noexcept {
    if (n < 0 || static_cast<std::size_t>(n) >= _handlers.size()) return nullptr;
    return _handlers[n].fn;
}

// ---------------------------------------------------------------------------------------
// Output, input, abort

void pe_core::print(std::string_view text, bool to_stderr) {
    if (_launcher) {
        if (to_stderr)
            _launcher->error(text);
        else
            _launcher->print(text);
        return;
    }
    std::FILE* f = to_stderr ? stderr : stdout;
    std::fwrite(text.data(), 1, text.size(), f);
    std::fflush(f);
}

std::optional<std::string> pe_core::read_line() {
    if (_launcher) return _launcher->read_line();
    std::string line;
    int c;
    while ((c = std::fgetc(stdin)) != EOF && c != '\n')
        line.push_back(static_cast<char>(c));
    if (c == EOF && line.empty()) return std::nullopt;
    return line;
}

[[noreturn]] void pe_core::abort_job(const std::string& text, int status) {
    std::fflush(stdout);
    if (_trace) _trace->flush();  // what led to the abort is what the trace is for
    // Without coverse-run nobody stops the others (PMIx, the CRM): tell the PEs we are
    // connected to, which stop and tell theirs in turn. Under CONNECT=lazy the others are not
    // connected to us and would only see the PE that told them go.
    if (!_launcher) relay_abort(text);
    // Its shared-memory names go now, and those of the job's other PEs on this host: under
    // CONNECT=lazy a doorbell stays named while its PE runs (a peer may still come), and
    // without coverse-run nobody removes them later; Slurm stops the others with SIGKILL.
    if (_rdma) _rdma->unlink_names(true);
    if (_launcher) {
        _launcher->abort(status, text);
    } else if (_startup) {
        _startup->abort(status, text);
    } else {
        std::fprintf(stderr, "coverse: PE %u aborted: %s\n", _pe, text.c_str());
    }
    std::fflush(nullptr);
    std::_Exit(status);
}

[[noreturn]] void pe_core::fail_pe(const std::string& text, int status) {
    // Under a spawner (mpirun, srun, the CRM) the job stops as on CmiAbort: they end a job
    // whose process exits non-zero (Slurm's PMIx plugin too, for a client gone without
    // PMIx_Finalize), and ON_PEER_LOST=report is coverse-run's.
    if (!_report_lost || _num_pes < 2 || !_launcher) abort_job(text, status);
    static bool failing = false;  // a second failure while the first finishes its sends
    std::fflush(stdout);          // its own lines before the report of its end
    print("coverse: PE " + std::to_string(_pe) + " failed: " + text +
              "; ON_PEER_LOST=report: it leaves the job, the other PEs go on\n",
          true);
    if (!failing) {
        failing = true;
        // Sends still moving get a short while (a rendezvous waits for its get-done); what
        // is queued on a connection goes to the kernel. Beyond that the others get what
        // a dying PE's sends give them: a prefix, in order.
        _sched->run_until([this] { return _sends_in_flight == 0; }, std::chrono::seconds(1));
        if (_mesh) _mesh->flush();
    }
    std::fflush(nullptr);
    if (_trace) _trace->flush();
    if (_rdma) _rdma->unlink_names(false);
    std::_Exit(status);
}

// The process's exit handler: exit() called while this PE runs, before ConverseExit and
// before coverse::run returned (both shut the PE down first; nothing is left to do then).
// The code that called exit() (a handler, a task) is still below us on the stack and never
// returns to the loop, so the PE is ended here and the object itself is left to the
// process's end (its tasks' frames, the machine's scope, may still be running).
// - Any status but 0 on a job of several PEs: the program failed here, while the others
//   may be waiting on this PE: the job stops as on CmiAbort, naming the PE and exit(n)
//   (under ON_PEER_LOST=report this PE alone leaves), and the process ends with n.
// - Otherwise (exit(0), or a PE alone): the PE shuts down as ConverseExit does (the exit
//   vote waits for the other PEs to end too), and exit() goes on.
// - exit() from another thread of the program: the PE's loop is not that thread's to run.
//   A failure stops the job through the launcher (or the spawner) at once; exit(0) leaves
//   the PE as it is, and the others see it gone.
// - A child the PE forked (without exec) that returns through exit() holds a copy of the
//   PE, whose shutdown would speak on the PE's connections and remove its shared-memory
//   names: the copy is left alone.
void pe_core::on_process_exit(int status, void*) noexcept {
    pe_core* c = _instance;
    if (!c) return;
    if (::getpid() != c->_pid) {
        _instance = nullptr;
        (void)core_slot().release();
        return;
    }
    if (c->_shut_down) return;
    if (c->_shutting_down) {
        // exit() from code that a loop of the PE's own shutdown ran (ConverseExit's, the
        // end of run()'s): that shutdown never returns; a second one must not start, here
        // or from the PE's destructor.
        (void)core_slot().release();
        return;
    }
    const bool failed = status != 0 && c->_num_pes > 1;
    // What the process's parent will see: the low byte (exit(256) is a failure too).
    const int code = (status & 0xFF) != 0 ? (status & 0xFF) : 1;
    std::string text;
    if (failed)
        text = "PE " + std::to_string(c->_pe) + " called exit(" + std::to_string(status) +
               ") before the job's end (ConverseExit ends it on every PE)";
    if (!::pthread_equal(::pthread_self(), c->_thread)) {
        if (failed) c->stop_job_now(text, code);
        (void)core_slot().release();
        return;
    }
    if (failed) c->fail_pe(text, code);
    std::fflush(stdout);  // a last printf line still goes through the launcher, in order
    c->_machine.scope().request_stop();  // the program's own tasks: not run again after
    c->_sched->leave_tasks_at_exit();
    try {
        c->shutdown();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "coverse: PE %u: shutdown at exit(): %s\n", c->_pe, e.what());
    } catch (...) {
        std::fprintf(stderr, "coverse: PE %u: shutdown at exit() failed\n", c->_pe);
    }
    _instance = nullptr;
    (void)core_slot().release();
}

// From any thread: the launcher (or the spawner) stops the job saying why, and this process
// ends with `status`. No progress of the PE's loop. The job's shared-memory names go first,
// as in abort_job: under PMIx or the CRM nobody removes them after, and the other PEs may be
// stopped with SIGKILL before they notice (a doorbell was left in /dev/shm in 4 of 5 runs of
// abort_check -exit-thread under mpirun).
[[noreturn]] void pe_core::stop_job_now(const std::string& text, int status) noexcept {
    std::fflush(nullptr);
    // Not through _rdma: the PE's thread may be shutting down and freeing it meanwhile.
    if (!_shm_prefix.empty()) net::remove_shm_entries(_shm_prefix);
    if (_launcher)
        _launcher->abort(status, text);
    else if (_startup)
        _startup->abort(status, text);
    else
        std::fprintf(stderr, "coverse: PE %u aborted: %s\n", _pe, text.c_str());
    std::fflush(nullptr);
    std::_Exit(status);
}

void pe_core::relay_abort(const std::string& text) {
    static bool relaying = false;  // an abort while relaying one: the first is enough
    if (relaying || !_mesh || _shut_down || _num_pes < 2) return;
    relaying = true;
    const auto payload = net::encode(net::abort_payload{1, _pe, text});
    net::frame_header h;
    h.type = net::frame_type::abort;
    std::size_t posted = 0, done = 0;
    for (const net::link_info& l : _mesh->links())
        if (l.state == net::connection_state::connected &&
            _mesh->post(
                l.pe, h, payload, [](void* ctx, int) { ++*static_cast<std::size_t*>(ctx); },
                &done) == 0)
            ++posted;
    if (posted == 0) return;
    // A short while for the frames to leave (nested progress: handlers do not run).
    _sched->run_until([&] { return done == posted; }, std::chrono::milliseconds(300));
}

// ---------------------------------------------------------------------------------------
// Shutdown

void pe_core::shutdown() {
    if (_shut_down) return;
    _shutting_down = true;     // for the exit handler: exit() from inside must not start another
    _machine.close_credits();  // before the sends drain: a credit message is one of them
    // Every pending send first (a rendezvous ends at its get-done), then every rendezvous we
    // are fetching, then the disconnect handshake, which still serves what peers started
    // meanwhile: nothing in flight is lost.
    {
        const wait_scope w({wait_kind::socket_drain, no_peer, 0, "shutdown: sends in flight"});
        _sched->run_until([&] { return _sends_in_flight == 0; });
    }
    if (_rdma) _rdma->drain();
    if (_lazy && _mesh && _num_pes > 1) {
        // No disconnect handshake with every PE: agree over the tree that the job is over
        // and nothing is in flight, then the handshake with the peers we are connected to.
        exit_vote();
        _sched->run_until([&] { return _sends_in_flight == 0; });  // the verdicts
        _rdma->drain();
    }
    if (_mesh && _opts.verbose && _num_pes > 1) {
        std::uint32_t dialed = 0, accepted = 0;
        for (const net::link_info& l : _mesh->links())
            if (l.state != net::connection_state::error) ++(l.dialed ? dialed : accepted);
        print("coverse: PE " + std::to_string(_pe) + ": " + std::to_string(dialed + accepted) +
                  " connections at exit (" + std::to_string(dialed) + " dialed, " +
                  std::to_string(accepted) + " accepted; CONNECT=" + (_lazy ? "lazy" : "eager") +
                  ")\n",
              true);
    }
    if (_rdma && _opts.verbose) {
        const auto e = _rdma->eager_stats();
        if (e.opened || e.sends || e.receives || e.refused)
            print("coverse: PE " + std::to_string(_pe) + " eager: " + std::to_string(e.sends) +
                      " sent, " + std::to_string(e.receives) + " received, " +
                      std::to_string(e.opened) + " channels opened, " + std::to_string(e.refused) +
                      " refused, " + std::to_string(e.retired) + " retired unused, " +
                      std::to_string(e.no_credit) + " sends without a credit, " +
                      std::to_string(e.order_waits) + " kept on the ring for order, " +
                      std::to_string(e.bad_footers) + " bad footers" +
                      (e.put_sends || e.put_receives
                           ? "; by one-sided put: " + std::to_string(e.put_sends) + " sent, " +
                                 std::to_string(e.put_receives) + " received, " +
                                 std::to_string(e.put_waits) + " stream sends waited for a put"
                           : std::string()) +
                      "\n",
                  true);
    }
    if (_mesh) {
        trace::emit(trace::kind::phase_begin, 4);
        std::string failure;
        try {
            sync_wait(_mesh->shutdown());
        } catch (const std::exception& e) {
            failure = e.what();
        }
        trace::emit(trace::kind::phase_end, 4);
        _shut_down = true;
        if (_receiving) _sched->run_until([&] { return !_receiving; });
        if (!failure.empty())
            print("coverse: PE " + std::to_string(_pe) + ": " + failure + "\n", true);
    }
    _shut_down = true;
    if (_rdma) {
        _rdma->drain();
        _rdma->close();
        _rdma.reset();
    }
    for (void* m : _net_queue)
        alloc::msg_free(m);
    _net_queue.clear();
    while (void* m = _sched_queue.pop())
        alloc::msg_free(m);
    _mesh.reset();
    _backend.reset();
    _launcher.reset();
    _startup.reset();  // PMIx_Finalize
    stop_trace();
    _doctor.reset();  // before the scheduler: its queued snapshots must find it cancelled
    _sched.reset();
}

}  // namespace coverse::detail
