// queue: a syslog-ingest module. One producer thread reads "packets" (generates syslog lines) and
// hands them to eight consumer threads through a bounded queue; each consumer parses, hashes and
// formats every message, then forwards the records to a downstream collector in batches and waits
// for its acknowledgement (deliver_message: off-CPU, like the network round trip it stands for),
// so that the consumers are not CPU-bound by design. Two queue implementations:
//
//   --queue=mutex     std::list + two std::mutex + std::condition_variable (not-full / not-empty).
//                     The queue mutex (`queue_mutex_` inside the global `g_mutex_queue`) is held
//                     while a consumer copies up to --take messages out and updates the shared
//                     per-host statistics for each, so the consumers queue up behind each other
//                     on it and a consumer that waits for the lock is not processing anything.
//   --queue=lockfree  moodycamel::BlockingConcurrentQueue: the producer calls try_enqueue and falls
//                     back to a sleeping, backing-off wait_enqueue; consumers call wait_dequeue_timed (100 ms)
//                     and keep their statistics per thread. No lock on the message path.
//
// The work per message (QueueStats::record, process_message and below, deliver_message) is
// identical in both variants; only where the statistics live and the queue differ.
//
// Usage: queue [--queue=mutex|lockfree] [--duration S] [--threads N] [--capacity N] [--work N]
//              [--bookkeeping N] [--take N] [--deliver-batch N] [--deliver-us N]
//              [--progress-ms MS]
// At exit prints one JSON line, e.g.
//   {"sample":"queue","variant":"mutex","seconds":10.0,"work":123456,"unit":"messages",
//    "rate":12345.6,"consumers":8,"consumer_mutex_wait_pct":24.1,"consumer_idle_wait_pct":0.3,...}
// consumer_mutex_wait_pct is the consumers' own measurement (CLOCK_MONOTONIC around a contended
// queue-mutex lock) of the share of their wall time spent blocked on the queue mutex.
// Every --progress-ms (250; 0: none) a progress line gives the running totals at that instant
// (CLOCK_MONOTONIC, the clock of perf's timestamps), so any window of the run can be clocked:
//   {"t_ns":123,"work":4567,"consumer_lock_wait_ns":890,"consumers":8}
#include <concurrentqueue/blockingconcurrentqueue.h>
#include <immintrin.h>
#include <sys/prctl.h>

#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../common/sample.h"

const char kUsage[] =
    "usage: queue [--queue=mutex|lockfree] [--duration SECONDS] [--threads N] [--capacity N]\n"
    "             [--work N] [--bookkeeping N] [--take N] [--deliver-batch N] [--deliver-us N]\n"
    "  --queue     mutex: std::list + std::mutex + std::condition_variable (default)\n"
    "              lockfree: moodycamel::BlockingConcurrentQueue\n"
    "  --duration  run time in seconds (default 10); SIGINT/SIGTERM end it early\n"
    "  --threads   consumer threads (default 8)\n"
    "  --capacity  queue bound in messages (default 4096)\n"
    "  --work      hashing rounds per message (default 120)\n"
    "  --bookkeeping  fingerprint rounds in the per-message statistics (default 140); in the\n"
    "              mutex variant they run under the queue mutex\n"
    "  --take      messages a consumer takes from the mutex queue per lock (default 8)\n"
    "  --deliver-batch  records a consumer forwards downstream at once (default 16)\n"
    "  --deliver-us  microseconds a consumer waits for the downstream acknowledgement of each\n"
    "              batch (default 480; 0: no delivery wait)\n"
    "  --progress-ms  milliseconds between progress lines on stdout (default 250; 0: none)\n"
    "Prints one JSON line with the message count and rate at exit.\n";

int g_work_rounds = 120;
int g_stats_rounds = 80;
size_t g_take = 8;
uint64_t g_deliver_batch = 16;
int64_t g_deliver_ns = 480000;
size_t g_capacity = 4096;
constexpr size_t kBatch = 32;  // the producer pushes messages in batches of this many

// ---------------------------------------------------------------- the per-message work

// One received syslog packet. Fixed size (syslog over UDP is short), so that passing messages
// through either queue allocates nothing per message: only the queues differ between variants.
struct Message {
    uint32_t len = 0;
    char text[252];
    std::string_view view() const { return std::string_view(text, len); }
};

