// Shared plumbing for the C++ sample programs: option parsing, the run clock, clean stop on
// SIGINT/SIGTERM, thread names and the one JSON result line printed at exit.
//
// Every sample follows the same life cycle:
//   Options opt(argc, argv, "queue", "usage text");   // --key=value or --key value
//   double duration = opt.number("duration", 10);
//   block_stop_signals();                               // before any thread starts
//   Workers<Totals> workers(threads);                   // starts the run clock
//   workers.start(worker_loop, std::cref(input));       // worker_loop(1..threads, input, totals)
//   double seconds = workers.run_for(duration);         // wait_until_stop(), join, run time
//   Result("queue", variant, seconds, workers.sum().messages, "messages").add("x", 1).print();
#pragma once

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

// GCC 12 drops the frame pointer in leaf functions (and shrink-wraps it away on call-free paths)
// even with -fno-omit-frame-pointer; frame-pointer unwinding then skips the caller of whatever
// function was sampled. Functions that tell the story start with SAMPLE_FRAME so that their frame
// (and therefore their caller) is always on the chain.
#define SAMPLE_FRAME() __asm__ volatile("" ::"r"(__builtin_frame_address(0)))

namespace sample {

// Set when the run should end (deadline reached or SIGINT/SIGTERM received).
inline std::atomic<bool> g_stop{false};

inline double now_seconds() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

inline int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// CPU time used by the whole process so far (all threads, user + system).
inline double process_cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Names the calling thread (at most 15 characters, the kernel's limit).
inline void name_thread(const std::string& name) {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

// Command-line options: "--key=value", "--key value" and bare "--flag" (value "1").
class Options {
public:
    Options(int argc, char** argv, const char* program, const char* usage)
        : program_(program), usage_(usage) {
        for (int i = 1; i < argc; i++) {
            std::string arg = argv[i];
            if (arg == "-h" || arg == "--help") {
                std::fputs(usage_, stdout);
                std::exit(0);
            }
            if (arg.rfind("--", 0) != 0 || arg.size() < 3) fail("unexpected argument " + arg);
            std::string key = arg.substr(2);
            std::string value = "1";
            size_t eq = key.find('=');
            if (eq != std::string::npos) {
                value = key.substr(eq + 1);
                key = key.substr(0, eq);
            } else if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
                value = argv[++i];
            }
            values_[key] = value;
        }
    }

    // Declares a flag (no value) so that "--trim" is not taken to swallow the next argument.
    bool flag(const std::string& key) {
        known_.push_back(key);
        auto it = values_.find(key);
        if (it == values_.end()) return false;
        if (it->second == "1" || it->second == "true" || it->second == "yes") return true;
        if (it->second == "0" || it->second == "false" || it->second == "no") return false;
        fail("--" + key + " takes no value");
        return false;
    }

    double number(const std::string& key, double fallback, double lo, double hi) {
        known_.push_back(key);
        auto it = values_.find(key);
        if (it == values_.end()) return fallback;
        char* end = nullptr;
        double v = std::strtod(it->second.c_str(), &end);
        if (end == it->second.c_str() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
            fail("--" + key + " wants a number in [" + fmt(lo) + ", " + fmt(hi) + "], got '" +
                 it->second + "'");
        return v;
    }

    std::string choice(const std::string& key, const std::vector<std::string>& allowed) {
        known_.push_back(key);
        auto it = values_.find(key);
        if (it == values_.end()) return allowed.front();
        for (const auto& a : allowed)
            if (a == it->second) return a;
        std::string all;
        for (const auto& a : allowed) all += (all.empty() ? "" : "|") + a;
        fail("--" + key + " wants one of " + all + ", got '" + it->second + "'");
        return {};
    }

    // Call after all options were read: rejects unknown ones (typos must not pass silently).
    void done() {
        for (const auto& kv : values_) {
            bool ok = false;
            for (const auto& k : known_) ok = ok || k == kv.first;
            if (!ok) fail("unknown option --" + kv.first);
        }
    }

    [[noreturn]] void fail(const std::string& why) {
        std::fprintf(stderr, "%s: %s\n%s", program_, why.c_str(), usage_);
        std::exit(2);
    }

private:
    static std::string fmt(double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v);
        return buf;
    }
    const char* program_;
    const char* usage_;
    std::map<std::string, std::string> values_;
    std::vector<std::string> known_;
};

// Blocks SIGINT and SIGTERM in the calling thread and in every thread it starts afterwards, so
// that only wait_until_stop() sees them (no EINTR surprises inside the workload).
inline void block_stop_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Sleeps until `seconds` have passed or SIGINT/SIGTERM arrives (or g_stop is set by the
// workload itself); then sets g_stop. Returns true when a signal ended the run.
// With `tick_s` > 0, `on_tick()` is called every `tick_s` seconds meanwhile.
template <typename Tick>
inline bool wait_until_stop(double seconds, double tick_s, Tick on_tick) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    double deadline = now_seconds() + seconds;
    double next_tick = tick_s > 0 ? now_seconds() + tick_s : deadline;
    bool signalled = false;
    while (!g_stop.load()) {
        double now = now_seconds();
        if (tick_s > 0 && now >= next_tick) {
            on_tick();
            next_tick += tick_s;
        }
        double left = deadline - now;
        if (left <= 0) break;
        double step = left < 0.05 ? left : 0.05;
        if (tick_s > 0 && next_tick - now < step) step = next_tick > now ? next_tick - now : 0;
        timespec ts{static_cast<time_t>(step), static_cast<long>((step - std::floor(step)) * 1e9)};
        if (sigtimedwait(&set, nullptr, &ts) > 0) {
            signalled = true;
            break;
        }
    }
    g_stop = true;
    return signalled;
}

inline bool wait_until_stop(double seconds) {
    return wait_until_stop(seconds, 0, [] {});
}

// Worker threads, one Totals (their counts) each. Every thread starts directly in the loop
// function: std::thread calls loop(index, args..., totals[index - 1]) itself (index from 1), so
// no wrapper frame stands between the thread's start and the loop in a stack. Constructing it
// starts the run clock; call block_stop_signals() before start().
template <typename Totals>
class Workers {
public:
    explicit Workers(int count) : totals(static_cast<size_t>(count)), start_(now_seconds()) {}

    template <typename Loop, typename... Args>
    void start(Loop loop, const Args&... args) {
        for (size_t i = 0; i < totals.size(); i++)
            threads_.emplace_back(loop, static_cast<int>(i) + 1, args..., std::ref(totals[i]));
    }

    // Joins every worker (g_stop must be set); returns the seconds since the clock started.
    // Always inlined, like run_for(): the main thread's stack reads main -> sigtimedwait.
    __attribute__((always_inline)) double join() {
        for (auto& t : threads_) t.join();
        threads_.clear();
        return now_seconds() - start_;
    }

    // wait_until_stop(seconds), then join().
    __attribute__((always_inline)) double run_for(double seconds) {
        wait_until_stop(seconds);
        return join();
    }

    // Every worker's totals merged (Totals::merge), once they have been joined.
    const Totals& sum() {
        if (!summed_) {
            for (const Totals& t : totals) sum_.merge(t);
            summed_ = true;
        }
        return sum_;
    }

    std::vector<Totals> totals;  // one per worker, in index order

private:
    double start_;
    std::vector<std::thread> threads_;
    Totals sum_;
    bool summed_ = false;
};

// The one JSON line a sample prints on stdout at exit.
class Result {
public:
    Result(const char* sample, const std::string& variant, double seconds, uint64_t work,
           const char* unit) {
        add("sample", sample);
        add("variant", variant);
        add("seconds", std::round(seconds * 1000) / 1000);
        add("work", work);
        add("unit", unit);
        add("rate", seconds > 0 ? std::round(static_cast<double>(work) / seconds * 10) / 10 : 0.0);
        double cpu = process_cpu_seconds();
        add("cpu_seconds", std::round(cpu * 1000) / 1000);
        add("work_per_cpu_second",
            cpu > 0 ? std::round(static_cast<double>(work) / cpu * 10) / 10 : 0.0);
    }
    Result& add(const char* key, const std::string& v) { return raw(key, quote(v)); }
    Result& add(const char* key, const char* v) { return raw(key, quote(v)); }
    Result& add(const char* key, double v) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        if (!std::strpbrk(buf, ".e")) std::strcat(buf, ".0");
        return raw(key, buf);
    }
    Result& add(const char* key, uint64_t v) { return raw(key, std::to_string(v)); }
    Result& add(const char* key, int64_t v) { return raw(key, std::to_string(v)); }
    Result& add(const char* key, int v) { return raw(key, std::to_string(v)); }
    Result& raw(const char* key, const std::string& json) {
        body_ += (body_.empty() ? "" : ",") + quote(key) + ":" + json;
        return *this;
    }
    void print() const {
        std::printf("{%s}\n", body_.c_str());
        std::fflush(stdout);
    }
    static std::string quote(const std::string& s) {
        std::string out = "\"";
        for (unsigned char c : s) {
            if (c == '"' || c == '\\') {
                out += '\\';
                out += static_cast<char>(c);
            } else if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
        return out + "\"";
    }

private:
    std::string body_;
};

// Waits on one lock split over the phases of the sections that ran during them: what a
// critical path gives a waiter. Each section has two phases, [start, mid) and [mid, end).
// The holder logs its section by number (``begin``, then ``mid``/``end`` on the entry), under
// the lock; a waiter reads ``begun()`` before it takes the lock and, once it holds it, splits
// its wait over the sections since then (``split``: the lock orders the holders' writes before
// its reads). ``first``/``second``: the running totals over every waiter, for progress lines.
class SectionLog {
  public:
    struct Entry {
        int64_t start = 0, mid = 0, end = 0;
    };

    uint64_t begun() const { return __atomic_load_n(&begun_, __ATOMIC_RELAXED); }

    // Under the lock: the new section's entry, started at ``start``.
    Entry& begin(int64_t start) {
        Entry& e = ring_[begun_ % kRing];
        e = Entry{start, start, start};
        __atomic_store_n(&begun_, begun_ + 1, __ATOMIC_RELAXED);
        return e;
    }

    // Under the lock: the wait [w0, h0), begun when ``since`` sections had begun, split over
    // the sections' phases (added to ``a`` and ``b`` and to the running totals).
    void split(int64_t w0, int64_t h0, uint64_t since, int64_t& a, int64_t& b) {
        uint64_t k = since > 0 ? since - 1 : 0;
        if (begun_ - k > kRing) k = begun_ - kRing;
        int64_t x = 0, y = 0;
        for (; k < begun_; k++) {
            const Entry& e = ring_[k % kRing];
            x += overlap(w0, h0, e.start, e.mid);
            y += overlap(w0, h0, e.mid, e.end);
        }
        a += x;
        b += y;
        first.fetch_add(x, std::memory_order_relaxed);
        second.fetch_add(y, std::memory_order_relaxed);
    }

    std::atomic<int64_t> first{0}, second{0};

  private:
    static int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
        int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
        return hi > lo ? hi - lo : 0;
    }
    static constexpr uint64_t kRing = 4096;
    Entry ring_[kRing];
    uint64_t begun_ = 0;
};

// A progress line of a SectionLog's running split: {"t_ns":..,"<a>":..,"<b>":..}.
inline void print_split(const SectionLog& log, const char* a, const char* b) {
    std::printf("{\"t_ns\":%lld,\"%s\":%lld,\"%s\":%lld}\n",
                static_cast<long long>(now_ns()), a,
                static_cast<long long>(log.first.load(std::memory_order_relaxed)), b,
                static_cast<long long>(log.second.load(std::memory_order_relaxed)));
    std::fflush(stdout);
}

}  // namespace sample

// Frames shared by samples (outside the namespace, so that their frames read `spin_for`,
// `nap` and `fnv1a`): on-CPU work for ``ns`` nanoseconds, a sleep of ``ns`` that resumes after
// a signal, and FNV-1a over a string from the hash ``h``.
__attribute__((noinline)) inline uint64_t spin_for(int64_t ns) {
    SAMPLE_FRAME();
    int64_t end = sample::now_ns() + ns;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    while (sample::now_ns() < end) {
        for (int i = 0; i < 256; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    }
    return x;
}

__attribute__((noinline)) inline void nap(int64_t ns) {
    SAMPLE_FRAME();
    timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

// static, not inline: the compiler then knows which registers it clobbers, so its callers
// (hash_fields, QueueStats::record, ...) compile exactly as when each sample defined its own.
__attribute__((noinline, unused)) static uint64_t fnv1a(std::string_view s, uint64_t h) {
    SAMPLE_FRAME();
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}
