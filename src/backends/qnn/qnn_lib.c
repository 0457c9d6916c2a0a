/* qnn_lib.c: finding and loading Qualcomm's QNN HTP library, once per
 * process; the backend and device handles a compile or a program uses; QNN
 * errors and log lines as Kiln's.
 *
 * The folder is, in order: kiln_qnn_set_library_dir (the tools' --qnn-lib),
 * $KILN_QNN_LIB, the cache scripts/fetch-qnn.sh fills. The first one given
 * is the one used: a folder named but without the library is an error, not
 * a reason to look further. The library stays loaded until the process
 * ends (QNN's libraries are not made to be unloaded). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/qnn/qnn.h"

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static char lib_dir_set[4096]; /* kiln_qnn_set_library_dir; "" = not set */
static qnn_lib lib;            /* loaded when lib.fn != NULL */
static int log_level = -1;     /* KILN_QNN_LOG, read once */

kiln_status kiln_qnn_set_library_dir(const char *dir) {
    pthread_mutex_lock(&lib_lock);
    kiln_status st = KILN_OK;
    const char *want = dir ? dir : "";
    if (strlen(want) >= sizeof lib_dir_set)
        st = kiln_error(KILN_ERR_INVALID_ARG, "QNN library folder name is too long");
    else if (lib.fn && strcmp(want, lib_dir_set))
        st = kiln_error(KILN_ERR_INVALID_ARG,
                        "the QNN library is already loaded from '%s'; it cannot change in a "
                        "running process",
                        lib.dir);
    else
        strcpy(lib_dir_set, want);
    pthread_mutex_unlock(&lib_lock);
    return st;
}

/* The last QNN error line logged on this thread, cited by qnn_fail. */
static _Thread_local char last_log[320];

static void log_cb(const char *fmt, uint32_t level, uint64_t ts, va_list ap) {
    (void)ts;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == ' '))
        line[--n] = 0;
    if (level == 1) { /* kept, cut to fit */
        size_t k = n < sizeof last_log - 1 ? n : sizeof last_log - 1;
        memcpy(last_log, line, k);
        last_log[k] = 0;
    }
    if ((int)level <= log_level) fprintf(stderr, "kiln: qnn [%u] %s\n", level, line);
}

kiln_status qnn_fail(const qnn_lib *l, const char *call, qnn_err e) {
    const char *msg = NULL;
    if (l && l->fn && l->fn->error_get_message && l->fn->error_get_message(e, &msg)) msg = NULL;
    kiln_status st = kiln_error(KILN_ERR_BACKEND, "QNN %s failed with code %u%s%s%s%s%s", call,
                                QNN_CODE(e), msg && *msg ? " (" : "", msg ? msg : "",
                                msg && *msg ? ")" : "", last_log[0] ? ": " : "", last_log);
    last_log[0] = 0;
    return st;
}

void qnn_clear_log(void) {
    last_log[0] = 0;
}

static int is_file(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

/* The folder to load from, and where it came from (for messages). */
static kiln_status choose_dir(char *dir, size_t cap) {
    const char *env = getenv("KILN_QNN_LIB");
    char cache[4096];
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(cache, sizeof cache, "%s/kiln/qnn", xdg);
    else
        snprintf(cache, sizeof cache, "%s/.cache/kiln/qnn", home && *home ? home : ".");
    const char *from = NULL, *pick = NULL;
    if (lib_dir_set[0])
        from = "--qnn-lib", pick = lib_dir_set;
    else if (env && *env)
        from = "$KILN_QNN_LIB", pick = env;
    snprintf(dir, cap, "%s", pick ? pick : cache);
    char path[4200];
    snprintf(path, sizeof path, "%s/libQnnHtp.so", dir);
    if (is_file(path)) return KILN_OK;
    if (pick)
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "QNN: %s names '%s', which has no libQnnHtp.so (scripts/fetch-qnn.sh "
                          "DIR fetches Qualcomm's x86-64 libraries from PyPI; on a device use "
                          "the folder holding its QNN libraries)",
                          from, pick);
    return kiln_error(KILN_ERR_UNSUPPORTED,
                      "QNN: libQnnHtp.so not found: no --qnn-lib given, $KILN_QNN_LIB not "
                      "set, and the cache folder '%s' has none. Run scripts/fetch-qnn.sh to "
                      "fetch Qualcomm's libraries from PyPI (onnxruntime-qnn 2.7.0), or name "
                      "their folder with --qnn-lib DIR or $KILN_QNN_LIB",
                      cache);
}

