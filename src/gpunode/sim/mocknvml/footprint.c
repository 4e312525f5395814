#include "common.h"

/* ------------------------------------------------------------------ */
/* MIG state: the driver's footprint                                    */
/*
 * What the driver shows of the MIG state (migstate.c), rewritten after every
 * change: the capability files of the existing GPU and compute instances,
 * /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access, and
 * their /dev/nvidia-caps/nvidia-cap<minor> nodes (made as nvidia-modprobe
 * would; skipped where mknod is not allowed). At setup (setup.c, for sim
 * apply) also its static part: capabilities/mig/{config,monitor},
 * /proc/driver/nvidia-caps/mig-minors and the config and monitor cap nodes.
 * Paths, the files' formats and the minors are gpunode.sim.migstate's
 * (migstate.h); this is their one writer (sim apply calls it).
 */

static char g_text[160 * 1024]; /* mig-minors: 4,322 lines */

static void remove_tree(const char *path)
{
    DIR *dir = opendir(path);
    if (dir) {
        struct dirent *e;
        char sub[512];
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        closedir(dir);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* *path* holds *text* with *mode* already? */
static int holds(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat sb;
    size_t len = strlen(text), at = 0;
    int same = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 07777) == mode &&
               (size_t)sb.st_size == len;
    char chunk[4096];
    while (same && at < len) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || (size_t)n > len - at || memcmp(chunk, text + at, (size_t)n) != 0)
            same = 0;
        else
            at += (size_t)n;
    }
    close(fd);
    return same;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    if (!holds(path, text, mode) && write_atomically(path, text, mode) == 0)
        note("wrote %s", path);
}

