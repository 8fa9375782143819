// A program that stalls once: the reference for the time axis (tests/live/test_timeline_live.py).
//
// Workers (`--threads`, named `worker-N`) take one mutex, `g_lock`, many times a second for a
// few microseconds each (`tiny_section`), spin a little outside it (`outside_work`) and sleep
// (`outside_sleep`). Once, `--stall-at` seconds after the start, the `holder` thread takes the
// lock and keeps it for `--hold-ms` milliseconds, spinning in `hold_during_stall`: every worker
// blocks on the lock for that long, at that moment.
//
// Usage: stall [--duration S] [--threads N] [--stall-at S] [--hold-ms N]
// Output: when the stall ends, one JSON line {"event":"stall","holder_tid":T,"start_ns":..,
//   "end_ns":..} (CLOCK_MONOTONIC when the holder got the lock and when it let it go); at the
//   end, per worker {"event":"longest_wait","tid":T,"start_ns":..,"end_ns":..} (its longest
//   pthread_mutex_lock), then the usual result line ("work": sections).
#include "../common/sample.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace {

const char* const kUsage =
    "usage: stall [--duration SECONDS] [--threads N] [--stall-at SECONDS] [--hold-ms N]\n"
    "  workers take one mutex briefly and often; once, at --stall-at, a holder thread keeps\n"
    "  it for --hold-ms milliseconds (spinning in hold_during_stall)\n";

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
std::atomic<uint64_t> g_sink{0};

struct Wait {
    uint64_t sections = 0;
    int tid = 0;
    int64_t start_ns = 0, end_ns = 0;
};

__attribute__((noinline)) void tiny_section() {
    SAMPLE_FRAME();
    g_sink.fetch_add(spin_for(5000), std::memory_order_relaxed);
}

__attribute__((noinline)) void outside_work() {
    SAMPLE_FRAME();
    g_sink.fetch_add(spin_for(200000), std::memory_order_relaxed);
}

__attribute__((noinline)) void outside_sleep() {
    SAMPLE_FRAME();
    nap(2000000);
}

__attribute__((noinline)) void worker_loop(int id, Wait& w) {
    SAMPLE_FRAME();
    sample::name_thread("worker-" + std::to_string(id));
    w.tid = static_cast<int>(syscall(SYS_gettid));
    while (!sample::g_stop.load(std::memory_order_relaxed)) {
        int64_t w0 = sample::now_ns();
        pthread_mutex_lock(&g_lock);
        int64_t w1 = sample::now_ns();
        if (w1 - w0 > w.end_ns - w.start_ns) {
            w.start_ns = w0;
            w.end_ns = w1;
        }
        tiny_section();
        pthread_mutex_unlock(&g_lock);
        w.sections++;
        outside_work();
        outside_sleep();
    }
}

__attribute__((noinline)) void hold_during_stall(int64_t ns) {
    SAMPLE_FRAME();
    g_sink.fetch_add(spin_for(ns), std::memory_order_relaxed);
}

__attribute__((noinline)) void holder_main(double at_s, int64_t hold_ns) {
    SAMPLE_FRAME();
    sample::name_thread("holder");
    int64_t at = static_cast<int64_t>(sample::now_seconds() * 1e9 + at_s * 1e9);
    while (sample::now_ns() < at && !sample::g_stop.load()) nap(std::min<int64_t>(
        at - sample::now_ns(), 50000000));
    if (sample::g_stop.load()) return;
    pthread_mutex_lock(&g_lock);
    int64_t start = sample::now_ns();
    hold_during_stall(hold_ns);
    int64_t end = sample::now_ns();
    pthread_mutex_unlock(&g_lock);
    std::printf("{\"event\":\"stall\",\"holder_tid\":%d,\"start_ns\":%lld,\"end_ns\":%lld}\n",
                static_cast<int>(syscall(SYS_gettid)), static_cast<long long>(start),
                static_cast<long long>(end));
    std::fflush(stdout);
    while (!sample::g_stop.load()) nap(50000000);
}

}  // namespace

int main(int argc, char** argv) {
    sample::Options opt(argc, argv, "stall", kUsage);
    double duration = opt.number("duration", 5, 0.1, 86400);
    int threads = static_cast<int>(opt.number("threads", 2, 1, 64));
    double at = opt.number("stall-at", 2.5, 0, 86400);
    int64_t hold_ns = static_cast<int64_t>(opt.number("hold-ms", 300, 0, 60000) * 1e6);
    opt.done();
    sample::block_stop_signals();
    sample::Workers<Wait> workers(threads);
    workers.start(worker_loop);
    std::thread holder(holder_main, at, hold_ns);
    sample::wait_until_stop(duration);  // sets g_stop
    holder.join();
    double seconds = workers.join();
    uint64_t sections = 0;
    for (const auto& w : workers.totals) {
        sections += w.sections;
        std::printf("{\"event\":\"longest_wait\",\"tid\":%d,\"start_ns\":%lld,\"end_ns\":%lld}\n",
                    w.tid, static_cast<long long>(w.start_ns), static_cast<long long>(w.end_ns));
    }
    sample::Result("stall", "mutex", seconds, sections, "sections")
        .add("threads", threads)
        .add("hold_ms", static_cast<double>(hold_ns) * 1e-6)
        .print();
    return 0;
}
