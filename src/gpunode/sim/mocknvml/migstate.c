#include "common.h"

/* ------------------------------------------------------------------ */
/* MIG state                                                            */
/*
 * MIG is driver state, as on hardware: MIG mode and the GPU and compute
 * instances live on the node, not in a process. The simulator keeps them in
 * STATE_FILE on the node's simulated /proc/driver tmpfs (gpunode.sim.apply
 * mounts it; procdriver shows it in every container), so every process and
 * container of the node sees the same state and it is gone when the node
 * restarts, like kernel state. The file's name and format are simulator-
 * private: it sits in a dot-directory no product code reads (product code
 * asks NVML, and reads the driver's capabilities files below). Changes are
 * serialized across processes by flock(LOCK_FILE) and written as a temporary
 * file renamed over STATE_FILE. Without the file (a container without the
 * node's /proc/driver, a test root) the state is the profile's (the "mig"
 * lines). MIG mode survives a reboot on real GPUs: each change of it is also
 * written to MODE_FILE on the node's disk (best effort), which sim apply's
 * setup (mig_setup_state, called by setup.c) reads when it sets up a fresh
 * state for the same profile. This file is the state's one reader and writer:
 * sim apply calls it too (gpunode.sim.migstate says why).
 *
 * Format (gpunode.sim.migstate.RECORDS, as STATE_*_FORMAT in the generated
 * migstate.h; "key" names the profile the state was set up for):
 *   gpunode-sim-mig-state v1
 *   key<TAB><profile digest>
 *   gpu<TAB>uuid=GPU-...<TAB>mode=1<TAB>counter=3
 *   gi<TAB>parent=GPU-...<TAB>id=2<TAB>profile=9<TAB>start=4
 *   ci<TAB>parent=GPU-...<TAB>gi=2<TAB>id=0<TAB>profile=2<TAB>start=0<TAB>uuid=MIG-...
 *
 * GPU instance ids are the real driver's: fixed by the placement (the
 * profile's first id plus the placement's position, e.g. 1g.10gb at slot 0..6
 * = GI 7..13, 3g.40gb at 0 / 4 = GI 1 / 2). Compute instance ids: the lowest
 * free one in the GPU instance. A new MIG device's UUID is derived from the
 * parent's UUID, the GI and CI ids and the GPU's creation counter.
 *
 * The driver's footprint (footprint.c, rewritten by mig.c's transaction on
 * every change) shows this state: the capability files
 * /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access and
 * the /dev/nvidia-caps/nvidia-cap<minor> nodes of existing instances (made as
 * nvidia-modprobe would; skipped where mknod is not allowed). Cap minors are
 * the simulator's choice, fitting NVIDIA's sample mig-minors lines:
 * GI_MINOR and CI_MINOR of migstate.h (gpunode.sim.migstate.gi_minor; product
 * code reads them from the access files, never computes them).
 */

state_t g_st;
sim_paths_t g_paths = {SIM_DIR, STATE_FILE, LOCK_FILE, MODE_DIR, MODE_FILE,
                       CAPS_PROC, CAPS_DEV, PROC_DRIVER "/" MIG_MINORS_SUB};
void (*g_note)(const char *what);
static struct {
    int valid, exists;
    dev_t dev;
    ino_t ino;
    struct timespec mtim;
    off_t size;
} g_seen;
pthread_mutex_t g_mig_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_gi_cursor, g_mig_cursor;
static char g_buf[STATE_BUF];

/* The node's MIG files under other roots (sim apply's, a test root's). */
void sim_paths_at(const char *proc_driver, const char *dev, const char *mode_dir)
{
    sim_paths_t *p = &g_paths;
    snprintf(p->sim_dir, PATH_LEN, "%s/" SIM_SUB, proc_driver);
    snprintf(p->state, PATH_LEN, "%s/" SIM_SUB "/" STATE_NAME, proc_driver);
    snprintf(p->lock, PATH_LEN, "%s/" SIM_SUB "/" LOCK_NAME, proc_driver);
    snprintf(p->mode_dir, PATH_LEN, "%s", mode_dir);
    snprintf(p->mode, PATH_LEN, "%s/" MODE_NAME, mode_dir);
    snprintf(p->caps_proc, PATH_LEN, "%s/" CAPS_SUB, proc_driver);
    snprintf(p->caps_dev, PATH_LEN, "%s/" DEVCAPS_SUB, dev);
    snprintf(p->mig_minors, PATH_LEN, "%s/" MIG_MINORS_SUB, proc_driver);
}

