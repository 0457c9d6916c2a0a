/* file.c: read-only file mapping. Programs and checkpoints are mapped so
 * weights are used in place and paged in on demand. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

const char *kiln_basename(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

kiln_status kiln_file_map_open(const char *path, kiln_file_map *map) {
    memset(map, 0, sizeof *map);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return kiln_error(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kiln_error(KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kiln_error(KILN_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size == 0) { /* mmap refuses empty files; callers see size 0 */
        close(fd);
        return KILN_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return kiln_error(KILN_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    map->data = p;
    map->size = (size_t)st.st_size;
    map->mapped = 1;
    return KILN_OK;
}

void kiln_file_map_close(kiln_file_map *map) {
    if (map->mapped && map->data) munmap((void *)map->data, map->size);
    memset(map, 0, sizeof *map);
}
