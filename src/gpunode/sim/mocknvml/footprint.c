#include "common.h"

/* ------------------------------------------------------------------ */
/* MIG state: the driver's footprint                                    */
/*
 * What the driver shows of the MIG state (migstate.c), rewritten after every
 * change: the capability files of the existing GPU and compute instances,
 * /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access, and
 * their /dev/nvidia-caps/nvidia-cap<minor> nodes (made as nvidia-modprobe
 * would; skipped where mknod is not allowed). Paths, the access file format
 * and the minors are gpunode.sim.migstate's (migstate.h), as is the Python
 * writer sim apply uses at setup (migstate.sync_footprint).
 */

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

static void write_access(const char *dir, unsigned int minor)
{
    char path[256], text[128], have[128];
    snprintf(path, sizeof(path), "%s/access", dir);
    snprintf(text, sizeof(text), ACCESS_FORMAT, minor, 292u);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, have, sizeof(have) - 1);
        close(fd);
        if (n >= 0 && (have[n] = '\0', strcmp(have, text) == 0))
            return;
    }
    (void)write_atomically(path, text, 0444);
}

static void make_dir(const char *path)
{
    (void)mkdir(path, 0555);
}

/* Remove every giN (or ciN) entry of dir that keep() rejects. */
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
    }
    closedir(d);
}

typedef struct {
    const char *parent;
    unsigned int gi;
} prune_arg_t;

static int keep_gi(unsigned int id, const void *arg)
{
    return st_gi_at(&g_st, ((const prune_arg_t *)arg)->parent, id) >= 0;
}

static int keep_ci(unsigned int id, const void *arg)
{
    const prune_arg_t *a = arg;
    return st_ci_at(&g_st, a->parent, a->gi, id) >= 0;
}

static void ensure_cap_node(unsigned int minor, int want)
{
    char path[PATH_LEN + 32];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/nvidia-cap%u", g_paths.caps_dev, minor);
    int have = lstat(path, &sb) == 0;
    int right = have && S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(CAPS_MAJOR, minor);
    if (have && (!want || !right))
        unlink(path);
    if (want && !right) {
        /* as nvidia-modprobe makes them; a container may not mknod: skip */
        if (mknod(path, S_IFCHR | 0444, makedev(CAPS_MAJOR, minor)) == 0)
            chmod(path, 0444);
    }
}

void footprint_sync(void)
{
    char dir[PATH_LEN + 32], sub[PATH_LEN + 64];
    mkdir(g_paths.caps_proc, 0555);
    mkdir(g_paths.caps_dev, 0755);
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
            write_access(sub, GI_MINOR(g->minor, gi->id));
            for (unsigned int c = 0; c < g_st.ncis; c++) {
                const st_ci_t *ci = &g_st.cis[c];
                if (ci->gi != gi->id || strcmp(ci->parent, g->uuid) != 0)
                    continue;
                char cdir[PATH_LEN + 96];
                snprintf(cdir, sizeof(cdir), "%s/ci%u", sub, ci->id);
                make_dir(cdir);
                write_access(cdir, CI_MINOR(g->minor, gi->id, ci->id));
            }
        }
        unsigned int first = GI_MINOR(g->minor, 0);
        for (unsigned int m = first; m < first + CAPS_PER_GPU; m++) {
            unsigned int gi = (m - first) / CAPS_PER_GI, slot = (m - first) % CAPS_PER_GI;
            int want = slot == 0 ? st_gi_at(&g_st, g->uuid, gi) >= 0
                                 : st_ci_at(&g_st, g->uuid, gi, slot - 1) >= 0;
            ensure_cap_node(m, want);
        }
    }
}
