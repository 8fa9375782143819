// epoll: a tiny key-value server. N worker threads share one epoll fd and serve a line protocol
// ("GET key\n" -> "VALUE key data\n") on 127.0.0.1 (an ephemeral port; nothing else is ever
// bound). A bundled load generator thread (`loadgen`) opens a few connections to it and sends
// requests at a light, fixed rate; it stops by itself after --requests requests or at the end of
// --duration, whichever comes first.
//
//   --wait=block  workers call epoll_wait(..., -1): between requests they sleep in the kernel
//                 (off-CPU, idle).
//   --wait=busy   workers call epoll_wait(..., 0) in a loop: the same idle time is spent on a CPU,
//                 spinning through epoll_wait. Lower wake-up latency, two cores burnt.
//
// Usage: epoll [--wait=block|busy] [--duration S] [--threads N] [--rate R] [--requests N]
//              [--connections N]
// At exit prints one JSON line with the requests served and the load generator's latency.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../common/sample.h"

const char kUsage[] =
    "usage: epoll [--wait=block|busy] [--duration SECONDS] [--threads N] [--rate R]\n"
    "             [--requests N] [--connections N]\n"
    "  --wait         block: epoll_wait(..., -1) (default); busy: epoll_wait(..., 0) in a loop\n"
    "  --duration     run time in seconds (default 10); SIGINT/SIGTERM end it early\n"
    "  --threads      worker threads on the shared epoll fd (default 3)\n"
    "  --rate         requests per second sent by the load generator (default 2000)\n"
    "  --requests     the load generator stops after this many requests (default 100000)\n"
    "  --connections  load generator connections (default 8)\n"
    "Listens on 127.0.0.1 only (ephemeral port). Prints one JSON line at exit.\n";

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "epoll: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

// ---------------------------------------------------------------- the server

struct Server {
    int listen_fd = -1, epoll_fd = -1, stop_fd = -1;
    uint16_t port = 0;
    bool busy = false;
    std::unordered_map<std::string, std::string> store;
};

struct Connection {
    int fd;
    std::string inbox;
};

__attribute__((noinline)) std::string handle_request(const Server& server, std::string_view line) {
    SAMPLE_FRAME();
    if (line.rfind("GET ", 0) != 0) return "ERROR bad request\n";
    std::string key(line.substr(4));
    auto it = server.store.find(key);
    if (it == server.store.end()) return "MISSING " + key + "\n";
    return "VALUE " + key + " " + it->second + "\n";
}

// Reads what the connection has, answers every complete line; false when the peer closed.
__attribute__((noinline)) bool serve_connection(const Server& server, Connection& conn,
                                                uint64_t& served) {
    SAMPLE_FRAME();
    char buf[4096];
    for (;;) {
        ssize_t n = read(conn.fd, buf, sizeof buf);
        if (n == 0) return false;
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return false;
        }
        conn.inbox.append(buf, static_cast<size_t>(n));
    }
    std::string out;
    size_t start = 0, eol;
    while ((eol = conn.inbox.find('\n', start)) != std::string::npos) {
        out += handle_request(server, std::string_view(conn.inbox).substr(start, eol - start));
        start = eol + 1;
        served++;
    }
    conn.inbox.erase(0, start);
    size_t off = 0;
    while (off < out.size()) {
        ssize_t n = write(conn.fd, out.data() + off, out.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;  // the peer is gone (or its buffer is full: drop it)
        off += static_cast<size_t>(n);
    }
    return true;
}

