/* outfile.c: files written whole or not at all. An output is written under
 * a temporary name next to it ("<path>.tmp.<pid>"), synced, and renamed
 * into place, then its folder is synced: a reader never sees half a file,
 * a full disk leaves the old file as it was, and a signal handler that calls
 * kiln_remove_temp_files leaves nothing behind. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

/* ---- the table of temporary files a signal removes ----------------------------- */

#define TEMP_SLOTS 16
#define TEMP_PATH_MAX 4096

/* A slot is 0 (free), 1 (being filled) or 2 (holds a path the handler may
 * remove). Claimed by compare-and-swap, so threads may each write files. */
static int g_temp_state[TEMP_SLOTS];
static char g_temp_path[TEMP_SLOTS][TEMP_PATH_MAX];

int kiln_temp_track(const char *path) {
    size_t n = strlen(path);
    if (n >= TEMP_PATH_MAX) return -1; /* written, just not removed by a signal */
    for (int i = 0; i < TEMP_SLOTS; i++) {
        int free_slot = 0;
        if (!__atomic_compare_exchange_n(&g_temp_state[i], &free_slot, 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED))
            continue;
        memcpy(g_temp_path[i], path, n + 1);
        __atomic_store_n(&g_temp_state[i], 2, __ATOMIC_RELEASE);
        return i;
    }
    return -1;
}

void kiln_temp_untrack(int slot) {
    if (slot >= 0 && slot < TEMP_SLOTS) __atomic_store_n(&g_temp_state[slot], 0, __ATOMIC_RELEASE);
}

/* Async-signal-safe: only loads and unlink(2). */
void kiln_remove_temp_files(void) {
    for (int i = 0; i < TEMP_SLOTS; i++)
        if (__atomic_load_n(&g_temp_state[i], __ATOMIC_ACQUIRE) == 2) unlink(g_temp_path[i]);
}

/* ---- syncing ------------------------------------------------------------------- */

/* fsync of the folder holding `path`, so a rename into it survives a crash.
 * File systems that cannot sync a folder (EINVAL) are not an error. */
static kiln_status sync_folder(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[TEMP_PATH_MAX];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return kiln_error(KILN_ERR_IO, "cannot open folder '%s': %s", dir, strerror(errno));
    int bad = fsync(fd) != 0 && errno != EINVAL && errno != EROFS;
    int e = errno;
    close(fd);
    return bad ? kiln_error(KILN_ERR_IO, "cannot sync folder '%s': %s", dir, strerror(e)) : KILN_OK;
}

kiln_status kiln_file_rename_synced(const char *tmp, const char *path) {
    if (rename(tmp, path) != 0)
        return kiln_error(KILN_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path,
                          strerror(errno));
    return sync_folder(path);
}

/* ---- kiln_outfile -------------------------------------------------------------- */

kiln_status kiln_outfile_open(kiln_outfile *o, const char *path) {
    memset(o, 0, sizeof *o);
    o->slot = -1;
    o->path = path;
    struct stat s;
    int there = stat(path, &s) == 0;
    if (there && S_ISDIR(s.st_mode)) return kiln_error(KILN_ERR_IO, "'%s' is a folder", path);
    if (there && !S_ISREG(s.st_mode)) {
        /* /dev/stdout, /dev/null, a FIFO: nothing to replace; written as is */
        if (!(o->f = fopen(path, "wb")))
            return kiln_error(KILN_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        return KILN_OK;
    }
    /* A link is followed: the file it names is replaced, the link stays. */
    char *real = there ? realpath(path, NULL) : NULL;
    const char *final = real ? real : path;
    size_t cap = strlen(final) + 32;
    o->final = kiln_malloc(strlen(final) + 1);
    o->tmp = kiln_malloc(cap);
    if (!o->final || !o->tmp) {
        free(real);
        kiln_outfile_discard(o);
        return kiln_error(KILN_ERR_NOMEM, "out of memory writing '%s'", path);
    }
    memcpy(o->final, final, strlen(final) + 1);
    free(real);
    snprintf(o->tmp, cap, "%s.tmp.%ld", o->final, (long)getpid());
    o->slot = kiln_temp_track(o->tmp);
    o->f = fopen(o->tmp, "wb");
    if (!o->f) {
        kiln_status st = kiln_error(KILN_ERR_IO, "cannot create '%s': %s", o->tmp, strerror(errno));
        kiln_outfile_discard(o);
        return st;
    }
    /* A file replaced keeps its permissions. */
    if (there) (void)fchmod(fileno(o->f), s.st_mode & 07777);
    return KILN_OK;
}

kiln_status kiln_outfile_finish(kiln_outfile *o) {
    if (!o->f) return o->finished ? KILN_OK : kiln_error(KILN_ERR_IO, "'%s' is not open", o->path);
    int bad = fflush(o->f) != 0 || ferror(o->f);
    int e = bad ? (errno ? errno : EIO) : 0;
    /* fsync of a terminal or pipe fails with EINVAL: only files are synced */
    if (!bad && o->tmp && fsync(fileno(o->f)) != 0) bad = 1, e = errno;
    if (fclose(o->f) != 0 && !bad) bad = 1, e = errno;
    o->f = NULL;
    if (bad) {
        kiln_status st = kiln_error(KILN_ERR_IO, "cannot write '%s': %s", o->path, strerror(e));
        kiln_outfile_discard(o);
        return st;
    }
    o->finished = 1;
    return KILN_OK;
}

kiln_status kiln_outfile_commit(kiln_outfile *o) {
    kiln_status st = kiln_outfile_finish(o);
    if (!st && o->tmp) {
        st = kiln_file_rename_synced(o->tmp, o->final);
        if (st) unlink(o->tmp);
        kiln_temp_untrack(o->slot);
        o->slot = -1;
    }
    kiln_free(o->tmp);
    kiln_free(o->final);
    memset(o, 0, sizeof *o);
    o->slot = -1;
    return st;
}

void kiln_outfile_discard(kiln_outfile *o) {
    if (o->f) fclose(o->f);
    if (o->tmp) unlink(o->tmp);
    kiln_temp_untrack(o->slot);
    kiln_free(o->tmp);
    kiln_free(o->final);
    memset(o, 0, sizeof *o);
    o->slot = -1;
}
