/*
 * The default thread count (kernels/cores.c) against CPU topologies
 * written into a temporary directory laid out like /sys:
 * - four processors, two per core ("0,2" and "1,3"): 2 cores for the whole
 *   mask, 1 for {0, 2}, 2 for {1, 2}, 1 for {3} alone;
 * - ranges ("0-1", "2-3") and a machine without SMT (each its own sibling);
 * - no sibling lists: distinct (physical_package_id, core_id) pairs;
 * - a malformed list or a missing file for one processor: the next source,
 *   then every processor of the mask;
 * - the reason names the count and the siblings left out;
 * - on this machine, kvlm_default_threads agrees with kern_default_threads
 *   and lies within the affinity mask's processor count (without an
 *   affinity call, KVLM_POSIX_ONLY: within the online processors, and the
 *   reason says there is no mask).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "kernels/cores.h"
#include "kvlm.h"

static char root[256];

static void mkdirs(const char *path) {
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

/* Writes root/devices/system/cpu/cpuN/topology/NAME (text NULL: removes it). */
static void put(int cpu, const char *name, const char *text) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/devices/system/cpu/cpu%d/topology", root, cpu);
    mkdirs(dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!text) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", text);
    fclose(f);
}

static void clear(int n_cpus) {
    for (int i = 0; i < n_cpus; i++) {
        put(i, "thread_siblings_list", NULL);
        put(i, "core_id", NULL);
        put(i, "physical_package_id", NULL);
    }
}

static kern_cpu_mask mask_of(const char *cpus) {
    kern_cpu_mask m;
    kern_mask_zero(&m);
    for (const char *p = cpus; *p; p++)
        if (*p >= '0' && *p <= '9') kern_mask_set(&m, *p - '0');
    return m;
}

static int cores(const char *cpus, char *why, size_t n) {
    kern_cpu_mask m = mask_of(cpus);
    return kern_cores_in_mask(root, &m, why, n);
}

