// handlers: a CPU-bound request service with eight handlers, for the CI gate's benchmark.
//
// `--threads` (4) `worker-N` threads serve requests in a loop: `serve_request` -> `dispatch`
// calls each of eight handlers once per request, every handler hashing a fixed number of
// rounds (`hash_rounds`). The handlers' shares of the work per request (in rounds):
//   h_parse 16, h_route 10, h_auth 12, h_query 20, h_render 14, h_compress 12, h_log 6,
//   h_metrics 10   (100 in all: h_auth is 12% of the work)
// `--slow-auth` makes h_auth do 15 rounds instead of 12 (25% slower; the request 3% slower):
// the known regression `benchmarks/check_gate.py` must catch.
//
// Work is reported on stdout as JSON lines: every `--progress-ms` (250) ms a progress line
// `{"t_ns":T,"work":N}` (T: CLOCK_MONOTONIC, the clock perf's timestamps use on Linux; N: the
// requests completed so far), and at exit the result line every sample prints.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../common/sample.h"

static int g_round_ns = 1;  // scale of one round (--round N: inner iterations per round)
static int g_auth_rounds = 12;

struct alignas(64) Counter {
    std::atomic<uint64_t> done{0};
};

__attribute__((noinline)) uint64_t hash_rounds(uint64_t x, int rounds) {
    SAMPLE_FRAME();
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < g_round_ns; i++) {
            x ^= x >> 33;
            x *= 0xff51afd7ed558ccdULL;
            x ^= x >> 29;
        }
    }
    return x;
}

// Plain global functions, so their names are plain (h_auth, not a namespace's).
// Each handler keeps its own frame (the call is not a tail call: the result is mixed after it).
#define HANDLER(name, rounds)                                         \
    __attribute__((noinline)) uint64_t name(uint64_t x) {             \
        SAMPLE_FRAME();                                               \
        uint64_t y = hash_rounds(x, rounds);                          \
        return y ^ (x + 1);                                           \
    }

HANDLER(h_parse, 16)
HANDLER(h_route, 10)
HANDLER(h_query, 20)
HANDLER(h_render, 14)
HANDLER(h_compress, 12)
HANDLER(h_log, 6)
HANDLER(h_metrics, 10)

__attribute__((noinline)) uint64_t h_auth(uint64_t x) {
    SAMPLE_FRAME();
    uint64_t y = hash_rounds(x, g_auth_rounds);
    return y ^ (x + 1);
}

__attribute__((noinline)) uint64_t dispatch(uint64_t x) {
    SAMPLE_FRAME();
    x = h_parse(x);
    x = h_route(x);
    x = h_auth(x);
    x = h_query(x);
    x = h_render(x);
    x = h_compress(x);
    x = h_log(x);
    x = h_metrics(x);
    return x + 1;
}

__attribute__((noinline)) uint64_t serve_request(uint64_t x) {
    SAMPLE_FRAME();
    uint64_t y = dispatch(x);
    return y ^ 0x9e3779b97f4a7c15ULL;
}

struct Worker {
    int index = 0;
    Counter counter;
    uint64_t sink = 0;
    pthread_t thread{};
};

void* worker_main(void* arg) {
    auto* w = static_cast<Worker*>(arg);
    sample::name_thread("worker-" + std::to_string(w->index));
    uint64_t x = 0x1234567ULL + static_cast<uint64_t>(w->index);
    while (!sample::g_stop.load(std::memory_order_relaxed)) {
        x = serve_request(x);
        w->counter.done.fetch_add(1, std::memory_order_relaxed);
    }
    w->sink = x;
    return nullptr;
}

namespace {

uint64_t total(std::vector<Worker>& ws) {
    uint64_t sum = 0;
    for (auto& w : ws) sum += w.counter.done.load(std::memory_order_relaxed);
    return sum;
}

// Sleeps up to `seconds`; true when SIGINT or SIGTERM arrived (g_stop is left alone: the
// workers must not see a progress tick as the end).
bool signalled_within(double seconds) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    timespec ts{static_cast<time_t>(seconds),
                static_cast<long>((seconds - static_cast<double>(static_cast<time_t>(seconds))) *
                                  1e9)};
    return sigtimedwait(&set, nullptr, &ts) > 0;
}

const char* kUsage =
    "usage: handlers [--duration S] [--threads N] [--slow-auth] [--round N] "
    "[--progress-ms MS]\n";

}  // namespace

int main(int argc, char** argv) {
    sample::Options opt(argc, argv, "handlers", kUsage);
    double duration = opt.number("duration", 10, 0.1, 86400);
    int threads = static_cast<int>(opt.number("threads", 4, 1, 64));
    bool slow = opt.flag("slow-auth");
    g_round_ns = static_cast<int>(opt.number("round", 40, 1, 100000));
    double progress_ms = opt.number("progress-ms", 250, 0, 60000);
    opt.done();
    g_auth_rounds = slow ? 15 : 12;
    sample::block_stop_signals();
    std::vector<Worker> ws(static_cast<size_t>(threads));
    double start = sample::now_seconds();
    for (int i = 0; i < threads; i++) {
        ws[static_cast<size_t>(i)].index = i + 1;
        pthread_create(&ws[static_cast<size_t>(i)].thread, nullptr, worker_main,
                       &ws[static_cast<size_t>(i)]);
    }
    double end = start + duration;
    double next = start + progress_ms / 1000;
    for (;;) {
        double now = sample::now_seconds();
        if (now >= end) break;
        double until = progress_ms > 0 && next < end ? next : end;
        if (until > now && signalled_within(std::min(until - now, 0.05))) break;
        if (progress_ms <= 0 || sample::now_seconds() < next) continue;
        std::printf("{\"t_ns\":%lld,\"work\":%llu}\n", static_cast<long long>(sample::now_ns()),
                    static_cast<unsigned long long>(total(ws)));
        std::fflush(stdout);
        next += progress_ms / 1000;
    }
    sample::g_stop = true;
    double seconds = sample::now_seconds() - start;
    uint64_t sink = 0;
    for (auto& w : ws) {
        pthread_join(w.thread, nullptr);
        sink ^= w.sink;
    }
    sample::Result("handlers", slow ? "slow-auth" : "base", seconds, total(ws), "requests")
        .add("threads", threads)
        .add("auth_rounds", g_auth_rounds)
        .add("checksum", static_cast<uint64_t>(sink & 0xffff))
        .print();
    return 0;
}
