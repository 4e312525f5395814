/*
 * gpunode-sim-procdriver: gives every container on a simulated node the
 * driver's /proc/driver tree and the node's /proc/devices (with the majors the
 * driver registered), as the kernel shows both to every procfs on a real
 * server.
 *
 * On a simulated node the driver tree is a tmpfs over the node's /proc/driver
 * and /proc/devices a file bind-mounted over the kernel's (gpunode.sim.apply);
 * a container's fresh procfs shows neither.  runc refuses mounts inside /proc
 * from config.json, so this program works in two roles, both installed by
 * `gpunode sim apply`:
 *
 *  - as the node's runc and crun (the real binaries are diverted with dpkg to
 *    <path>.gpunode-real): on `create` and `run` it writes BUNDLE/.gpunode-sim/
 *    config.json, the engine's spec with itself as the FIRST prestart hook,
 *    and execs the real runtime with the same arguments and that bundle.  The
 *    engine's config.json stays byte for byte as the engine wrote it.  Every
 *    other call is exec'ed untouched.  Docker, containerd, podman and
 *    gpunode's own runtime all end up here.
 *
 *  - as that hook (`<itself> --gpunode-sim-hook ROOTFS`): runc
 *    and crun run prestart hooks in the runtime's namespaces after the
 *    container's mounts (its procfs included) are set up and before
 *    pivot_root, and before every createRuntime/createContainer hook.  The
 *    hook enters the container's mount namespace (pid from the state on
 *    stdin), where the node's /proc/driver and /proc/devices are still
 *    visible, and bind-mounts each read-only (nosuid, nodev, noexec) over the
 *    container's.  Nothing happens for the tree when the node has no
 *    /proc/driver/nvidia (no driver), for /proc/devices when the node's is the
 *    kernel's own, and for either when the container's is not its own procfs
 *    entry (a symlinked /proc in the image, something already mounted): the
 *    container then starts as it would have without the simulator.
 *
 * No heap allocations beyond the config buffer; no third-party code.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

#define HOOK_FLAG "--gpunode-sim-hook"
#define REAL_SUFFIX ".gpunode-real"
#define PROC_SUPER_MAGIC 0x9fa0
#define MAX_CONFIG (16 * 1024 * 1024)
#define PROG "gpunode-sim-procdriver"

/* ------------------------------------------------------------------ */
/* a minimal JSON scanner: enough to find members and insert text       */

static const char *ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static const char *skip_string(const char *p, const char *end)
{
    if (p >= end || *p != '"')
        return NULL;
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *end, int depth)
{
    p = ws(p, end);
    if (p >= end || depth > 64)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1, end);
        if (p < end && *p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                p = skip_string(ws(p, end), end);
                if (!p)
                    return NULL;
                p = ws(p, end);
                if (p >= end || *p != ':')
                    return NULL;
                p++;
            }
            p = skip_value(p, end, depth + 1);
            if (!p)
                return NULL;
            p = ws(p, end);
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            return p < end && *p == close ? p + 1 : NULL;
        }
    }
    while (p < end && (strchr("+-.eE", *p) || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z')))
        p++;
    return p;
}

/* In the object starting at obj ('{'), the value of member key, or NULL. */
static const char *member(const char *obj, const char *end, const char *key)
{
    size_t klen = strlen(key);
    const char *p = ws(obj, end);
    if (p >= end || *p != '{')
        return NULL;
    p = ws(p + 1, end);
    if (p < end && *p == '}')
        return NULL;
    for (;;) {
        const char *k = ws(p, end);
        const char *after = skip_string(k, end);
        if (!after)
            return NULL;
        p = ws(after, end);
        if (p >= end || *p != ':')
            return NULL;
        const char *val = ws(p + 1, end);
        if ((size_t)(after - k) == klen + 2 && memcmp(k + 1, key, klen) == 0)
            return val;
        p = skip_value(val, end, 1);
        if (!p)
            return NULL;
        p = ws(p, end);
        if (p >= end || *p != ',')
            return NULL;
        p++;
    }
}

/* A JSON string without escapes other than \" \\ \/ into out; -1 otherwise. */
static int plain_string(const char *p, const char *end, char *out, size_t cap)
{
    size_t n = 0;
    if (p >= end || *p != '"')
        return -1;
    for (p++; p < end && *p != '"'; p++) {
        char c = *p;
        if (c == '\\') {
            if (++p >= end || !strchr("\"\\/", *p))
                return -1;
            c = *p;
        }
        if ((unsigned char)c < 0x20 || n + 1 >= cap)
            return -1;
        out[n++] = c;
    }
    if (p >= end)
        return -1;
    out[n] = '\0';
    return 0;
}

/* JSON-escape s into out; -1 if it does not fit. */
static int escape(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20)
            return -1;
        if (*s == '"' || *s == '\\') {
            if (n + 1 >= cap)
                return -1;
            out[n++] = '\\';
        }
        if (n + 1 >= cap)
            return -1;
        out[n++] = *s;
    }
    out[n] = '\0';
    return 0;
}