static kiln_status load_locked(void) {
    if (lib.fn) return KILN_OK;
    if (log_level < 0) {
        const char *lv = getenv("KILN_QNN_LOG");
        log_level = lv && *lv ? atoi(lv) : 0;
    }
    char dir[4096];
    kiln_status st = choose_dir(dir, sizeof dir);
    if (st) return st;
    char path[4200];
    snprintf(path, sizeof path, "%s/libQnnHtp.so", dir);
    int quiet = qnn_quiet_begin();
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    qnn_quiet_end(quiet);
    if (!dl) return kiln_error(KILN_ERR_UNSUPPORTED, "QNN: cannot load '%s': %s", path, dlerror());
    qnn_get_providers_fn get = NULL;
    *(void **)&get = dlsym(dl, "QnnInterface_getProviders");
    if (!get) {
        dlclose(dl);
        return kiln_error(KILN_ERR_UNSUPPORTED,
                          "QNN: '%s' has no QnnInterface_getProviders: not a QNN backend library",
                          path);
    }
    const qnn_provider **list = NULL;
    uint32_t n = 0;
    qnn_err e = get(&list, &n);
    if (e || !list || !n) {
        dlclose(dl);
        return kiln_error(KILN_ERR_UNSUPPORTED, "QNN: '%s' lists no providers (code %u)", path,
                          QNN_CODE(e));
    }
    /* Core API 2.40 or newer within major 2: the layouts in qnn_abi.h. */
    const qnn_provider *p = NULL;
    for (uint32_t i = 0; i < n && !p; i++)
        if (list[i] && list[i]->api.core.major == QNN_CORE_MAJOR &&
            list[i]->api.core.minor >= QNN_CORE_MINOR_MIN)
            p = list[i];
    if (!p) {
        const qnn_version *v = list[0] ? &list[0]->api.core : &(qnn_version){0, 0, 0};
        kiln_status bad = kiln_error(
            KILN_ERR_UNSUPPORTED,
            "QNN: '%s' has core API %u.%u.%u; Kiln needs %d.%d or newer of major %d", path,
            v->major, v->minor, v->patch, QNN_CORE_MAJOR, QNN_CORE_MINOR_MIN, QNN_CORE_MAJOR);
        dlclose(dl);
        return bad;
    }
    lib.dl = dl;
    lib.api = p->api;
    lib.build_id = "?";
    const char *id = NULL;
    if (p->fn.backend_get_build_id && !p->fn.backend_get_build_id(&id) && id) lib.build_id = id;
    snprintf(lib.dir, sizeof lib.dir, "%s", dir);
    lib.fn = &p->fn;
    return KILN_OK;
}

kiln_status qnn_lib_get(const qnn_lib **out) {
    pthread_mutex_lock(&lib_lock);
    kiln_status st = load_locked();
    pthread_mutex_unlock(&lib_lock);
    *out = st ? NULL : &lib;
    return st;
}

/* The HTP emulator prints a banner with printf when it starts (" # LIBNATIVE:
 * ..."), on the process's standard output, where it would corrupt what Kiln
 * prints there. Around the calls that start it, fd 1 goes to /dev/null (to
 * stderr with KILN_QNN_LOG set). Not for execute: only compile and open. */
