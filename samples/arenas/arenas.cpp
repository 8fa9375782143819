// arenas: glibc malloc arenas that look like a leak. Worker threads repeatedly allocate large
// blocks (4 MB each by default; M_MMAP_THRESHOLD is raised so they come from the threads' own
// malloc arenas, not from mmap), write them, and free them again. Each block comes with a small
// long-lived "session record" allocated right after it, which keeps the top of the arena in use,
// so glibc cannot shrink the arena heap when the blocks are freed: after everything large is
// freed, resident memory stays high. `--trim` calls malloc_trim(0) at the end, which hands the
// free pages inside the arenas back to the kernel.
//
// Phases: --duration seconds of allocate/write/free rounds; then one final round in which the
// main thread reads RSS (from /proc/self/statm) with all blocks allocated ("rss_peak_mb"), after
// all blocks are freed ("rss_after_free_mb") and, with --trim, after malloc_trim(0)
// ("rss_after_trim_mb"); then the process stays alive for --hold seconds so that a profiler can
// see the retained memory. Memory use is capped at threads * blocks * block-mb (768 MB by
// default; the options refuse more than 1400 MB).
//
// Usage: arenas [--trim] [--duration S] [--hold S] [--threads N] [--blocks N] [--block-mb N]
//               [--stats]
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../common/sample.h"

const char kUsage[] =
    "usage: arenas [--trim] [--duration SECONDS] [--hold SECONDS] [--threads N] [--blocks N]\n"
    "              [--block-mb N] [--stats]\n"
    "  --trim      call malloc_trim(0) after the final frees\n"
    "  --duration  seconds of allocate/free rounds before the final round (default 5)\n"
    "  --hold      seconds to stay alive after the final frees (default 5)\n"
    "  --threads   worker threads (default 8; each gets its own glibc arena)\n"
    "  --blocks    blocks per thread per round (default 24)\n"
    "  --block-mb  block size in MB (default 4); threads*blocks*block-mb <= 1400\n"
    "  --stats     print malloc_stats() (per-arena numbers) to stderr after the frees\n"
    "SIGINT/SIGTERM end the run early. Prints one JSON line with the RSS numbers at exit.\n";

size_t g_blocks = 24;
size_t g_block_bytes = 4u << 20;
pthread_barrier_t g_final_allocated, g_final_measured, g_final_freed;

double rss_mb() {
    long pages_total = 0, pages_resident = 0;
    FILE* f = std::fopen("/proc/self/statm", "r");
    if (f) {
        if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
        std::fclose(f);
    }
    return std::round(static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
                      (1 << 20) * 10) / 10;
}

struct Round {
    std::vector<char*> blocks;
    std::vector<char*> records;  // small, long-lived: outlive the blocks by one round
};

__attribute__((noinline)) void write_block(char* block, size_t size, size_t seed) {
    SAMPLE_FRAME();
    std::memset(block, static_cast<int>('a' + seed % 26), size);
    for (size_t off = 0; off < size; off += 4096) block[off] = static_cast<char>(seed + off);
}

__attribute__((noinline)) void allocate_blocks(Round& r, size_t seed) {
    SAMPLE_FRAME();
    for (size_t i = 0; i < g_blocks; i++) {
        char* block = static_cast<char*>(std::malloc(g_block_bytes));
        char* record = static_cast<char*>(std::malloc(96));
        if (!block || !record) {
            std::fprintf(stderr, "arenas: out of memory\n");
            std::exit(1);
        }
        std::snprintf(record, 96, "session %zu/%zu", seed, i);
        write_block(block, g_block_bytes, seed + i);
        r.blocks.push_back(block);
        r.records.push_back(record);
    }
}

__attribute__((noinline)) void free_blocks(Round& r) {
    SAMPLE_FRAME();
    for (char* b : r.blocks) std::free(b);
    r.blocks.clear();
}

__attribute__((noinline)) void free_records(std::vector<char*>& records) {
    SAMPLE_FRAME();
    for (char* p : records) std::free(p);
    records.clear();
}