/* ------------------------------------------------------------------ */
/* wrapper: add the hook to config.json, exec the real runtime          */

static char *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < MAX_CONFIG) {
        buf = malloc((size_t)st.st_size + 1);
        size_t got = 0;
        while (buf && got < (size_t)st.st_size) {
            ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        if (buf && got == (size_t)st.st_size) {
            buf[got] = '\0';
            *len = got;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    close(fd);
    return buf;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Write text[0:a] + ins_a + text[a:b] + ins_b + text[b:] to path atomically (temp
 * file + rename), with ins_a replacing text[a:a_end] (a <= a_end <= b). */
static int write_edited(const char *path, const char *text, size_t len, size_t a, size_t a_end,
                        const char *ins_a, size_t b, const char *ins_b)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    int bad = write_all(fd, text, a) || write_all(fd, ins_a, strlen(ins_a)) ||
              write_all(fd, text + a_end, b - a_end) || write_all(fd, ins_b, strlen(ins_b)) ||
              write_all(fd, text + b, len - b) || fsync(fd);
    bad |= close(fd);
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Write BUNDLE/.gpunode-sim/config.json: the engine's spec with the absolute rootfs and
 * this program as the first prestart hook.  The engine's own config.json is left as it
 * wrote it.  On success *shadow is that directory. */
static int add_hook(const char *bundle, const char *self, char *shadow, size_t shadow_cap)
{
    char config[PATH_MAX], out[PATH_MAX], rootfs[PATH_MAX], root_path[PATH_MAX];
    char esc_self[PATH_MAX * 2], esc_rootfs[PATH_MAX * 2], hook[PATH_MAX * 5];
    char root_value[PATH_MAX * 2 + 2];
    size_t len = 0;

    if (snprintf(config, sizeof(config), "%s/config.json", bundle) >= (int)sizeof(config) ||
        snprintf(shadow, shadow_cap, "%s/.gpunode-sim", bundle) >= (int)shadow_cap ||
        snprintf(out, sizeof(out), "%s/config.json", shadow) >= (int)sizeof(out))
        return -1;
    char *text = read_file(config, &len);
    if (!text)
        return -1;
    const char *end = text + len;
    const char *top = ws(text, end);
    const char *root = member(top, end, "root");
    const char *path = root ? member(root, end, "path") : NULL;
    const char *path_end = path ? skip_string(path, end) : NULL;
    int rc = -1;
    if (!path_end || plain_string(path, end, root_path, sizeof(root_path)) != 0 ||
        strstr(text, HOOK_FLAG))
        goto out;
    if (root_path[0] == '/')
        memcpy(rootfs, root_path, sizeof(rootfs));
    else if (snprintf(rootfs, sizeof(rootfs), "%s/%s", bundle, root_path) >= (int)sizeof(rootfs))
        goto out;
    if (escape(self, esc_self, sizeof(esc_self)) || escape(rootfs, esc_rootfs, sizeof(esc_rootfs)))
        goto out;
    snprintf(root_value, sizeof(root_value), "\"%s\"", esc_rootfs);
    snprintf(hook, sizeof(hook), "{\"path\":\"%s\",\"args\":[\"%s\",\"%s\",\"%s\"]}", esc_self, PROG,
             HOOK_FLAG, esc_rootfs);

    char insert[sizeof(hook) + 64];
    const char *at;
    const char *hooks = member(top, end, "hooks");
    if (hooks && *hooks == '{') {
        const char *pre = member(hooks, end, "prestart");
        if (pre && *pre == '[') {
            at = pre + 1;
            int empty = *ws(at, end) == ']';
            snprintf(insert, sizeof(insert), "%s%s", hook, empty ? "" : ",");
        } else {
            at = hooks + 1;
            int empty = *ws(at, end) == '}';
            snprintf(insert, sizeof(insert), "\"prestart\":[%s]%s", hook, empty ? "" : ",");
        }
    } else if (!hooks && top < end && *top == '{') {
        at = top + 1;
        int empty = *ws(at, end) == '}';
        snprintf(insert, sizeof(insert), "\"hooks\":{\"prestart\":[%s]}%s", hook, empty ? "" : ",");
    } else {
        goto out; /* "hooks": null or not JSON we understand: leave it to the runtime */
    }
    if (mkdir(shadow, 0700) != 0 && errno != EEXIST)
        goto out;
    /* the two edits in file order */
    size_t p0 = (size_t)(path - text), p1 = (size_t)(path_end - text), ins = (size_t)(at - text);
    if (ins <= p0) {
        /* text[:ins] insert text[ins:p0] root_value text[p1:] */
        char *copy = malloc(len + 1);
        if (copy) {
            /* drop the old root.path value, then insert both pieces */
            memcpy(copy, text, p0);
            memcpy(copy + p0, text + p1, len - p1);
            rc = write_edited(out, copy, len - (p1 - p0), ins, ins, insert, p0, root_value);
            free(copy);
        }
    } else {
        /* text[:p0] root_value text[p1:ins] insert text[ins:] */
        rc = write_edited(out, text, len, p0, p1, root_value, ins, insert);
    }
out:
    free(text);
    return rc;
}

/* runc's and crun's global options that take a separate value */
static int takes_value(const char *opt)
{
    static const char *const with_value[] = {"--root", "--log", "--log-format", "--log-level",
                                             "--criu", "--rootless", "--cgroup-manager", NULL};
    for (int i = 0; with_value[i]; i++)
        if (strcmp(opt, with_value[i]) == 0)
            return 1;
    return 0;
}

static int wrap(int argc, char **argv)
{
    char exe[PATH_MAX], real[PATH_MAX], bundle[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        fprintf(stderr, "%s: cannot read /proc/self/exe: %s\n", PROG, strerror(errno));
        return 127;
    }
    exe[n] = '\0';
    if (snprintf(real, sizeof(real), "%s%s", exe, REAL_SUFFIX) >= (int)sizeof(real)) {
        fprintf(stderr, "%s: path too long: %s\n", PROG, exe);
        return 127;
    }

    int sub = 1;
    while (sub < argc && argv[sub][0] == '-')
        sub += takes_value(argv[sub]) ? 2 : 1;
    if (sub < argc && (strcmp(argv[sub], "create") == 0 || strcmp(argv[sub], "run") == 0)) {
        const char *b = NULL;
        for (int i = sub + 1; i < argc; i++) {
            if ((strcmp(argv[i], "--bundle") == 0 || strcmp(argv[i], "-b") == 0) && i + 1 < argc)
                b = argv[i + 1];
            else if (strncmp(argv[i], "--bundle=", 9) == 0)
                b = argv[i] + 9;
            else if (strncmp(argv[i], "-b=", 3) == 0)
                b = argv[i] + 3;
        }
        char cwd[PATH_MAX];
        int fits;
        if (!b || b[0] != '/') {
            if (!getcwd(cwd, sizeof(cwd)))
                cwd[0] = '\0';
            fits = snprintf(bundle, sizeof(bundle), "%s%s%s", cwd, b ? "/" : "", b ? b : "") <
                   (int)sizeof(bundle);
        } else {
            fits = snprintf(bundle, sizeof(bundle), "%s", b) < (int)sizeof(bundle);
        }
        /* Failing to add the hook must not fail the container: it then starts as on a
         * node without the simulator's driver tree. */
        static char shadow[PATH_MAX];
        static char *args[4096];
        if (fits && add_hook(bundle, exe, shadow, sizeof(shadow)) == 0 && argc + 3 < 4096) {
            /* the same call with --bundle SHADOW (replacing any -b/--bundle) */
            int k = 0;
            for (int i = 0; i < argc; i++) {
                if (i > sub && (!strcmp(argv[i], "--bundle") || !strcmp(argv[i], "-b")) &&
                    i + 1 < argc) {
                    i++;
                    continue;
                }
                if (i > sub && (!strncmp(argv[i], "--bundle=", 9) || !strncmp(argv[i], "-b=", 3)))
                    continue;
                args[k++] = argv[i];
                if (i == sub) {
                    args[k++] = "--bundle";
                    args[k++] = shadow;
                }
            }
            args[k] = NULL;
            argv = args;
        } else {
            fprintf(stderr, "%s: warning: no driver tree for the container of %s\n", PROG,
                    bundle);
        }
    }
    execv(real, argv);
    fprintf(stderr, "%s: cannot run the real runtime %s: %s\n", PROG, real, strerror(errno));
    return 127;
}

/* ------------------------------------------------------------------ */
/* hook: bind the node's /proc/driver and /proc/devices over the container's */

static int openat2_beneath(int dirfd, const char *path, int flags)
{
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_CLOEXEC),
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

static int is_procfs(int fd)
{
    struct statfs sf;
    return fstatfs(fd, &sf) == 0 && sf.f_type == PROC_SUPER_MAGIC;
}

/* Bind the node's `name` under /proc (src, already opened) over ROOTFS/proc/<name>,
 * read-only, when that is the container's own procfs entry of the same type (directory
 * or file); 0 without doing anything otherwise (a symlinked /proc in the image,
 * something already mounted there): the container then starts as it would have without
 * the simulator.  1 on a failed mount. */
static int bind_over(int root, int src, const char *name)
{
    char rel[64], src_path[64], dst_path[64];
    struct stat pst, dst_st, src_st;
    snprintf(rel, sizeof(rel), "proc/%s", name);
    int proc = openat2_beneath(root, "proc", O_PATH | O_DIRECTORY);
    int dst = openat2_beneath(root, rel, O_PATH);
    int ok = proc >= 0 && dst >= 0 && is_procfs(proc) && is_procfs(dst) && !is_procfs(src) &&
             fstat(proc, &pst) == 0 && fstat(dst, &dst_st) == 0 && fstat(src, &src_st) == 0 &&
             pst.st_dev == dst_st.st_dev &&
             (S_ISDIR(src_st.st_mode) ? S_ISDIR(dst_st.st_mode)
                                      : S_ISREG(src_st.st_mode) && S_ISREG(dst_st.st_mode));
    if (proc >= 0)
        close(proc);
    if (!ok) {
        if (dst >= 0)
            close(dst);
        return 0;
    }
    snprintf(src_path, sizeof(src_path), "/proc/self/fd/%d", src);
    snprintf(dst_path, sizeof(dst_path), "/proc/self/fd/%d", dst);
    int rc = mount(src_path, dst_path, NULL, MS_BIND, NULL);
    close(dst);
    if (rc != 0) {
        fprintf(stderr, "%s: bind-mounting the node's /proc/%s: %s\n", PROG, name,
                strerror(errno));
        return 1;
    }
    int bound = openat2_beneath(root, rel, O_PATH);
    snprintf(dst_path, sizeof(dst_path), "/proc/self/fd/%d", bound);
    if (bound < 0 || mount(NULL, dst_path, NULL,
                           MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                           NULL) != 0) {
        fprintf(stderr, "%s: making /proc/%s read-only: %s\n", PROG, name, strerror(errno));
        return 1;
    }
    close(bound);
    return 0;
}

/* The node's /proc/devices is the simulator's when something (a regular file, not
 * procfs) is mounted over it; without a driver it is the kernel's own, which the
 * container's procfs shows anyway. */
static int node_devices_are_simulated(void)
{
    struct statfs sf;
    struct stat st;
    return statfs("/proc/devices", &sf) == 0 && sf.f_type != PROC_SUPER_MAGIC &&
           stat("/proc/devices", &st) == 0 && S_ISREG(st.st_mode);
}

static int hook(const char *rootfs)
{
    char state[65536], path[64];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof(state) - 1 && (r = read(0, state + len, sizeof(state) - 1 - len)) > 0)
        len += (size_t)r;
    state[len] = '\0';
    const char *pid_at = member(ws(state, state + len), state + len, "pid");
    long pid = pid_at ? strtol(pid_at, NULL, 10) : 0;
    if (pid <= 0) {
        fprintf(stderr, "%s: no container pid in the OCI state\n", PROG);
        return 1;
    }
    struct stat st;
    int driver = stat("/proc/driver/nvidia", &st) == 0 && S_ISDIR(st.st_mode);
    int devices = node_devices_are_simulated();
    if (!driver && !devices)
        return 0; /* no driver on this node: nothing to show */

    snprintf(path, sizeof(path), "/proc/%ld/ns/mnt", pid);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNS) != 0) {
        fprintf(stderr, "%s: cannot enter %s: %s\n", PROG, path, strerror(errno));
        return 1;
    }
    close(ns);
    /* Now in the container's mount namespace, before pivot_root: the node's /proc/driver
     * and /proc/devices are still visible under /proc, the container's procfs at
     * ROOTFS/proc. */
    int root = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        fprintf(stderr, "%s: cannot open %s: %s\n", PROG, rootfs, strerror(errno));
        return 1;
    }
    int rc = 0;
    if (driver) {
        int src = open("/proc/driver", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0) {
            fprintf(stderr, "%s: cannot open /proc/driver: %s\n", PROG, strerror(errno));
            return 1;
        }
        rc |= bind_over(root, src, "driver");
        close(src);
    }
    if (devices) {
        int src = open("/proc/devices", O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0) {
            fprintf(stderr, "%s: cannot open /proc/devices: %s\n", PROG, strerror(errno));
            return 1;
        }
        rc |= bind_over(root, src, "devices");
        close(src);
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], HOOK_FLAG) == 0)
        return hook(argv[2]);
    return wrap(argc, argv);
}