struct SyslogFields {
    int priority = 0;
    std::string_view timestamp, host, app, pid, text;
};

// "<PRI>Mmm dd hh:mm:ss host app[pid]: text"
__attribute__((noinline)) bool parse_syslog(const Message& m, SyslogFields& f) {
    SAMPLE_FRAME();
    std::string_view s = m.view();
    if (s.size() < 4 || s[0] != '<') return false;
    size_t gt = s.find('>');
    if (gt == std::string_view::npos) return false;
    for (size_t i = 1; i < gt; i++) f.priority = f.priority * 10 + (s[i] - '0');
    s.remove_prefix(gt + 1);
    if (s.size() < 16) return false;
    f.timestamp = s.substr(0, 15);
    s.remove_prefix(16);
    size_t sp = s.find(' ');
    f.host = s.substr(0, sp);
    s.remove_prefix(sp + 1);
    size_t br = s.find('[');
    size_t colon = s.find("]: ");
    if (br == std::string_view::npos || colon == std::string_view::npos) return false;
    f.app = s.substr(0, br);
    f.pid = s.substr(br + 1, colon - br - 1);
    f.text = s.substr(colon + 3);
    return true;
}

// Fingerprints the message for de-duplication: several rounds over every field.
__attribute__((noinline)) uint64_t hash_fields(const SyslogFields& f) {
    SAMPLE_FRAME();
    uint64_t h = 0xcbf29ce484222325ULL ^ static_cast<uint64_t>(f.priority);
    for (int r = 0; r < g_work_rounds; r++) {
        h = fnv1a(f.host, h);
        h = fnv1a(f.app, h);
        h = fnv1a(f.text, h);
        h ^= h >> 29;
    }
    return h;
}

// Extracts "key=value" tokens and the words of the message text into a normalized record.
__attribute__((noinline)) size_t format_record(const SyslogFields& f, uint64_t fingerprint,
                                               char* out, size_t cap) {
    SAMPLE_FRAME();
    int n = std::snprintf(out, cap,
                          "{\"pri\":%d,\"facility\":%d,\"severity\":%d,\"ts\":\"%.*s\",\"host\":"
                          "\"%.*s\",\"app\":\"%.*s\",\"pid\":%.*s,\"fp\":\"%016llx\",\"len\":%zu}",
                          f.priority, f.priority / 8, f.priority % 8,
                          static_cast<int>(f.timestamp.size()), f.timestamp.data(),
                          static_cast<int>(f.host.size()), f.host.data(),
                          static_cast<int>(f.app.size()), f.app.data(),
                          static_cast<int>(f.pid.size()), f.pid.data(),
                          static_cast<unsigned long long>(fingerprint), f.text.size());
    return n > 0 ? static_cast<size_t>(n) : 0;
}

__attribute__((noinline)) uint64_t process_message(const Message& line) {
    SAMPLE_FRAME();
    SyslogFields f;
    if (!parse_syslog(line, f)) return 0;
    uint64_t fp = hash_fields(f);
    char record[512];
    size_t n = format_record(f, fp, record, sizeof record);
    return fnv1a(std::string_view(record, n), fp);
}

