#include "common.h"

/* ------------------------------------------------------------------ */
/* sim apply's setup of the MIG state                                   */
/*
 * gpunode sim apply sets up a node's MIG state and footprint for a profile
 * (gpunode.sim.migstate.apply_mig) by calling this through ctypes, in its own
 * process, with the profile's payload (not the embedded blob: one built library
 * serves every profile) and the node's roots (a test's elsewhere). It reads and
 * writes the state and the footprint with the code NVML's changes use
 * (migstate.c, footprint.c), under the same flock, so the state has one reader
 * and writer, in C, the language of the processes where no Python runs.
 * *note* hears each file changed ("wrote ...", "created ...", "removed ...").
 * 0, or -1 with errno set.
 */
EXPORT int gpunode_sim_mig_setup(const char *payload, const char *key, const char *proc_driver,
                                 const char *dev, const char *mode_dir,
                                 void (*note_fn)(const char *what))
{
    sim_paths_at(proc_driver, dev, mode_dir);
    parse_payload(payload, strlen(payload));
    int fd = node_lock();
    if (fd < 0)
        return -1;
    pthread_mutex_lock(&g_mig_lock);
    g_note = note_fn;
    int rc = mig_setup_state(key);
    int err = errno;
    if (rc == 0) {
        footprint_static();
        footprint_sync();
    }
    g_note = NULL;
    pthread_mutex_unlock(&g_mig_lock);
    close(fd);
    errno = err;
    return rc;
}
