/* The sandbox ("pause") process of every pod on the local cluster's real nodes: it holds the pod's
 * namespaces and only waits. SIGTERM or SIGINT ends it at once with status 0. Built with gcc -static by
 * localcluster/images.py, so the image holds this one file and nothing else. */
#include <signal.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

int main(void) {
    struct sigaction act = {0};
    act.sa_handler = stop;
    sigaction(SIGTERM, &act, 0);
    sigaction(SIGINT, &act, 0);
    for (;;)
        pause();
}