__attribute__((noinline)) void accept_connections(const Server& server) {
    SAMPLE_FRAME();
    for (;;) {
        int fd = accept4(server.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;  // EAGAIN: another worker took it, or nothing left
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        auto* conn = new Connection{fd, {}};
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLONESHOT;
        ev.data.ptr = conn;
        if (epoll_ctl(server.epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            delete conn;
        }
    }
}

// The event loop of one worker: the only difference between the variants is the timeout.
__attribute__((noinline)) void event_loop(const Server& server, uint64_t& served) {
    SAMPLE_FRAME();
    const int timeout = server.busy ? 0 : -1;
    epoll_event events[16];
    while (!sample::g_stop.load(std::memory_order_relaxed)) {
        int n = epoll_wait(server.epoll_fd, events, 16, timeout);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int i = 0; i < n; i++) {
            void* tag = events[i].data.ptr;
            if (tag == &server.listen_fd) {
                accept_connections(server);
            } else if (tag == &server.stop_fd) {
                return;
            } else {
                auto* conn = static_cast<Connection*>(tag);
                if (serve_connection(server, *conn, served)) {
                    epoll_event ev{};
                    ev.events = EPOLLIN | EPOLLONESHOT;
                    ev.data.ptr = conn;
                    epoll_ctl(server.epoll_fd, EPOLL_CTL_MOD, conn->fd, &ev);
                } else {
                    close(conn->fd);
                    delete conn;
                }
            }
        }
    }
}

void worker_main(int index, const Server* server, uint64_t* served) {
    sample::name_thread("worker-" + std::to_string(index));
    event_loop(*server, *served);
}

void open_server(Server& s) {
    s.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s.listen_fd < 0) die("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // 127.0.0.1 only
    addr.sin_port = 0;                              // ephemeral
    if (bind(s.listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) die("bind");
    if (listen(s.listen_fd, 64) < 0) die("listen");
    socklen_t len = sizeof addr;
    getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
    s.port = ntohs(addr.sin_port);
    s.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    s.stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s.epoll_fd < 0 || s.stop_fd < 0) die("epoll_create1/eventfd");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &s.listen_fd;
    epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.listen_fd, &ev);
    ev.data.ptr = &s.stop_fd;  // level-triggered and never read: wakes every worker at the end
    epoll_ctl(s.epoll_fd, EPOLL_CTL_ADD, s.stop_fd, &ev);
    for (int i = 0; i < 256; i++)
        s.store["key-" + std::to_string(i)] = std::string(16 + i % 48, static_cast<char>('a' + i % 26));
}

// ---------------------------------------------------------------- the load generator

struct LoadStats {
    uint64_t sent = 0, answered = 0, skipped = 0;
    std::vector<int64_t> latency_ns;
};

struct ClientConn {
    int fd = -1;
    bool waiting = false;
    int64_t sent_at = 0;
    std::string inbox;
};

