/* A stand-in for nvidia-cuda-mps-control, for the plugin's tests on
 * machines without GPUs. It behaves like the real control program where the
 * plugin depends on it, and records every run.
 *
 *   fake -d      daemonise (parent exits 0), write the pid file
 *                $CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid, listen
 *                on $CUDA_MPS_PIPE_DIRECTORY/control (a UNIX socket here)
 *   fake -f      the same in the foreground
 *   fake         client: send each stdin line to the daemon and print the
 *                replies; "Cannot find MPS control daemon process" and exit 1
 *                when none listens
 *
 * Commands: get_server_list (empty list), set_default_active_thread_percentage
 * N (echoes N), quit (the daemon removes its pipe files and exits).
 *
 * Records: when the folder mps-records/ exists next to the executable, each
 * run (and the daemon itself, and each command it serves) writes one file
 * there with argv, real/effective/saved uid and gid, groups, cwd, umask,
 * oom_score_adj, NoNewPrivs, open descriptors and the whole environment.
 * A file mps-delay-ms next to the executable makes the daemon wait that long
 * before it listens (to test that the plugin waits for the answer). The
 * daemon gives up after 300 s so a broken test cannot leave it behind. */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char exe_dir[PATH_MAX];
static char pipe_dir[PATH_MAX];
static int record_seq;

static void find_exe_dir(void)
{
    ssize_t n = readlink("/proc/self/exe", exe_dir, sizeof exe_dir - 1);
    if (n <= 0) {
        exe_dir[0] = '\0';
        return;
    }
    exe_dir[n] = '\0';
    char *slash = strrchr(exe_dir, '/');
    if (slash)
        *slash = '\0';
}

static void put_file(FILE *f, const char *key, const char *path)
{
    char buf[256];
    FILE *p = fopen(path, "r");
    if (!p)
        return;
    while (fgets(buf, sizeof buf, p)) {
        if (!strncmp(path, "/proc/self/status", 17) &&
            strncmp(buf, "NoNewPrivs:", 11) && strncmp(buf, "Uid:", 4) && strncmp(buf, "Gid:", 4))
            continue;
        buf[strcspn(buf, "\n")] = '\0';
        fprintf(f, "%s=%s\n", key, buf);
    }
    fclose(p);
}

/* One record file per event: mode is client, daemon, start, cmd:<command>. */
static void record(const char *mode, int argc, char **argv)
{
    char path[PATH_MAX + 64], cwd[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/mps-records", exe_dir);
    if (!exe_dir[0] || stat(path, &st) != 0)
        return;
    snprintf(path, sizeof path, "%s/mps-records/rec.%d.%d.%ld", exe_dir, (int)getpid(),
             record_seq++, (long)time(NULL));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    FILE *f = fdopen(fd, "w");
    mode_t um = umask(0);
    umask(um);
    fprintf(f, "mode=%s\npid=%d\nppid=%d\nsid=%d\n", mode, (int)getpid(), (int)getppid(),
            (int)getsid(0));
    for (int i = 0; i < argc; i++)
        fprintf(f, "argv%d=%s\n", i, argv[i]);
    uid_t r, e, s;
    gid_t rg, eg, sg, groups[256];
    getresuid(&r, &e, &s);
    getresgid(&rg, &eg, &sg);
    fprintf(f, "uid=%u\neuid=%u\nsuid=%u\ngid=%u\negid=%u\nsgid=%u\n", r, e, s, rg, eg, sg);
    int ng = getgroups(256, groups);
    fprintf(f, "groups=");
    for (int i = 0; i < ng; i++)
        fprintf(f, "%s%u", i ? "," : "", groups[i]);
    fprintf(f, "\ncwd=%s\numask=%03o\n", getcwd(cwd, sizeof cwd) ? cwd : "?", (unsigned)um);
    put_file(f, "oom_score_adj", "/proc/self/oom_score_adj");
    put_file(f, "status", "/proc/self/status");
    fprintf(f, "pipe_dir=%s\n", pipe_dir);
    fprintf(f, "fds=");
    DIR *d = opendir("/proc/self/fd");
    int dfd = d ? dirfd(d) : -1, first = 1;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || atoi(de->d_name) == dfd || atoi(de->d_name) == fd)
            continue;
        fprintf(f, "%s%s", first ? "" : ",", de->d_name);
        first = 0;
    }
    if (d)
        closedir(d);
    fprintf(f, "\n");
    for (char **ev = environ; *ev; ev++)
        fprintf(f, "env=%s\n", *ev);
    fclose(f);
}

