/* SPDX-License-Identifier: Apache-2.0 */
/*
 * braid-info --plugins: which env, net, tuner and profiler plugins a communicator would
 * load, and why. Rather than restate the loader's rules, it asks the loader: a one-rank
 * communicator is created through libnccl.so.2 with the log at INFO captured in a
 * temporary file, and the loader's lines ("ENV/Plugin: ...", "NET/Plugin: ...") are
 * printed. The profiler's traces, if one loads, go to the same temporary directory.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "info.h"
#include "nccl.h"

/* Prints the loader's lines of the log, without the host:pid:tid prefix. */
static int print_plugin_lines(FILE *out, const char *log)
{
    char line[2048];
    int n = 0;
    FILE *f = fopen(log, "r");

    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *tag = strstr(line, " NCCL ");
        if (strstr(line, "/Plugin: ") == NULL || tag == NULL) {
            continue;
        }
        fprintf(out, "  %s", tag + 6); /* "INFO NET/Plugin: ..." or "WARN ..." */
        n++;
    }
    fclose(f);
    return n;
}

/* Removes the files of the temporary directory, then the directory. */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];

    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    rmdir(dir);
}

int info_print_plugins(FILE *out)
{
    char dir[] = "/tmp/braid-info-XXXXXX", log[64];
    ncclComm_t comm;
    ncclResult_t res;

    if (mkdtemp(dir) == NULL) {
        perror("braid-info: mkdtemp");
        return 1;
    }
    snprintf(log, sizeof(log), "%s/log", dir);
    /* The library reads its parameters at its first call, after these. */
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "ALL", 1);
    setenv("NCCL_DEBUG_FILE", log, 1);
    setenv("BRAID_PROFILER_DIR", dir, 1);
    res = ncclCommInitAll(&comm, 1, NULL);
    if (res == ncclSuccess) {
        res = ncclCommDestroy(comm);
    }
    fprintf(out, "Plugins a communicator loads with this environment (the loader's log):\n");
    if (print_plugin_lines(out, log) == 0) {
        fprintf(out, "  (no plugin lines in the log)\n");
    }
    if (res != ncclSuccess) {
        fprintf(out, "creating a one-rank communicator failed: %s: %s\n", ncclGetErrorString(res),
                ncclGetLastError(NULL));
    }
    remove_dir(dir);
    return res != ncclSuccess;
}
