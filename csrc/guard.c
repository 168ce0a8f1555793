/* guard.c: reads of mapped segment data never kill the process.
 *
 * Segments are read through a shared read-only mmap. A file truncated under the mapping
 * (an interrupted restore, an operator's mistake) or a disk read error on a mapped page
 * raises SIGBUS in the reading thread. Each public call that touches mapped bytes runs
 * under a guard (GUARD_BEGIN/GUARD_END in internal.h): a thread-local pointer to a
 * sigjmp_buf. The SIGBUS handler, installed by walfs_open and chained to the handler
 * that was there before (Python's faulthandler, say), jumps back to the guard of the
 * faulting thread, which releases the one lock it holds and returns -EIO for that call;
 * a SIGBUS outside any guard goes to the previous handler (or kills the process as it
 * would have without walfs). The signal is synchronous, so it arrives in the thread that
 * touched the page: other threads, Python's included, are not disturbed.
 */
#include "internal.h"

#include <signal.h>
#include <string.h>

static __thread guard_t *current;
static struct sigaction previous;

static void on_sigbus(int sig, siginfo_t *info, void *uc)
{
    guard_t *g = current;
    if (g) {
        current = NULL;
        siglongjmp(g->jb, 1);
    }
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, uc);
    } else if (previous.sa_handler == SIG_IGN) {
        return;
    } else if (previous.sa_handler == SIG_DFL) {
        signal(SIGBUS, SIG_DFL);
        raise(SIGBUS);
    } else {
        previous.sa_handler(sig);
    }
}

static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

/* Called at every walfs_open: if something replaced the handler since (faulthandler
 * enabled later, say), it is put back in front, chained to the newcomer. */
void guard_install(void)
{
    pthread_mutex_lock(&install_lock);
    struct sigaction cur;
    if (sigaction(SIGBUS, NULL, &cur) == 0 && !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &previous);
    }
    pthread_mutex_unlock(&install_lock);
}

guard_t *guard_get(void) { return current; }

void guard_set(guard_t *g) { current = g; }