int connect_loopback(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) die("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// Sends one request every 1/rate seconds on an idle connection (a connection still waiting for
// its answer is not reused), reads the answers, and measures each round trip.
__attribute__((noinline)) void generate_load(uint16_t port, int connections, double rate,
                                             uint64_t max_requests, LoadStats& stats) {
    SAMPLE_FRAME();
    std::vector<ClientConn> conns(static_cast<size_t>(connections));
    for (auto& c : conns) c.fd = connect_loopback(port);
    std::vector<pollfd> pfds(conns.size());
    const int64_t interval = static_cast<int64_t>(1e9 / rate);
    int64_t next_send = sample::now_ns();
    size_t rr = 0;
    char buf[4096];
    // After the last request, keep reading (for at most a second) until every answer is in.
    const int64_t give_up = INT64_MAX;
    int64_t drain_deadline = give_up;
    for (;;) {
        if (sample::g_stop.load(std::memory_order_relaxed)) break;
        int64_t now = sample::now_ns();
        if (stats.sent >= max_requests) {
            if (stats.answered >= stats.sent || now >= drain_deadline) break;
            if (drain_deadline == give_up) drain_deadline = now + 1000000000;
            next_send = drain_deadline;
        }
        if (now >= next_send) {
            next_send += interval;
            if (next_send < now - 100 * interval) next_send = now;  // do not burst after a stall
            ClientConn* idle = nullptr;
            for (size_t k = 0; k < conns.size() && !idle; k++) {
                ClientConn& c = conns[(rr + k) % conns.size()];
                if (!c.waiting) idle = &c;
            }
            rr++;
            if (!idle) {
                stats.skipped++;
            } else {
                std::string req = "GET key-" + std::to_string(stats.sent % 300) + "\n";
                idle->sent_at = sample::now_ns();
                if (write(idle->fd, req.data(), req.size()) != static_cast<ssize_t>(req.size()))
                    die("loadgen write");
                idle->waiting = true;
                stats.sent++;
            }
            continue;
        }
        for (size_t k = 0; k < conns.size(); k++) pfds[k] = {conns[k].fd, POLLIN, 0};
        int64_t wait = std::min<int64_t>(next_send - now, 50000000);  // notice g_stop soon
        timespec ts{static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
        int n = ppoll(pfds.data(), pfds.size(), &ts, nullptr);
        if (n <= 0) continue;
        for (size_t k = 0; k < conns.size(); k++) {
            if (!(pfds[k].revents & POLLIN)) continue;
            ssize_t got = read(conns[k].fd, buf, sizeof buf);
            if (got <= 0) die("loadgen read");
            conns[k].inbox.append(buf, static_cast<size_t>(got));
            if (conns[k].inbox.find('\n') != std::string::npos) {
                stats.latency_ns.push_back(sample::now_ns() - conns[k].sent_at);
                stats.answered++;
                conns[k].waiting = false;
                conns[k].inbox.clear();
            }
        }
    }
    for (auto& c : conns) close(c.fd);
}

void loadgen_main(uint16_t port, int connections, double rate, uint64_t max_requests,
                  LoadStats* stats) {
    sample::name_thread("loadgen");
    generate_load(port, connections, rate, max_requests, *stats);
}

double percentile_us(std::vector<int64_t>& v, double p) {
    if (v.empty()) return 0;
    size_t k = static_cast<size_t>(p * static_cast<double>(v.size() - 1));
    std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
    return std::round(static_cast<double>(v[k]) / 100) / 10;
}

int main(int argc, char** argv) {
    sample::Options opt(argc, argv, "epoll", kUsage);
    std::string variant = opt.choice("wait", {"block", "busy"});
    double duration = opt.number("duration", 10, 0.1, 86400);
    int threads = static_cast<int>(opt.number("threads", 3, 1, 64));
    double rate = opt.number("rate", 2000, 1, 1e6);
    uint64_t max_requests = static_cast<uint64_t>(opt.number("requests", 100000, 1, 1e12));
    int connections = static_cast<int>(opt.number("connections", 8, 1, 256));
    opt.done();

    Server server;
    server.busy = variant == "busy";
    open_server(server);

    sample::block_stop_signals();
    double start = sample::now_seconds();
    std::vector<uint64_t> served(static_cast<size_t>(threads));
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; i++)
        workers.emplace_back(worker_main, i + 1, &server, &served[static_cast<size_t>(i)]);
    LoadStats load;
    std::thread loadgen(loadgen_main, server.port, connections, rate, max_requests, &load);

    sample::wait_until_stop(duration);
    uint64_t one = 1;
    if (write(server.stop_fd, &one, sizeof one) != sizeof one) die("eventfd write");
    loadgen.join();
    for (auto& t : workers) t.join();
    double seconds = sample::now_seconds() - start;

    uint64_t total = 0;
    for (uint64_t s : served) total += s;
    double mean_us = 0;
    for (int64_t l : load.latency_ns) mean_us += static_cast<double>(l);
    mean_us = load.latency_ns.empty() ? 0 : mean_us / static_cast<double>(load.latency_ns.size()) / 1000;
    sample::Result("epoll", variant, seconds, total, "requests")
        .add("workers", threads)
        .add("port", static_cast<int>(server.port))
        .add("loadgen_sent", load.sent)
        .add("loadgen_answered", load.answered)
        .add("loadgen_skipped", load.skipped)
        .add("latency_mean_us", std::round(mean_us * 10) / 10)
        .add("latency_p50_us", percentile_us(load.latency_ns, 0.50))
        .add("latency_p99_us", percentile_us(load.latency_ns, 0.99))
        .print();
    return 0;
}