static void write_access(const char *dir, const char *name, unsigned int minor,
                         unsigned int mode)
{
    char path[512], text[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(text, sizeof(text), ACCESS_FORMAT, minor, mode);
    write_file(path, text, 0444);
}

static void make_dir(const char *path)
{
    (void)mkdir(path, 0555);
}

/* Remove every <prefix>N entry of dir that keep() rejects. */
static void prune(const char *dir, const char *prefix, int (*keep)(unsigned int, const void *),
                  const void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    size_t plen = strlen(prefix);
    while ((e = readdir(d)) != NULL) {
        unsigned int id;
        char tail;
        if (strncmp(e->d_name, prefix, plen) != 0)
            continue;
        if (sscanf(e->d_name + plen, "%u%c", &id, &tail) == 1 && keep(id, arg))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        remove_tree(path);
        note("removed %s", path);
    }
    closedir(d);
}

typedef struct {
    const char *parent;
    unsigned int gi;
} prune_arg_t;

static const gpu_t *mig_gpu(unsigned int minor)
{
    for (unsigned int i = 0; i < g_ngpus; i++)
        if (g_gpus[i].gpu.mig_capable && g_gpus[i].gpu.minor == minor)
            return &g_gpus[i].gpu;
    return NULL;
}

static int keep_gpu(unsigned int minor, const void *arg)
{
    (void)arg;
    return mig_gpu(minor) != NULL;
}

static int keep_gi(unsigned int id, const void *arg)
{
    return st_gi_at(&g_st, ((const prune_arg_t *)arg)->parent, id) >= 0;
}

static int keep_ci(unsigned int id, const void *arg)
{
    const prune_arg_t *a = arg;
    return st_ci_at(&g_st, a->parent, a->gi, id) >= 0;
}

/* Is cap minor m an existing instance's (of a MIG-capable GPU)? */
static int cap_wanted(unsigned int m, const void *arg)
{
    (void)arg;
    if (m <= CAP_MONITOR_MINOR)
        return 1; /* config and monitor: the static part's */
    for (unsigned int i = 0; i < g_ngpus; i++) {
        const gpu_t *g = &g_gpus[i].gpu;
        unsigned int first = GI_MINOR(g->minor, 0);
        if (!g->mig_capable || m < first || m >= first + CAPS_PER_GPU)
            continue;
        unsigned int gi = (m - first) / CAPS_PER_GI, slot = (m - first) % CAPS_PER_GI;
        return slot == 0 ? st_gi_at(&g_st, g->uuid, gi) >= 0
                         : st_ci_at(&g_st, g->uuid, gi, slot - 1) >= 0;
    }
    return 0;
}

/* The cap node of minor: made with mode when missing or not that device; when
 * *exact*, also when its mode differs (config and monitor, at setup only: a
 * container's nodes are its runtime's). */
static void ensure_cap_node(unsigned int minor, mode_t mode, int exact)
{
    char path[PATH_LEN + 32];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/nvidia-cap%u", g_paths.caps_dev, minor);
    int have = lstat(path, &sb) == 0;
    if (have && S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(CAPS_MAJOR, minor) &&
        (!exact || (sb.st_mode & 07777) == mode))
        return;
    if (have)
        unlink(path);
    /* as nvidia-modprobe makes them; a container may not mknod: skip */
    if (mknod(path, S_IFCHR | mode, makedev(CAPS_MAJOR, minor)) == 0) {
        chmod(path, mode); /* mknod honours the umask */
        note("created %s (%u:%u)", path, (unsigned int)CAPS_MAJOR, minor);
    }
}

/* The parent directories of path, as the driver has them. */
static void make_parents(const char *path)
{
    char dir[PATH_LEN];
    copy_str(dir, sizeof(dir), path);
    for (char *slash = strchr(dir + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        (void)mkdir(dir, 0555);
        *slash = '/';
    }
}

/* What the driver shows whatever the state: the config and monitor capabilities
 * and mig-minors, every cap the driver can make with its minor. */
void footprint_static(void)
{
    char dir[PATH_LEN + 8];
    snprintf(dir, sizeof(dir), "%s/mig", g_paths.caps_proc);
    make_parents(dir);
    make_dir(dir);
    write_access(dir, "config", CAP_CONFIG_MINOR, CONFIG_ACCESS_MODE);
    write_access(dir, "monitor", CAP_MONITOR_MINOR, ACCESS_MODE);
    size_t at = 0, cap = sizeof(g_text);
    at += (size_t)snprintf(g_text + at, cap - at, MIG_MINORS_CONFIG_FORMAT, CAP_CONFIG_MINOR);
    at += (size_t)snprintf(g_text + at, cap - at, MIG_MINORS_MONITOR_FORMAT, CAP_MONITOR_MINOR);
    for (unsigned int gpu = 0; gpu < MIG_MINORS_GPUS; gpu++)
        for (unsigned int gi = 0; gi < GIS_PER_GPU; gi++) {
            at += (size_t)snprintf(g_text + at, cap - at, MIG_MINORS_GI_FORMAT, gpu, gi,
                                   GI_MINOR(gpu, gi));
            for (unsigned int ci = 0; ci < MAX_CIS_PER_GI; ci++)
                at += (size_t)snprintf(g_text + at, cap - at, MIG_MINORS_CI_FORMAT, gpu, gi,
                                       ci, CI_MINOR(gpu, gi, ci));
        }
    make_parents(g_paths.mig_minors);
    write_file(g_paths.mig_minors, g_text, 0444);
    (void)mkdir(g_paths.caps_dev, 0755);
    ensure_cap_node(CAP_CONFIG_MINOR, CAP_CONFIG_NODE_MODE, 1);
    ensure_cap_node(CAP_MONITOR_MINOR, CAP_NODE_MODE, 1);
}

/* Make the capability files and cap nodes show exactly the instances in g_st. */
void footprint_sync(void)
{
    char dir[PATH_LEN + 32], sub[PATH_LEN + 64];
    mkdir(g_paths.caps_proc, 0555);
    mkdir(g_paths.caps_dev, 0755);
    prune(g_paths.caps_proc, "gpu", keep_gpu, NULL);
    prune(g_paths.caps_dev, "nvidia-cap", cap_wanted, NULL);
    for (unsigned int i = 0; i < g_ngpus; i++) {
        const gpu_t *g = &g_gpus[i].gpu;
        if (!g->mig_capable)
            continue;
        snprintf(dir, sizeof(dir), "%s/gpu%u", g_paths.caps_proc, g->minor);
        make_dir(dir);
        snprintf(dir, sizeof(dir), "%s/gpu%u/mig", g_paths.caps_proc, g->minor);
        make_dir(dir);
        prune_arg_t arg = {g->uuid, 0};
        prune(dir, "gi", keep_gi, &arg);
        for (unsigned int k = 0; k < g_st.ngis; k++) {
            const st_gi_t *gi = &g_st.gis[k];
            if (strcmp(gi->parent, g->uuid) != 0)
                continue;
            snprintf(sub, sizeof(sub), "%s/gi%u", dir, gi->id);
            make_dir(sub);
            arg.gi = gi->id;
            prune(sub, "ci", keep_ci, &arg);
            write_access(sub, "access", GI_MINOR(g->minor, gi->id), ACCESS_MODE);
            ensure_cap_node(GI_MINOR(g->minor, gi->id), CAP_NODE_MODE, 0);
            for (unsigned int c = 0; c < g_st.ncis; c++) {
                const st_ci_t *ci = &g_st.cis[c];
                if (ci->gi != gi->id || strcmp(ci->parent, g->uuid) != 0)
                    continue;
                char cdir[PATH_LEN + 96];
                snprintf(cdir, sizeof(cdir), "%s/ci%u", sub, ci->id);
                make_dir(cdir);
                write_access(cdir, "access", CI_MINOR(g->minor, gi->id, ci->id), ACCESS_MODE);
                ensure_cap_node(CI_MINOR(g->minor, gi->id, ci->id), CAP_NODE_MODE, 0);
            }
        }
    }
}