// Forwards a batch of processed records to the downstream collector and waits for its
// acknowledgement: a sleep standing for the network round trip. Off-CPU, outside any lock,
// identical in both variants.
__attribute__((noinline)) void deliver_message() {
    SAMPLE_FRAME();
    if (g_deliver_ns <= 0) return;
    timespec ts{static_cast<time_t>(g_deliver_ns / 1000000000),
                static_cast<long>(g_deliver_ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

// The statistics a consumer records for each message it takes (under the queue mutex in the
// mutex variant, per thread in the lock-free one): per-host and per-severity counts and a ring of
// recent fingerprints that counts repeated messages.
struct QueueStats {
    uint64_t per_host[100] = {};
    uint64_t per_severity[8] = {};
    uint64_t recent[256] = {};
    uint64_t bytes = 0, repeats = 0, next = 0;

    __attribute__((noinline)) void record(const Message& m) {
        SAMPLE_FRAME();
        std::string_view line = m.view();
        size_t gt = line.find('>');
        int pri = gt != std::string_view::npos && gt > 1 ? std::atoi(m.text + 1) : 0;
        per_severity[pri & 7]++;
        bytes += line.size();
        size_t host_at = gt + 22;  // "<PRI>Mmm dd hh:mm:ss host-NN"
        if (host_at + 2 <= line.size())
            per_host[(line[host_at] - '0') * 10 % 100 + (line[host_at + 1] - '0') % 10]++;
        uint64_t fp = 0xcbf29ce484222325ULL;
        for (int r = 0; r < g_stats_rounds; r++) fp = fnv1a(line, fp);
        for (uint64_t seen : recent) repeats += seen == fp;
        recent[next++ % 256] = fp;
    }
};

// ---------------------------------------------------------------- the producer's input

// Received packets: a ring of syslog lines generated once at start, handed out as copies, so the
// producer is cheap and the consumers' processing is the bottleneck.
class PacketSource {
public:
    PacketSource() {
        static const char* const kApps[] = {"sshd", "kernel", "nginx", "postfix", "cron", "sudo"};
        static const char* const kTexts[] = {
            "Failed password for user%u from 10.0.%u.%u port %u ssh2",
            "conn=%u src=10.1.%u.%u dst=192.168.0.1 dport=%u proto=TCP action=ACCEPT",
            "GET /api/v1/items/%u?page=%u&size=%u HTTP/1.1 status=200 bytes=%u",
            "queue %u: message accepted for delivery to <user%u@example.org> size=%u nrcpt=%u",
        };
        for (uint32_t i = 0; i < kRing; i++) {
            uint32_t x = i * 2654435761u;
            char text[160];
            std::snprintf(text, sizeof text, kTexts[i % 4], x % 997, (x >> 8) & 255,
                          (x >> 16) & 255, 1024 + x % 60000);
            char line[320];
            int n = std::snprintf(line, sizeof line,
                                  "<%u>Oct %2u %02u:%02u:%02u host-%02u %s[%u]: %s", (x >> 3) % 192,
                                  1 + i / 86400 % 28, i / 3600 % 24, i / 60 % 60, i % 60, x % 64,
                                  kApps[(x >> 5) % 6], 1000 + x % 30000, text);
            Message& m = ring_.emplace_back();
            m.len = static_cast<uint32_t>(std::min<size_t>(n > 0 ? static_cast<size_t>(n) : 0,
                                                           sizeof m.text));
            std::memcpy(m.text, line, m.len);
        }
    }

    __attribute__((noinline)) const Message& next_packet() { return ring_[seq_++ % kRing]; }

private:
    static constexpr uint32_t kRing = 4096;
    std::vector<Message> ring_;
    uint64_t seq_ = 0;
};

// ---------------------------------------------------------------- variant 1: mutex + list

class MutexQueue {
public:
    // Set once before any thread starts.
    void set_capacity(size_t capacity) { capacity_ = capacity; }

    __attribute__((noinline)) void push_batch(std::vector<Message>& batch) {
        SAMPLE_FRAME();
        if (size_.load() + batch.size() > capacity_) {  // full: wait until half empty
            std::unique_lock<std::mutex> signal(signal_mutex_);
            not_full_.wait(signal, [&] {
                return size_.load() <= capacity_ / 2 || sample::g_stop.load();
            });
        }
        {
            std::lock_guard<std::mutex> lock(queue_mutex_);
            for (auto& m : batch) items_.push_back(std::move(m));
            size_ += batch.size();
        }
        batch.clear();
        { std::lock_guard<std::mutex> signal(signal_mutex_); }
        not_empty_.notify_all();
    }

    // Takes up to `max` messages (at least one); 0 when none arrived within 100 ms (or the run is
    // stopping).
    __attribute__((noinline)) size_t pop(Message* out, size_t max, int64_t& lock_wait_ns,
                                         int64_t& idle_wait_ns) {
        SAMPLE_FRAME();
        if (size_.load() == 0) {
            int64_t t0 = sample::now_ns();
            std::unique_lock<std::mutex> signal(signal_mutex_);
            not_empty_.wait_for(signal, std::chrono::milliseconds(100),
                                [&] { return size_.load() > 0 || sample::g_stop.load(); });
            idle_wait_ns += sample::now_ns() - t0;
        }
        bool half_empty = false;
        size_t n = 0;
        {
            if (!queue_mutex_.try_lock()) {
                int64_t t0 = sample::now_ns();
                queue_mutex_.lock();
                lock_wait_ns += sample::now_ns() - t0;
            }
            std::lock_guard<std::mutex> lock(queue_mutex_, std::adopt_lock);
            for (; n < max && !items_.empty(); n++) {
                out[n] = items_.front();  // copied under the lock, as the original module did
                items_.pop_front();
                size_t left = --size_;
                stats_.record(out[n]);
                half_empty = half_empty || left == capacity_ / 2;
            }
        }
        if (half_empty) {
            { std::lock_guard<std::mutex> signal(signal_mutex_); }
            not_full_.notify_one();
        }
        return n;
    }

    void wake_all() {
        { std::lock_guard<std::mutex> signal(signal_mutex_); }
        not_empty_.notify_all();
        not_full_.notify_all();
    }

private:
    std::list<Message> items_;
    size_t capacity_ = 4096;
    std::atomic<size_t> size_{0};
    std::mutex queue_mutex_;   // guards items_ and stats_
    std::mutex signal_mutex_;  // paired with both condition variables
    std::condition_variable not_empty_, not_full_;
    QueueStats stats_;
};

// ---------------------------------------------------------------- variant 2: lock-free

using LockFreeQueue = moodycamel::BlockingConcurrentQueue<Message>;

// Called when try_enqueue found the queue full. Like the mutex variant's producer, it waits until
// the queue is half empty, but by sleeping with a doubling back-off (100 us .. 10 ms) and polling
// size_approx(), then retries with a short spin.
__attribute__((noinline)) void wait_enqueue(LockFreeQueue& q, moodycamel::ProducerToken& t,
                                            Message& item, size_t capacity) {
    SAMPLE_FRAME();
    int64_t sleep_ns = 100000;
    for (;;) {
        while (q.size_approx() > capacity / 2 && !sample::g_stop.load()) {
            std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
            sleep_ns = std::min<int64_t>(sleep_ns * 2, 10000000);
        }
        for (int i = 0; i < 64; i++) {
            if (q.try_enqueue(t, std::move(item)) || sample::g_stop.load()) return;
            _mm_pause();
        }
    }
}

// ---------------------------------------------------------------- threads

// A global object, so the queue mutex's address resolves to the symbol g_mutex_queue.
MutexQueue g_mutex_queue;
LockFreeQueue* g_lockfree_queue;

struct ConsumerTotals {
    uint64_t messages = 0, checksum = 0;
    int64_t lock_wait_ns = 0, idle_wait_ns = 0;
    // copies of messages and lock_wait_ns, published after each take for the progress lines
    std::atomic<uint64_t> messages_seen{0};
    std::atomic<int64_t> lock_wait_seen{0};

    void merge(const ConsumerTotals& t) {
        messages += t.messages;
        checksum ^= t.checksum;
        lock_wait_ns += t.lock_wait_ns;
        idle_wait_ns += t.idle_wait_ns;
    }
};

__attribute__((noinline)) void producer_loop(bool lockfree) {
    SAMPLE_FRAME();
    sample::name_thread("producer");
    PacketSource source;
    if (lockfree) {
        moodycamel::ProducerToken token(*g_lockfree_queue);
        while (!sample::g_stop.load()) {
            Message packet = source.next_packet();
            if (!g_lockfree_queue->try_enqueue(token, std::move(packet)))
                wait_enqueue(*g_lockfree_queue, token, packet, g_capacity);
        }
        return;
    }
    std::vector<Message> batch;
    while (!sample::g_stop.load()) {
        batch.push_back(source.next_packet());
        if (batch.size() == kBatch) g_mutex_queue.push_batch(batch);
    }
}

__attribute__((noinline)) void consumer_loop(int index, bool lockfree, ConsumerTotals& totals) {
    SAMPLE_FRAME();
    sample::name_thread("consumer-" + std::to_string(index));
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);  // 1 us: delivery waits last what they say
    uint64_t undelivered = 0;
    Message message;
    if (lockfree) {
        moodycamel::ConsumerToken token(*g_lockfree_queue);
        QueueStats stats;  // per thread: nothing shared on the message path
        while (!sample::g_stop.load()) {
            if (!g_lockfree_queue->try_dequeue(token, message)) {  // empty: wait, and time it
                int64_t t0 = sample::now_ns();
                bool got = g_lockfree_queue->wait_dequeue_timed(token, message, 100000);
                totals.idle_wait_ns += sample::now_ns() - t0;
                if (!got) continue;
            }
            stats.record(message);
            uint64_t fp = process_message(message);
            totals.checksum += fp;
            totals.messages++;
            if (++undelivered == g_deliver_batch) {
                deliver_message();
                undelivered = 0;
            }
        }
    } else {
        std::vector<Message> taken(g_take);
        while (!sample::g_stop.load()) {
            size_t n = g_mutex_queue.pop(taken.data(), g_take, totals.lock_wait_ns,
                                         totals.idle_wait_ns);
            totals.lock_wait_seen.store(totals.lock_wait_ns, std::memory_order_relaxed);
            totals.messages_seen.store(totals.messages + n, std::memory_order_relaxed);
            for (size_t i = 0; i < n; i++) {
                uint64_t fp = process_message(taken[i]);
                totals.checksum += fp;
                totals.messages++;
                if (++undelivered == g_deliver_batch) {
                    deliver_message();
                    undelivered = 0;
                }
            }
        }
    }
}

int main(int argc, char** argv) {
    sample::Options opt(argc, argv, "queue", kUsage);
    std::string variant = opt.choice("queue", {"mutex", "lockfree"});
    double duration = opt.number("duration", 10, 0.1, 86400);
    int consumers = static_cast<int>(opt.number("threads", 8, 1, 64));
    size_t capacity = static_cast<size_t>(opt.number("capacity", 4096, 2 * kBatch, 1 << 20));
    g_capacity = capacity;
    g_work_rounds = static_cast<int>(opt.number("work", 120, 0, 100000));
    g_stats_rounds = static_cast<int>(opt.number("bookkeeping", 140, 0, 100000));
    g_take = static_cast<size_t>(opt.number("take", 8, 1, 1024));
    g_deliver_batch = static_cast<uint64_t>(opt.number("deliver-batch", 16, 1, 1 << 20));
    g_deliver_ns = static_cast<int64_t>(opt.number("deliver-us", 480, 0, 1000000) * 1000);
    double progress_ms = opt.number("progress-ms", 250, 0, 60000);
    opt.done();
    bool lockfree = variant == "lockfree";

    g_mutex_queue.set_capacity(capacity);
    LockFreeQueue lockfree_queue(capacity, 1, 0);
    g_lockfree_queue = &lockfree_queue;

    sample::block_stop_signals();
    sample::Workers<ConsumerTotals> workers(consumers);
    workers.start(consumer_loop, lockfree);
    std::thread producer(producer_loop, lockfree);

    sample::wait_until_stop(duration, progress_ms / 1000, [&] {
        uint64_t messages = 0;
        int64_t lock_wait = 0;
        for (const auto& t : workers.totals) {
            messages += t.messages_seen.load(std::memory_order_relaxed);
            lock_wait += t.lock_wait_seen.load(std::memory_order_relaxed);
        }
        std::printf("{\"t_ns\":%lld,\"work\":%llu,\"consumer_lock_wait_ns\":%lld,"
                    "\"consumers\":%d}\n", static_cast<long long>(sample::now_ns()),
                    static_cast<unsigned long long>(messages), static_cast<long long>(lock_wait),
                    consumers);
        std::fflush(stdout);
    });
    g_mutex_queue.wake_all();
    producer.join();
    double seconds = workers.join();

    const ConsumerTotals& sum = workers.sum();
    double consumer_wall_ns = seconds * 1e9 * consumers;
    sample::Result("queue", variant, seconds, sum.messages, "messages")
        .add("consumers", consumers)
        .add("deliver_batch", static_cast<int64_t>(g_deliver_batch))
        .add("deliver_us", static_cast<int64_t>(g_deliver_ns / 1000))
        .add("consumer_mutex_wait_pct", std::round(sum.lock_wait_ns / consumer_wall_ns * 1000) / 10)
        .add("consumer_idle_wait_pct", std::round(sum.idle_wait_ns / consumer_wall_ns * 1000) / 10)
        .add("checksum", sum.checksum)
        .print();
    return 0;
}
