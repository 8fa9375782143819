// prefork: a pre-fork server in miniature, to profile several processes as one target.
//
// The master forks --workers workers, each of which spins in worker_loop -> spin_work (on-CPU)
// and naps in worker_nap (nanosleep, off-CPU) in turn, and one idle helper blocked in
// helper_wait (read on a pipe that never gets data) for the whole run.  After --late seconds
// it forks one more worker (a process born during a collect's window); with --late-on-usr1, when
// the master receives SIGUSR1 instead.  Every process writes
// its title over its argv, as PostgreSQL does, so ps shows "prefork: worker 1",
// "prefork: idle helper", "prefork: late worker" (with --hostile, worker 1's title carries
// markup and an escape sequence: a name is the target's text).  --threads N gives the master
// N-1 extra threads spinning in master_thread.
//
// Usage: prefork [--workers N] [--duration S] [--late S | --late-on-usr1] [--threads N]
//                [--hostile]
// At exit the master prints one JSON line: the pids and each process's role.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SAMPLE_FRAME() __asm__ volatile("" ::"r"(__builtin_frame_address(0)))

static char *title_area;
static size_t title_len;
static volatile sig_atomic_t stop;

static volatile sig_atomic_t late_asked;

static void on_term(int sig) { (void)sig; stop = 1; }
static void on_usr1(int sig) { (void)sig; late_asked = 1; }

// Without SA_RESTART: the idle helper's read returns (EINTR) when it is told to stop.
static void on_signal(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(sig, &sa, NULL);
}

// The argv strings are contiguous: a title written over them is what /proc/PID/cmdline (and
// ps) shows.
static void set_title(const char *title) {
    size_t n = strlen(title);
    if (n >= title_len) n = title_len - 1;
    memset(title_area, 0, title_len);
    memcpy(title_area, title, n);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) static unsigned long spin_work(unsigned long x) {
    SAMPLE_FRAME();
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

__attribute__((noinline)) static void worker_nap(void) {
    SAMPLE_FRAME();
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) static void worker_loop(double until) {
    SAMPLE_FRAME();
    unsigned long x = 1;
    while (!stop && now() < until) {
        for (int i = 0; i < 4; i++) x = spin_work(x);
        worker_nap();
    }
    if (x == 42) puts("");
}

__attribute__((noinline)) static void helper_wait(int fd) {
    SAMPLE_FRAME();
    char c;
    while (!stop && read(fd, &c, 1) > 0) {
    }
}

__attribute__((noinline)) static void *master_thread(void *arg) {
    SAMPLE_FRAME();
    worker_loop(*(double *)arg);
    return NULL;
}

static pid_t fork_child(const char *title, double until, int idle_fd) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    on_signal(SIGTERM);
    set_title(title);
    if (idle_fd >= 0)
        helper_wait(idle_fd);
    else
        worker_loop(until);
    _exit(0);
}

int main(int argc, char **argv) {
    int workers = 2, threads = 1, hostile = 0, late_on_usr1 = 0;
    double duration = 10, late = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--workers") && i + 1 < argc) workers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--duration") && i + 1 < argc) duration = atof(argv[++i]);
        else if (!strcmp(argv[i], "--late") && i + 1 < argc) late = atof(argv[++i]);
        else if (!strcmp(argv[i], "--late-on-usr1")) late_on_usr1 = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hostile")) hostile = 1;
        else {
            fprintf(stderr, "usage: prefork [--workers N] [--duration S] "
                            "[--late S | --late-on-usr1] [--threads N] [--hostile]\n");
            return 2;
        }
    }
    title_area = argv[0];
    title_len = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]) + 1;
    on_signal(SIGTERM);
    on_signal(SIGINT);
    double until = now() + duration;
    int pipefd[2];
    if (pipe(pipefd) != 0) return 1;
    pid_t pids[64];
    char titles[64][80];
    int n = 0;
    for (int i = 0; i < workers && n < 62; i++, n++) {
        if (hostile && i == 0)
            snprintf(titles[n], sizeof titles[n], "prefork: <img src=x onerror=alert(1)>\x1b[2J");
        else
            snprintf(titles[n], sizeof titles[n], "prefork: worker %d", i + 1);
        pids[n] = fork_child(titles[n], until, -1);
    }
    snprintf(titles[n], sizeof titles[n], "prefork: idle helper");
    pids[n] = fork_child(titles[n], until, pipefd[0]);
    n++;
    set_title("prefork: master");
    if (late_on_usr1) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGUSR1, &sa, NULL);
    }
    pthread_t extra[16];
    int nt = threads - 1 > 16 ? 16 : threads - 1;
    for (int i = 0; i < nt; i++) pthread_create(&extra[i], NULL, master_thread, &until);
    double t0 = now();
    int late_done = late < 0 && !late_on_usr1;
    while (!stop && now() < until) {
        if (!late_done && (late_on_usr1 ? late_asked : now() - t0 >= late)) {
            snprintf(titles[n], sizeof titles[n], "prefork: late worker");
            pids[n] = fork_child(titles[n], until, -1);
            n++;
            late_done = 1;
        }
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    stop = 1;
    for (int i = 0; i < n; i++) kill(pids[i], SIGTERM);
    close(pipefd[1]);
    for (int i = 0; i < n; i++) waitpid(pids[i], NULL, 0);
    for (int i = 0; i < nt; i++) pthread_join(extra[i], NULL);
    printf("{\"sample\": \"prefork\", \"master\": %d, \"processes\": [", (int)getpid());
    for (int i = 0; i < n; i++)
        printf("%s{\"pid\": %d, \"title\": \"%s\"}", i ? ", " : "", (int)pids[i],
               hostile && i == 0 ? "hostile" : titles[i]);
    printf("]}\n");
    return 0;
}