/* Tell sim apply what changed (nothing in an NVML process: g_note is unset). */
void note(const char *fmt, ...)
{
    if (!g_note)
        return;
    char what[2 * PATH_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    g_note(what);
}

/* Take the node's MIG lock (flock on the lock file): its fd, or -1 (errno). */
int node_lock(void)
{
    if (mkdir(g_paths.sim_dir, 0755) != 0 && errno != EEXIST)
        return -1;
    int fd = open(g_paths.lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
    }
    return fd;
}

unsigned int mig_ci_slices(const mig_t *m)
{
    return g_cip_slices[m->ci_profile];
}

static unsigned int gi_minor(unsigned int gpu_minor, unsigned int gi)
{
    return GI_MINOR(gpu_minor, gi);
}

static unsigned int ci_minor(unsigned int gpu_minor, unsigned int gi, unsigned int ci)
{
    return CI_MINOR(gpu_minor, gi, ci);
}

static struct nvmlDevice_st *gpu_dev(const char *uuid)
{
    for (unsigned int i = 0; i < g_ngpus; i++)
        if (strcmp(g_gpus[i].gpu.uuid, uuid) == 0)
            return &g_gpus[i];
    return NULL;
}

const gip_t *gip_by(const gpu_t *g, int by_id, unsigned int key)
{
    for (unsigned int i = 0; i < g_ngips; i++) {
        const gip_t *p = &g_gips[i];
        if (strcmp(p->parent, g->uuid) == 0 && (by_id ? p->id : p->index) == key)
            return p;
    }
    return NULL;
}

int gip_start_pos(const gip_t *p, unsigned int start)
{
    for (unsigned int i = 0; i < p->nstarts; i++)
        if (p->starts[i] == start)
            return (int)i;
    return -1;
}

static unsigned int ci_full_profile(const gip_t *p)
{
    for (unsigned int i = 0; i < g_ncips; i++)
        if (g_cip_slices[i] == p->slices)
            return i;
    return 0;
}

st_gpu_t *st_gpu(state_t *st, const char *uuid)
{
    for (unsigned int i = 0; i < st->ngpus; i++)
        if (strcmp(st->gpus[i].uuid, uuid) == 0)
            return &st->gpus[i];
    return NULL;
}

int st_gi_at(const state_t *st, const char *parent, unsigned int id)
{
    for (unsigned int i = 0; i < st->ngis; i++)
        if (st->gis[i].id == id && strcmp(st->gis[i].parent, parent) == 0)
            return (int)i;
    return -1;
}

int st_ci_at(const state_t *st, const char *parent, unsigned int gi, unsigned int id)
{
    for (unsigned int i = 0; i < st->ncis; i++)
        if (st->cis[i].gi == gi && st->cis[i].id == id && strcmp(st->cis[i].parent, parent) == 0)
            return (int)i;
    return -1;
}

/* The state a node without a state file has: the profile's. */
static void state_initial(state_t *st)
{
    memset(st, 0, sizeof(*st));
    for (unsigned int i = 0; i < g_ngpus && st->ngpus < MAX_GPUS; i++) {
        const gpu_t *g = &g_gpus[i].gpu;
        if (!g->mig_capable)
            continue;
        st_gpu_t *sg = &st->gpus[st->ngpus++];
        copy_str(sg->uuid, sizeof(sg->uuid), g->uuid);
        sg->mode = g->mig_initial ? 1 : 0;
    }
    for (unsigned int i = 0; i < g_ninit_migs; i++) {
        const init_mig_t *m = &g_init_migs[i];
        struct nvmlDevice_st *d = gpu_dev(m->parent_uuid);
        const gip_t *p = d && d->gpu.mig_capable && d->gpu.mig_initial
                             ? gip_by(&d->gpu, 0, m->profile_index)
                             : NULL;
        if (!p || st->ngis >= MAX_GIS || st->ncis >= MAX_MIGS)
            continue;
        if (st_gi_at(st, m->parent_uuid, m->gi_id) < 0) {
            st_gi_t *gi = &st->gis[st->ngis++];
            copy_str(gi->parent, sizeof(gi->parent), m->parent_uuid);
            gi->id = m->gi_id;
            gi->profile = p->id;
            gi->start = m->placement_start;
        }
        st_ci_t *ci = &st->cis[st->ncis++];
        copy_str(ci->parent, sizeof(ci->parent), m->parent_uuid);
        ci->gi = m->gi_id;
        ci->id = m->ci_id;
        ci->profile = ci_full_profile(p);
        ci->start = 0;
        copy_str(ci->uuid, sizeof(ci->uuid), m->uuid);
    }
}

static void st_gpu_setter(void *o, const char *k, const char *v)
{
    st_gpu_t *g = o;
    if (strcmp(k, "uuid") == 0)
        copy_str(g->uuid, sizeof(g->uuid), v);
    else if (strcmp(k, "mode") == 0)
        g->mode = (unsigned int)parse_ull(v);
    else if (strcmp(k, "counter") == 0)
        g->counter = (unsigned int)parse_ull(v);
}

static void st_gi_setter(void *o, const char *k, const char *v)
{
    st_gi_t *g = o;
    if (strcmp(k, "parent") == 0)
        copy_str(g->parent, sizeof(g->parent), v);
    else if (strcmp(k, "id") == 0)
        g->id = (unsigned int)parse_ull(v);
    else if (strcmp(k, "profile") == 0)
        g->profile = (unsigned int)parse_ull(v);
    else if (strcmp(k, "start") == 0)
        g->start = (unsigned int)parse_ull(v);
}

static void st_ci_setter(void *o, const char *k, const char *v)
{
    st_ci_t *c = o;
    if (strcmp(k, "parent") == 0)
        copy_str(c->parent, sizeof(c->parent), v);
    else if (strcmp(k, "uuid") == 0)
        copy_str(c->uuid, sizeof(c->uuid), v);
    else if (strcmp(k, "gi") == 0)
        c->gi = (unsigned int)parse_ull(v);
    else if (strcmp(k, "id") == 0)
        c->id = (unsigned int)parse_ull(v);
    else if (strcmp(k, "profile") == 0)
        c->profile = (unsigned int)parse_ull(v);
    else if (strcmp(k, "start") == 0)
        c->start = (unsigned int)parse_ull(v);
}

/* Read STATE_FILE into *st: 1 when read, 0 when absent or not ours. */
static int state_read(state_t *st)
{
    int fd = open(g_paths.state, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, g_buf + len, sizeof(g_buf) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == sizeof(g_buf) - 1)
            break;
    }
    close(fd);
    g_buf[len] = '\0';
    size_t magic = strlen(STATE_MAGIC);
    if (strncmp(g_buf, STATE_MAGIC, magic) != 0 || g_buf[magic] != '\n')
        return 0;
    memset(st, 0, sizeof(*st));
    char *line = g_buf + magic + 1;
    while (line && *line) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *tab = strchr(line, '\t');
        if (tab) {
            *tab = '\0';
            char *rest = tab + 1;
            if (strcmp(line, "key") == 0) {
                copy_str(st->key, sizeof(st->key), rest);
            } else if (strcmp(line, "gpu") == 0 && st->ngpus < MAX_GPUS) {
                for_each_field(rest, st_gpu_setter, &st->gpus[st->ngpus]);
                if (st->gpus[st->ngpus].uuid[0])
                    st->ngpus++;
            } else if (strcmp(line, "gi") == 0 && st->ngis < MAX_GIS) {
                for_each_field(rest, st_gi_setter, &st->gis[st->ngis]);
                if (st->gis[st->ngis].parent[0])
                    st->ngis++;
            } else if (strcmp(line, "ci") == 0 && st->ncis < MAX_MIGS) {
                for_each_field(rest, st_ci_setter, &st->cis[st->ncis]);
                if (st->cis[st->ncis].parent[0] && st->cis[st->ncis].uuid[0])
                    st->ncis++;
            }
        }
        line = next;
    }
    return 1;
}

