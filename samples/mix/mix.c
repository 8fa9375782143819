/* mix: threads that spin, wait on a mutex, sleep and wait on a condition variable in known
 * proportions, and measure their own time in each phase (CLOCK_MONOTONIC around each phase).
 * At exit (end of --duration, SIGINT or SIGTERM) each worker prints one JSON line:
 *   {"tid":N,"name":"mix-1","wall_ns":N,"on_ns":N,"mutex_ns":N,"sleep_ns":N,"condvar_ns":N}
 * The mutex is the global `shared_lock`; whoever holds it runs critical_section().
 * Usage: mix [--threads N] [--duration S] [--spin-ms N] [--hold-ms N] [--sleep-ms N]
 *            [--extra-ms N]  (N ms more on-CPU per cycle in extra_work(): a known regression) */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "../common/c_options.h"

pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t tick_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tick_cond = PTHREAD_COND_INITIALIZER;
static unsigned long tick_count;
static atomic_int stop_flag;
static int spin_ms = 6, hold_ms = 2, sleep_ms = 4, tick_ms = 10, extra_ms = 0;
static volatile uint64_t sink;

struct worker {
    pthread_t thread;
    int index;
    pid_t tid;
    int64_t wall_ns, on_ns, mutex_ns, sleep_ns, condvar_ns;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) static uint64_t mix_hash(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
    return x;
}

/* On-CPU for about `ms` milliseconds of wall time. */
__attribute__((noinline)) void spin_work(int ms) {
    int64_t end = now_ns() + (int64_t)ms * 1000000;
    uint64_t acc = 0;
    while (now_ns() < end)
        for (int i = 0; i < 2000; i++) acc = mix_hash(acc + i);
    sink += acc;
}

__attribute__((noinline)) void critical_section(int ms) { spin_work(ms); }

/* The regression knob.  The hashing is written out here rather than calling mix_hash(): a
 * leaf without a frame pointer hides its caller from frame-pointer unwinding, and this time
 * must be seen as extra_work's own. */
__attribute__((noinline)) void extra_work(int ms) {
    int64_t end = now_ns() + (int64_t)ms * 1000000;
    uint64_t acc = 1;
    while (now_ns() < end) {
        for (int i = 0; i < 2000; i++) {
            uint64_t x = acc ^ (uint64_t)i;
            x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33;
            acc = x;
        }
    }
    sink += acc;
}

__attribute__((noinline)) void nap(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) void wait_for_tick(void) {
    pthread_mutex_lock(&tick_lock);
    unsigned long seen = tick_count;
    while (tick_count == seen && !atomic_load(&stop_flag))
        pthread_cond_wait(&tick_cond, &tick_lock);
    pthread_mutex_unlock(&tick_lock);
}

static void *ticker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "mix-ticker");
    while (!atomic_load(&stop_flag)) {
        nap(tick_ms);
        pthread_mutex_lock(&tick_lock);
        tick_count++;
        pthread_cond_broadcast(&tick_cond);
        pthread_mutex_unlock(&tick_lock);
    }
    pthread_mutex_lock(&tick_lock);
    pthread_cond_broadcast(&tick_cond);
    pthread_mutex_unlock(&tick_lock);
    return NULL;
}

__attribute__((noinline)) void worker_loop(struct worker *w) {
    int64_t start = now_ns();
    while (!atomic_load(&stop_flag)) {
        int64_t t0 = now_ns();
        spin_work(spin_ms);
        if (extra_ms > 0) extra_work(extra_ms);
        int64_t t1 = now_ns();
        pthread_mutex_lock(&shared_lock);
        int64_t t2 = now_ns();
        critical_section(hold_ms);
        pthread_mutex_unlock(&shared_lock);
        int64_t t3 = now_ns();
        nap(sleep_ms);
        int64_t t4 = now_ns();
        wait_for_tick();
        int64_t t5 = now_ns();
        w->on_ns += (t1 - t0) + (t3 - t2);
        w->mutex_ns += t2 - t1;
        w->sleep_ns += t4 - t3;
        w->condvar_ns += t5 - t4;
    }
    w->wall_ns = now_ns() - start;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    char name[16];
    snprintf(name, sizeof name, "mix-%d", w->index);
    pthread_setname_np(pthread_self(), name);
    w->tid = (pid_t)syscall(SYS_gettid);
    worker_loop(w);
    return NULL;
}

/* Who ended the run: kept so that, with MIX_REPORT_SIGNAL set, mix can say so on stderr at
 * exit (a test then names the sender of a signal that should not have come). */
static volatile sig_atomic_t end_signal, end_sender, end_code;

static void on_signal(int sig, siginfo_t *info, void *context) {
    (void)context;
    if (!end_signal) {
        end_signal = sig;
        end_sender = info ? info->si_pid : 0;
        end_code = info ? info->si_code : 0;
    }
    atomic_store(&stop_flag, 1);
}

static void report_signal(void) {
    char comm[64] = "?", path[64];
    if (!end_signal || !getenv("MIX_REPORT_SIGNAL")) return;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)end_sender);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
        fclose(f);
    }
    fprintf(stderr, "mix: ended by signal %d from pid %d (%s), si_code %d\n", (int)end_signal,
            (int)end_sender, comm, (int)end_code);
}

int main(int argc, char **argv) {
    int threads = 3;
    double duration = 10;
    const struct sample_option options[] = {
        {"--threads", &threads, NULL},   {"--duration", NULL, &duration},
        {"--spin-ms", &spin_ms, NULL},   {"--hold-ms", &hold_ms, NULL},
        {"--sleep-ms", &sleep_ms, NULL}, {"--extra-ms", &extra_ms, NULL},
        {NULL, NULL, NULL}};
    if (sample_parse_options(argc, argv, "mix", options)) return 2;
    if (threads < 1 || threads > 64) { fprintf(stderr, "mix: --threads 1..64\n"); return 2; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    struct worker *ws = calloc((size_t)threads, sizeof *ws);
    pthread_t tick;
    pthread_create(&tick, NULL, ticker, NULL);
    for (int i = 0; i < threads; i++) {
        ws[i].index = i + 1;
        pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]);
    }
    int64_t end = now_ns() + (int64_t)(duration * 1e9);
    while (!atomic_load(&stop_flag) && now_ns() < end) nap(20);
    atomic_store(&stop_flag, 1);
    for (int i = 0; i < threads; i++) pthread_join(ws[i].thread, NULL);
    pthread_join(tick, NULL);
    for (int i = 0; i < threads; i++)
        printf("{\"tid\":%d,\"name\":\"mix-%d\",\"wall_ns\":%lld,\"on_ns\":%lld,\"mutex_ns\":%lld,"
               "\"sleep_ns\":%lld,\"condvar_ns\":%lld}\n",
               ws[i].tid, ws[i].index, (long long)ws[i].wall_ns, (long long)ws[i].on_ns,
               (long long)ws[i].mutex_ns, (long long)ws[i].sleep_ns, (long long)ws[i].condvar_ns);
    free(ws);
    report_signal();
    return 0;
}