static int setup(void **state) {
    (void)state;
    snprintf(root, sizeof root, "/tmp/kvlm_cores_XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_siblings(void **state) {
    (void)state;
    clear(8);
    const char *sib[4] = {"0,2", "1,3", "0,2", "1,3"};
    for (int i = 0; i < 4; i++) put(i, "thread_siblings_list", sib[i]);
    char why[160];
    assert_int_equal(cores("0123", why, sizeof why), 2);
    assert_string_equal(why, "2 physical cores available to this process; 2 SMT siblings not counted");
    assert_int_equal(cores("02", why, sizeof why), 1);
    assert_string_equal(why, "1 physical core available to this process; 1 SMT sibling not counted");
    assert_int_equal(cores("12", why, sizeof why), 2);
    assert_string_equal(why, "2 physical cores available to this process; no SMT siblings");
    assert_int_equal(cores("3", NULL, 0), 1);
    assert_int_equal(cores("013", NULL, 0), 2);

    /* ranges; 8 processors, 4 cores of 2 */
    const char *rng[8] = {"0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"};
    for (int i = 0; i < 8; i++) put(i, "thread_siblings_list", rng[i]);
    assert_int_equal(cores("01234567", why, sizeof why), 4);
    assert_string_equal(why, "4 physical cores available to this process; 4 SMT siblings not counted");
    assert_int_equal(cores("0246", NULL, 0), 4);
    assert_int_equal(cores("01", NULL, 0), 1);
    /* a list with ranges and commas: cores of 4 threads (0-1,4-5 and 2-3,6-7) */
    const char *mix[8] = {"0-1,4-5", "0-1,4-5", "2-3,6-7", "2-3,6-7", "0-1,4-5", "0-1,4-5", "2-3,6-7", "2-3,6-7"};
    for (int i = 0; i < 8; i++) put(i, "thread_siblings_list", mix[i]);
    assert_int_equal(cores("01234567", NULL, 0), 2);
    assert_int_equal(cores("45", NULL, 0), 1);

    /* no SMT: every processor is its own sibling */
    for (int i = 0; i < 4; i++) {
        char s[16];
        snprintf(s, sizeof s, "%d", i);
        put(i, "thread_siblings_list", s);
    }
    assert_int_equal(cores("0123", why, sizeof why), 4);
    assert_string_equal(why, "4 physical cores available to this process; no SMT siblings");
}

static void test_core_ids(void **state) {
    (void)state;
    clear(8);
    /* two packages of two cores, two threads each: core ids repeat across packages */
    for (int i = 0; i < 8; i++) {
        char c[16], p[16];
        snprintf(c, sizeof c, "%d", (i / 2) % 2);
        snprintf(p, sizeof p, "%d", i / 4);
        put(i, "core_id", c);
        put(i, "physical_package_id", p);
    }
    char why[160];
    assert_int_equal(cores("01234567", why, sizeof why), 4);
    assert_string_equal(why, "4 physical cores available to this process; 4 SMT siblings not counted");
    assert_int_equal(cores("0145", NULL, 0), 2);
    assert_int_equal(cores("04", NULL, 0), 2); /* core 0 of each package */
    /* one sibling list present is not enough: the lists are used only when every processor has one */
    put(0, "thread_siblings_list", "0");
    assert_int_equal(cores("01", NULL, 0), 1);
    /* a malformed list for every processor of the mask: core ids decide */
    put(1, "thread_siblings_list", "1-0");
    assert_int_equal(cores("01", NULL, 0), 1);
    put(0, "thread_siblings_list", "x");
    put(1, "thread_siblings_list", "0,,1");
    assert_int_equal(cores("01", NULL, 0), 1);
    /* a list that leaves out its own processor is malformed too */
    put(0, "thread_siblings_list", "1");
    put(1, "thread_siblings_list", "1");
    assert_int_equal(cores("01", NULL, 0), 1);
}

static void test_no_topology(void **state) {
    (void)state;
    clear(8);
    char why[400], want[400];
    assert_int_equal(cores("0123", why, sizeof why), 4);
    snprintf(want, sizeof want, "4 processors in this process's affinity mask; no CPU topology under %s", root);
    assert_string_equal(why, want);
    /* one processor without a package id: neither source is complete */
    for (int i = 0; i < 3; i++) {
        put(i, "core_id", "0");
        put(i, "physical_package_id", "0");
    }
    put(3, "core_id", "0");
    assert_int_equal(cores("0123", NULL, 0), 4);
    assert_int_equal(cores("012", NULL, 0), 1);
    /* a short buffer still ends in a NUL */
    char tiny[6];
    assert_int_equal(cores("0123", tiny, sizeof tiny), 4);
    assert_string_equal(tiny, "4 pro");
}

static void test_this_machine(void **state) {
    (void)state;
    kern_cpu_mask m;
    const int have = kern_affinity_mask(&m) == 0;
    assert_int_equal(have, KVLM_HAVE_AFFINITY);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    char why[200] = "", why2[200] = "";
    const int n = kvlm_default_threads(why, sizeof why);
    assert_int_equal(n, kern_default_threads(why2, sizeof why2));
    assert_string_equal(why, why2);
    assert_true(n >= 1 && n <= (have ? kern_mask_count(&m) : online));
    if (!have) assert_non_null(strstr(why, "(no affinity mask on this system)"));
    char lead[32];
    snprintf(lead, sizeof lead, "%d ", n);
    assert_int_equal(strncmp(why, lead, strlen(lead)), 0);
    assert_int_equal(kvlm_default_threads(NULL, 0), n);
    print_message("  kvlm_default_threads: %d (%s)\n", n, why);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_siblings),
        cmocka_unit_test(test_core_ids),
        cmocka_unit_test(test_no_topology),
        cmocka_unit_test(test_this_machine),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