/* Write *text* to *path* as a temporary file renamed over it; 0 or -1. */
int write_atomically(const char *path, const char *text, mode_t mode)
{
    char tmp[256];
    const char *slash = strrchr(path, '/');
    if (!slash)
        return -1;
    snprintf(tmp, sizeof(tmp), "%.*s/.%s.XXXXXX", (int)(slash - path), path, slash + 1);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    size_t len = strlen(text), done = 0;
    int ok = 1;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ok = 0;
            break;
        }
        done += (size_t)n;
    }
    ok = ok && fchmod(fd, mode) == 0;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return 0;
    unlink(tmp);
    return -1;
}

static size_t append(size_t at, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static size_t append(size_t at, const char *fmt, ...)
{
    if (at >= sizeof(g_buf))
        return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_buf + at, sizeof(g_buf) - at, fmt, ap);
    va_end(ap);
    return n < 0 ? at : at + (size_t)n;
}

static int state_write(const state_t *st)
{
    size_t at = append(0, STATE_MAGIC "\n" STATE_KEY_FORMAT, st->key);
    for (unsigned int i = 0; i < st->ngpus; i++)
        at = append(at, STATE_GPU_FORMAT, st->gpus[i].uuid,
                    st->gpus[i].mode, st->gpus[i].counter);
    for (unsigned int i = 0; i < st->ngis; i++)
        at = append(at, STATE_GI_FORMAT, st->gis[i].parent,
                    st->gis[i].id, st->gis[i].profile, st->gis[i].start);
    for (unsigned int i = 0; i < st->ncis; i++)
        at = append(at, STATE_CI_FORMAT,
                    st->cis[i].parent, st->cis[i].gi, st->cis[i].id, st->cis[i].profile,
                    st->cis[i].start, st->cis[i].uuid);
    if (at >= sizeof(g_buf) - 1)
        return -1;
    return write_atomically(g_paths.state, g_buf, 0644);
}

