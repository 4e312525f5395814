/* gpunode's sandbox (pause) process: holds a pod's namespaces until it is told to stop.
 * Exits 0 on SIGINT or SIGTERM, reaps children (it is PID 1 of the pod when the PID
 * namespace is shared), and otherwise sleeps in pause(2). Built static (musl-gcc or
 * gcc -static) by gpunode.cri.pause, so its image is this one file. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop;
    if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) return 1;
    sa.sa_handler = reap;
    sa.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, NULL) < 0) return 2;
    for (;;) pause();
    return 42;
}