int qnn_quiet_begin(void) {
    fflush(stdout);
    int saved = dup(1);
    if (saved < 0) return -1;
    int to = log_level > 0 ? dup(2) : open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (to < 0 || dup2(to, 1) < 0) {
        if (to >= 0) close(to);
        close(saved);
        return -1;
    }
    close(to);
    return saved;
}

void qnn_quiet_end(int saved) {
    if (saved < 0) return;
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
}

/* ---- the handles one compile or one program uses ------------------------- */

static kiln_status open_handles(qnn_rt *rt, const qnn_fn *f, int soc);

kiln_status qnn_rt_open(qnn_rt *rt, int soc) {
    memset(rt, 0, sizeof *rt);
    kiln_status st = qnn_lib_get(&rt->lib);
    if (st) return st;
    const qnn_fn *f = rt->lib->fn;
    int quiet = qnn_quiet_begin();
    st = open_handles(rt, f, soc);
    qnn_quiet_end(quiet);
    if (st) qnn_rt_close(rt); /* all or nothing: rt->lib set means open */
    return st;
}

static kiln_status open_handles(qnn_rt *rt, const qnn_fn *f, int soc) {
    kiln_status st;
    qnn_err e = f->log_create(log_cb, 5, &rt->log);
    if (e) return qnn_fail(rt->lib, "logCreate", e);
    if ((e = f->backend_create(rt->log, NULL, &rt->be))) {
        st = qnn_fail(rt->lib, "backendCreate", e);
        qnn_rt_close(rt);
        return st;
    }
    /* Without a SoC the emulator computes in fp32 as a v68 would not: always
     * name one. */
    qnn_htp_device_config soc_cfg = {.option = QNN_HTP_DEVICE_SOC, .soc = (uint32_t)soc};
    qnn_config dc = {.option = 0, .custom = &soc_cfg};
    const qnn_config *dcs[2] = {&dc, NULL};
    if ((e = f->device_create(rt->log, dcs, &rt->dev))) {
        st = qnn_fail(rt->lib, "deviceCreate", e);
        qnn_rt_close(rt);
        return st;
    }
    rt->soc = soc;
    return KILN_OK;
}

void qnn_rt_close(qnn_rt *rt) {
    if (!rt->lib) return;
    const qnn_fn *f = rt->lib->fn;
    if (rt->dev) f->device_free(rt->dev);
    if (rt->be) f->backend_free(rt->be);
    if (rt->log) f->log_free(rt->log);
    memset(rt, 0, sizeof *rt);
}

/* ---- SoC names ------------------------------------------------------------ */

static const struct {
    const char *name;
    int id, arch;
    const char *unit; /* the trace's compute unit */
} socs[] = {
    {"SM8550", 43, 73, "HTP v73 fp16 (SM8550)"}, /* Snapdragon 8 Gen 2 */
    {"SM8650", 57, 75, "HTP v75 fp16 (SM8650)"}, /* Snapdragon 8 Gen 3 */
    {"SM8750", 69, 79, "HTP v79 fp16 (SM8750)"}, /* Snapdragon 8 Elite */
};

int qnn_soc_from_name(const char *name) {
    for (size_t i = 0; i < sizeof socs / sizeof *socs; i++)
        if (!strcmp(name, socs[i].name)) return socs[i].id;
    return -1;
}

const char *qnn_soc_unit(int id) {
    for (size_t i = 0; i < sizeof socs / sizeof *socs; i++)
        if (socs[i].id == id) return socs[i].unit;
    return "HTP fp16";
}

const char *qnn_soc_name(int id) {
    for (size_t i = 0; i < sizeof socs / sizeof *socs; i++)
        if (socs[i].id == id) return socs[i].name;
    return NULL;
}

void qnn_soc_names(char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof socs / sizeof *socs && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s (v%d)", i ? ", " : "", socs[i].name,
                               socs[i].arch);
}
