/* spin8: N CPU-bound threads (default 8) counting units of work, for overhead benchmarks.
 * Runs for --duration seconds, then prints one JSON line:
 *   {"threads":8,"seconds":S,"work":N}
 * where work is the total number of work units all threads completed.  With --report-ms N it
 * also prints, every N ms, the running total with a CLOCK_REALTIME timestamp, so a benchmark
 * can measure throughput over exactly the window a profiler was attached:
 *   {"t_ns":T,"work":N}
 * With --heartbeat-hz N one more thread wakes N times a second on an absolute timer
 * (SCHED_FIFO 10 when allowed), as a real-time heartbeat does: it preempts a worker at every
 * wake-up, so the process switches context about 3N times a second.
 * Usage: spin8 [--threads N] [--duration S] [--report-ms N] [--heartbeat-hz N] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/c_options.h"

struct counter { _Alignas(64) uint64_t work; };

static atomic_int stop_flag;
static struct counter *counters;

static long long realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static uint64_t unit_of_work(uint64_t x) {
    /* A leaf that never touches the stack keeps no frame under GCC 12, whatever
     * -mno-omit-leaf-frame-pointer says, and a frame-pointer unwind from a sample in it then
     * skips its caller (worker). One stack slot makes GCC push the frame pointer. */
    volatile char frame = 0;
    (void)frame;
    for (int i = 0; i < 1000; i++) {
        x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    }
    return x;
}

static void *worker(void *arg) {
    struct counter *c = arg;
    uint64_t x = (uint64_t)(uintptr_t)arg;
    char name[16];
    snprintf(name, sizeof name, "spin-%d", (int)(c - counters));
    pthread_setname_np(pthread_self(), name);
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        x = unit_of_work(x);
        c->work++;
    }
    return (void *)(uintptr_t)(x & 1);
}

static int heartbeat_hz;

static void *heartbeat(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "heartbeat");
    struct sched_param sp = {.sched_priority = 10};
    pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp); /* refused without privilege */
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    long step = 1000000000L / heartbeat_hz;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        next.tv_nsec += step;
        while (next.tv_nsec >= 1000000000L) { next.tv_nsec -= 1000000000L; next.tv_sec++; }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 8;
    double duration = 5;
    int report_ms = 0;
    const struct sample_option options[] = {
        {"--threads", &threads, NULL},     {"--duration", NULL, &duration},
        {"--report-ms", &report_ms, NULL}, {"--heartbeat-hz", &heartbeat_hz, NULL},
        {NULL, NULL, NULL}};
    if (sample_parse_options(argc, argv, "spin8", options)) return 2;
    if (threads < 1 || threads > 256) { fprintf(stderr, "spin8: --threads 1..256\n"); return 2; }
    counters = calloc((size_t)threads, sizeof *counters);
    pthread_t *ts = calloc((size_t)threads, sizeof *ts);
    double start = now_s();
    for (int i = 0; i < threads; i++) pthread_create(&ts[i], NULL, worker, &counters[i]);
    pthread_t hb;
    if (heartbeat_hz > 0) pthread_create(&hb, NULL, heartbeat, NULL);
    struct timespec tick = {0, 10 * 1000 * 1000};
    double next_report = start + report_ms / 1000.0;
    while (now_s() - start < duration) {
        nanosleep(&tick, NULL);
        if (report_ms > 0 && now_s() >= next_report) {
            uint64_t sum = 0;
            for (int i = 0; i < threads; i++) sum += counters[i].work;
            printf("{\"t_ns\":%lld,\"work\":%llu}\n", realtime_ns(), (unsigned long long)sum);
            fflush(stdout);
            next_report += report_ms / 1000.0;
        }
    }
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < threads; i++) pthread_join(ts[i], NULL);
    if (heartbeat_hz > 0) pthread_join(hb, NULL);
    double elapsed = now_s() - start;
    uint64_t total = 0;
    for (int i = 0; i < threads; i++) total += counters[i].work;
    printf("{\"threads\":%d,\"seconds\":%.6f,\"work\":%llu}\n", threads, elapsed,
           (unsigned long long)total);
    free(ts);
    free(counters);
    return 0;
}