struct WorkerTotals {
    uint64_t blocks = 0;
    std::vector<char*> kept_records;  // the final round's records, freed at exit
};

__attribute__((noinline)) void arena_worker(int index, WorkerTotals& totals) {
    SAMPLE_FRAME();
    sample::name_thread("worker-" + std::to_string(index));
    std::vector<char*> previous_records;
    size_t seed = static_cast<size_t>(index) * 1000;
    while (!sample::g_stop.load()) {
        Round r;
        allocate_blocks(r, seed++);
        free_blocks(r);
        free_records(previous_records);
        previous_records = std::move(r.records);
        totals.blocks += g_blocks;
    }
    // The final round, in step with the main thread's measurements.
    Round r;
    allocate_blocks(r, seed);
    totals.blocks += g_blocks;
    pthread_barrier_wait(&g_final_allocated);
    pthread_barrier_wait(&g_final_measured);
    free_blocks(r);
    free_records(previous_records);
    totals.kept_records = std::move(r.records);
    pthread_barrier_wait(&g_final_freed);
}

int main(int argc, char** argv) {
    sample::Options opt(argc, argv, "arenas", kUsage);
    bool trim = opt.flag("trim");
    bool stats = opt.flag("stats");
    double duration = opt.number("duration", 5, 0, 86400);
    double hold = opt.number("hold", 5, 0, 86400);
    int threads = static_cast<int>(opt.number("threads", 8, 1, 64));
    g_blocks = static_cast<size_t>(opt.number("blocks", 24, 1, 4096));
    double block_mb = opt.number("block-mb", 4, 0.25, 32);
    opt.done();
    if (threads * static_cast<double>(g_blocks) * block_mb > 1400)
        opt.fail("threads * blocks * block-mb must stay <= 1400 (MB)");
    g_block_bytes = static_cast<size_t>(block_mb * (1 << 20));

    // Blocks below this come from the malloc arenas (not mmap); fixed, not glibc's dynamic one.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);

    unsigned n = static_cast<unsigned>(threads) + 1;
    pthread_barrier_init(&g_final_allocated, nullptr, n);
    pthread_barrier_init(&g_final_measured, nullptr, n);
    pthread_barrier_init(&g_final_freed, nullptr, n);

    sample::block_stop_signals();
    double start = sample::now_seconds();
    std::vector<WorkerTotals> totals(static_cast<size_t>(threads));
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; i++)
        workers.emplace_back(arena_worker, i + 1, std::ref(totals[static_cast<size_t>(i)]));
    bool signalled = sample::wait_until_stop(duration);

    pthread_barrier_wait(&g_final_allocated);
    double rss_peak = rss_mb();
    pthread_barrier_wait(&g_final_measured);
    pthread_barrier_wait(&g_final_freed);
    for (auto& t : workers) t.join();
    double seconds = sample::now_seconds() - start;
    double rss_after_free = rss_mb();
    struct mallinfo2 mi = mallinfo2();
    if (stats) malloc_stats();
    double rss_after_trim = -1;
    if (trim) {
        malloc_trim(0);
        rss_after_trim = rss_mb();
    }
    if (!signalled && hold > 0) {
        sample::g_stop = false;
        sample::wait_until_stop(hold);
    }

    uint64_t blocks = 0;
    for (auto& t : totals) {
        blocks += t.blocks;
        for (char* p : t.kept_records) std::free(p);
    }
    sample::Result r("arenas", trim ? "trim" : "notrim", seconds, blocks, "blocks");
    r.add("threads", threads)
        .add("block_mb", block_mb)
        .add("rss_peak_mb", rss_peak)
        .add("rss_after_free_mb", rss_after_free)
        .add("malloc_arena_mb", std::round(static_cast<double>(mi.arena) / (1 << 20) * 10) / 10)
        .add("malloc_free_mb", std::round(static_cast<double>(mi.fordblks) / (1 << 20) * 10) / 10);
    if (trim)
        r.add("rss_after_trim_mb", rss_after_trim);
    else
        r.raw("rss_after_trim_mb", "null");
    r.add("hold_seconds", hold).print();
    return 0;
}