/* The real program uses FIFOs; a UNIX socket path is limited to 108 bytes. */
static int socket_path(struct sockaddr_un *a)
{
    size_t n = strlen(pipe_dir);
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    if (n + sizeof "/control" > sizeof a->sun_path) {
        fprintf(stderr, "fake-mps-control: pipe directory too long for a socket: %s\n", pipe_dir);
        return -1;
    }
    memcpy(a->sun_path, pipe_dir, n);
    memcpy(a->sun_path + n, "/control", sizeof "/control");
    return 0;
}

static void cleanup(void)
{
    char p[PATH_MAX + 40];
    snprintf(p, sizeof p, "%s/control", pipe_dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/nvidia-cuda-mps-control.pid", pipe_dir);
    unlink(p);
}

static void on_term(int sig)
{
    (void)sig;
    cleanup();
    _exit(0);
}

static int serve(int argc, char **argv)
{
    char p[PATH_MAX + 40];
    struct sockaddr_un a;
    long delay_ms = 0;
    snprintf(p, sizeof p, "%s/mps-delay-ms", exe_dir);
    FILE *df = fopen(p, "r");
    if (df) {
        if (fscanf(df, "%ld", &delay_ms) != 1)
            delay_ms = 0;
        fclose(df);
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    alarm(300);
    snprintf(p, sizeof p, "%s/nvidia-cuda-mps-control.pid", pipe_dir);
    FILE *pf = fopen(p, "w");
    if (!pf)
        return 1;
    fprintf(pf, "%d\n", (int)getpid());
    fclose(pf);
    record("daemon", argc, argv);
    if (delay_ms > 0) {
        struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);   /* simulates a slow GPU start-up */
    }
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (socket_path(&a) != 0) {
        cleanup();
        return 1;
    }
    unlink(a.sun_path);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 16) != 0) {
        cleanup();
        return 1;
    }
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        char line[256];
        ssize_t n = read(c, line, sizeof line - 1);
        if (n < 0)
            n = 0;
        line[n] = '\0';
        line[strcspn(line, "\r\n")] = '\0';
        char mode[300];
        snprintf(mode, sizeof mode, "cmd:%s", line);
        record(mode, argc, argv);
        if (!strcmp(line, "quit")) {
            cleanup();
            close(c);
            return 0;
        }
        if (!strncmp(line, "set_default_active_thread_percentage ", 37))
            dprintf(c, "%s\n", line + 37);
        else if (strcmp(line, "get_server_list") != 0)
            dprintf(c, "Unknown command: %s\n", line);
        close(c);
    }
    cleanup();
    return 1;
}

static int client(int argc, char **argv)
{
    char line[256];
    record("client", argc, argv);
    while (fgets(line, sizeof line, stdin)) {
        struct sockaddr_un a;
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0])
            continue;
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (socket_path(&a) != 0)
            return 1;
        if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
            fprintf(stderr, "Cannot find MPS control daemon process\n");
            return 1;
        }
        dprintf(s, "%s\n", line);
        shutdown(s, SHUT_WR);
        char buf[512];
        ssize_t n;
        while ((n = read(s, buf, sizeof buf)) > 0)
            fwrite(buf, 1, (size_t)n, stdout);
        close(s);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *pd = getenv("CUDA_MPS_PIPE_DIRECTORY");
    find_exe_dir();
    snprintf(pipe_dir, sizeof pipe_dir, "%s", pd && *pd ? pd : "/tmp/nvidia-mps");
    if (argc == 2 && !strcmp(argv[1], "-f")) {
        record("start", argc, argv);
        return serve(argc, argv);
    }
    if (argc == 2 && !strcmp(argv[1], "-d")) {
        record("start", argc, argv);
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid > 0)
            return 0;
        setsid();
        if (fork() != 0)
            _exit(0);
        int dn = open("/dev/null", O_RDWR);
        dup2(dn, 0);
        dup2(dn, 1);
        dup2(dn, 2);
        if (dn > 2)
            close(dn);
        _exit(serve(argc, argv));
    }
    if (argc == 1)
        return client(argc, argv);
    fprintf(stderr, "usage: nvidia-cuda-mps-control [-d | -f]\n");
    return 2;
}