/* MIG mode survives a reboot: keep it on the node's disk too (best effort). */
static void persist_modes(const state_t *st)
{
    struct stat sb;
    if (stat(g_paths.mode_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return;
    size_t at = append(0, STATE_KEY_FORMAT, st->key);
    for (unsigned int i = 0; i < st->ngpus; i++)
        at = append(at, MODE_LINE_FORMAT, st->gpus[i].uuid, st->gpus[i].mode);
    if (at < sizeof(g_buf) - 1)
        (void)write_atomically(g_paths.mode, g_buf, 0644);
}

/* ---- this process's view: handle slots and visibility ---- */

/* A cap node NVML may use: the char device CAPS_MAJOR:minor whose open is not
 * refused by the device cgroup (EPERM/EACCES). ENXIO/ENODEV: allowed (no real
 * driver behind the major). */
static int cap_ok(unsigned int minor)
{
    char path[PATH_LEN + 32];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/nvidia-cap%u", g_paths.caps_dev, minor);
    if (stat(path, &sb) != 0 || !S_ISCHR(sb.st_mode) || major(sb.st_rdev) != CAPS_MAJOR ||
        minor(sb.st_rdev) != minor)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno != EPERM && errno != EACCES;
}

static void reconcile(void)
{
    static unsigned char matched_gi[MAX_GIS], matched_ci[MAX_MIGS];
    memset(matched_gi, 0, sizeof(matched_gi));
    memset(matched_ci, 0, sizeof(matched_ci));
    for (unsigned int i = 0; i < g_ngpus; i++) {
        gpu_t *g = &g_gpus[i].gpu;
        st_gpu_t *sg = st_gpu(&g_st, g->uuid);
        g->mig = g->mig_capable && sg ? sg->mode != 0 : 0;
    }
    /* GPU instances: keep the slots of those still there, give new ones free slots */
    for (unsigned int s = 0; s < MAX_GIS; s++) {
        struct nvmlGpuInstance_st *h = &g_gis[s];
        if (!h->live)
            continue;
        int k = st_gi_at(&g_st, h->parent->gpu.uuid, h->id);
        if (k >= 0 && !matched_gi[k] && g_st.gis[k].profile == h->gip->id &&
            g_st.gis[k].start == h->start)
            matched_gi[k] = 1;
        else
            h->live = 0;
    }
    for (unsigned int k = 0; k < g_st.ngis; k++) {
        const st_gi_t *sgi = &g_st.gis[k];
        struct nvmlDevice_st *d = gpu_dev(sgi->parent);
        const gip_t *p = d ? gip_by(&d->gpu, 1, sgi->profile) : NULL;
        if (matched_gi[k] || !p || !d->gpu.mig)
            continue;
        for (unsigned int n = 0; n < MAX_GIS; n++) {
            struct nvmlGpuInstance_st *h = &g_gis[(g_gi_cursor + n) % MAX_GIS];
            if (h->live)
                continue;
            g_gi_cursor = (g_gi_cursor + n + 1) % MAX_GIS;
            memset(h, 0, sizeof(*h));
            h->live = 1;
            h->parent = d;
            h->gip = p;
            h->id = sgi->id;
            h->start = sgi->start;
            break;
        }
    }
    /* compute instances = MIG devices */
    for (unsigned int s = 0; s < MAX_MIGS; s++) {
        mig_t *m = &g_migs[s].mig;
        if (!m->live)
            continue;
        int k = st_ci_at(&g_st, m->parent->gpu.uuid, m->gi_id, m->ci_id);
        if (k >= 0 && !matched_ci[k] && strcmp(g_st.cis[k].uuid, m->uuid) == 0 &&
            g_st.cis[k].profile == m->ci_profile && g_st.cis[k].start == m->ci_start)
            matched_ci[k] = 1;
        else
            m->live = 0;
    }
    for (unsigned int k = 0; k < g_st.ncis; k++) {
        const st_ci_t *sci = &g_st.cis[k];
        struct nvmlDevice_st *d = gpu_dev(sci->parent);
        if (matched_ci[k] || !d || !d->gpu.mig)
            continue;
        for (unsigned int n = 0; n < MAX_MIGS; n++) {
            unsigned int s = (g_mig_cursor + n) % MAX_MIGS;
            mig_t *m = &g_migs[s].mig;
            if (m->live)
                continue;
            g_mig_cursor = (s + 1) % MAX_MIGS;
            memset(&g_migs[s], 0, sizeof(g_migs[s]));
            g_migs[s].is_mig = 1;
            m->live = 1;
            m->parent = d;
            copy_str(m->uuid, sizeof(m->uuid), sci->uuid);
            m->gi_id = sci->gi;
            m->ci_id = sci->id;
            m->ci_profile = sci->profile;
            m->ci_start = sci->start;
            g_cis[s].mig = &g_migs[s];
            break;
        }
    }
    /* links and visibility (section 3 of the MIG contract) */
    int any_cap = cap_ok(CAP_CONFIG_MINOR) || cap_ok(CAP_MONITOR_MINOR);
    for (unsigned int s = 0; s < MAX_GIS; s++) {
        struct nvmlGpuInstance_st *h = &g_gis[s];
        if (h->live)
            h->visible = h->parent->gpu.visible &&
                         (any_cap || cap_ok(gi_minor(h->parent->gpu.minor, h->id)));
    }
    for (unsigned int s = 0; s < MAX_MIGS; s++) {
        mig_t *m = &g_migs[s].mig;
        if (!m->live)
            continue;
        m->gi = NULL;
        for (unsigned int t = 0; t < MAX_GIS; t++)
            if (g_gis[t].live && g_gis[t].parent == m->parent && g_gis[t].id == m->gi_id)
                m->gi = &g_gis[t];
        if (!m->gi || m->ci_profile >= g_ncips) {
            m->live = 0;
            continue;
        }
        m->gip = m->gi->gip;
        unsigned int minor = m->parent->gpu.minor;
        m->visible = m->parent->gpu.visible &&
                     (any_cap || (cap_ok(gi_minor(minor, m->gi_id)) &&
                                  cap_ok(ci_minor(minor, m->gi_id, m->ci_id))));
    }
    /* a MIG device's index: its position among its parent's, by GI id then CI id */
    for (unsigned int s = 0; s < MAX_MIGS; s++) {
        mig_t *m = &g_migs[s].mig;
        if (!m->live || !m->visible)
            continue;
        m->index = 0;
        for (unsigned int t = 0; t < MAX_MIGS; t++) {
            const mig_t *o = &g_migs[t].mig;
            if (o->live && o->visible && o->parent == m->parent &&
                (o->gi_id < m->gi_id || (o->gi_id == m->gi_id && o->ci_id < m->ci_id)))
                m->index++;
        }
    }
}

/* Re-read the state when the file changed (under g_mig_lock). */
static void mig_load(void)
{
    struct stat sb;
    int exists = stat(g_paths.state, &sb) == 0;
    if (g_seen.valid && exists == g_seen.exists &&
        (!exists || (sb.st_dev == g_seen.dev && sb.st_ino == g_seen.ino &&
                     sb.st_size == g_seen.size && sb.st_mtim.tv_sec == g_seen.mtim.tv_sec &&
                     sb.st_mtim.tv_nsec == g_seen.mtim.tv_nsec)))
        return;
    if (!exists || !state_read(&g_st))
        state_initial(&g_st);
    g_seen.valid = 1;
    g_seen.exists = exists;
    if (exists) {
        g_seen.dev = sb.st_dev;
        g_seen.ino = sb.st_ino;
        g_seen.size = sb.st_size;
        g_seen.mtim = sb.st_mtim;
    }
    reconcile();
}

void mig_refresh(void)
{
    pthread_mutex_lock(&g_mig_lock);
    mig_load();
    pthread_mutex_unlock(&g_mig_lock);
}

/* At (re)initialization: forget every handle, read the state afresh. */
void mig_reset(void)
{
    pthread_mutex_lock(&g_mig_lock);
    memset(g_gis, 0, sizeof(g_gis));
    memset(g_migs, 0, sizeof(g_migs));
    memset(g_cis, 0, sizeof(g_cis));
    memset(&g_seen, 0, sizeof(g_seen));
    pthread_mutex_unlock(&g_mig_lock);
}

/* ---- for a change (mig.c's transaction, under g_mig_lock and the node's flock) ---- */

/* Read the state afresh, whether or not the file changed (under g_mig_lock). */
void mig_reload(void)
{
    g_seen.valid = 0;
    mig_load();
}

/* Write the changed state g_st to STATE_FILE and its MIG modes to MODE_FILE; 0 or -1. */
int mig_save(void)
{
    if (state_write(&g_st) != 0)
        return -1;
    persist_modes(&g_st);
    return 0;
}

/* ---- sim apply's setup (setup.c, under the node's flock) ---- */

/* The MIG modes MODE_FILE keeps for the profile *key*, over st's (a node restart);
 * the instances of a GPU whose mode is now off are gone. */
static void restore_modes(state_t *st, const char *key)
{
    int fd = open(g_paths.mode, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, g_buf, sizeof(g_buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    g_buf[n] = '\0';
    char *line = g_buf, *next = strchr(line, '\n');
    if (!next || strncmp(line, "key\t", 4) != 0)
        return;
    *next++ = '\0';
    if (strcmp(line + 4, key) != 0)
        return;
    for (line = next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *tab = strchr(line, '\t');
        if (!tab || (strcmp(tab + 1, "0") != 0 && strcmp(tab + 1, "1") != 0))
            continue;
        *tab = '\0';
        st_gpu_t *sg = st_gpu(st, line);
        if (sg)
            sg->mode = tab[1] == '1';
    }
    unsigned int gis = 0, cis = 0;
    for (unsigned int i = 0; i < st->ngis; i++) {
        const st_gpu_t *sg = st_gpu(st, st->gis[i].parent);
        if (sg && sg->mode)
            st->gis[gis++] = st->gis[i];
    }
    for (unsigned int i = 0; i < st->ncis; i++) {
        const st_gpu_t *sg = st_gpu(st, st->cis[i].parent);
        if (sg && sg->mode)
            st->cis[cis++] = st->cis[i];
    }
    st->ngis = gis;
    st->ncis = cis;
}

/* The state for the parsed profile named *key*: the one there when it is that
 * profile's (processes' instances stay), else the profile's, with the modes
 * MODE_FILE keeps when there was none (the node restarted); written then, with
 * the modes. 0 or -1 (errno). */
int mig_setup_state(const char *key)
{
    struct stat sb;
    int exists = stat(g_paths.state, &sb) == 0;
    if (exists && state_read(&g_st) && strcmp(g_st.key, key) == 0)
        return 0;
    state_initial(&g_st);
    copy_str(g_st.key, sizeof(g_st.key), key);
    if (!exists)
        restore_modes(&g_st, key);
    if (state_write(&g_st) != 0)
        return -1;
    note("wrote %s", g_paths.state);
    persist_modes(&g_st);
    return 0;
}

/* Slots taken by the GPU instances of parent (memory) and their compute slices. */
void gi_usage(const char *parent, unsigned int *slots, unsigned int *slices,
                     unsigned int profile_id, unsigned int *same_profile)
{
    *slots = 0;
    *slices = 0;
    *same_profile = 0;
    struct nvmlDevice_st *d = gpu_dev(parent);
    for (unsigned int i = 0; d && i < g_st.ngis; i++) {
        const st_gi_t *gi = &g_st.gis[i];
        const gip_t *p = strcmp(gi->parent, parent) == 0 ? gip_by(&d->gpu, 1, gi->profile) : NULL;
        if (!p)
            continue;
        *slots |= ((1u << p->placement_size) - 1) << gi->start;
        *slices += p->slices;
        *same_profile += p->id == profile_id;
    }
}

int gi_fits(const gip_t *p, unsigned int start, unsigned int slots, unsigned int slices,
                   unsigned int same)
{
    unsigned int want = ((1u << p->placement_size) - 1) << start;
    return !(slots & want) && slices + p->slices <= g_mig_slices && same < p->instances &&
           start + p->placement_size <= g_memory_slots;
}

/* The CI slices of a GPU instance taken by its compute instances. */
void ci_usage(const char *parent, unsigned int gi, unsigned int profile,
                     unsigned int *slices, unsigned int *same)
{
    *slices = 0;
    *same = 0;
    for (unsigned int i = 0; i < g_st.ncis; i++) {
        const st_ci_t *c = &g_st.cis[i];
        if (c->gi != gi || strcmp(c->parent, parent) != 0 || c->profile >= g_ncips)
            continue;
        *slices |= ((1u << g_cip_slices[c->profile]) - 1) << c->start;
        *same += c->profile == profile;
    }
}

int ci_placement_valid(const gip_t *p, unsigned int profile, unsigned int start)
{
    return profile < g_ncips && g_cip_slices[profile] <= p->slices &&
           start % g_cip_step[profile] == 0 && start + g_cip_slices[profile] <= p->slices;
}

int ci_fits(const gip_t *p, unsigned int profile, unsigned int start, unsigned int taken,
                   unsigned int same)
{
    unsigned int want = ((1u << g_cip_slices[profile]) - 1) << start;
    return ci_placement_valid(p, profile, start) && !(taken & want) &&
           same < p->slices / g_cip_slices[profile];
}

/* 64-bit FNV-1a over text, from seed. */
static unsigned long long fnv1a(unsigned long long seed, const char *text)
{
    unsigned long long h = seed;
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        h ^= *c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

void mig_uuid(char *out, size_t cap, const char *parent, unsigned int gi, unsigned int ci,
                     unsigned int counter)
{
    char text[STR_LEN + 64];
    snprintf(text, sizeof(text), "%s/%u/%u/%u", parent, gi, ci, counter);
    unsigned long long a = fnv1a(0xcbf29ce484222325ULL, text);
    unsigned long long b = fnv1a(0x84222325cbf29ce4ULL, text);
    snprintf(out, cap, "MIG-%08llx-%04llx-%04llx-%04llx-%012llx", a >> 32, (a >> 16) & 0xffff,
             a & 0xffff, b >> 48, b & 0xffffffffffffULL);
}
