/*
 * The two halves of `kvlm report`: report_cmd.c runs the measurements and
 * collects their JSON documents into one object; report_md.c turns that
 * object into DIR/report.md and the SVG charts it shows.
 *
 * The object's keys: "command" (the command line), "model", "settings",
 * "machine", and the raw documents "kv_presets", "kv_model",
 * "kv_model_engine" (kvlm kv --json), "bench" (kvlm bench --json),
 * "sample_stats" (kvlm sample-stats --json), "gen_stats" (kvlm gen-stats
 * --json). report_write adds "charts" (name -> file).
 */
#ifndef KVLM_CLI_REPORT_H
#define KVLM_CLI_REPORT_H

#include <jansson.h>

#define REPORT_MAX_TEMPS 32

/* Writes the charts and report.md into dir. Returns 0, or -1 after a
 * message naming the file that could not be written. */
int report_write(const char *dir, json_t *root);

/* Writes text to dir/name; 0, or -1 after a message naming the path
 * (text NULL counts as out of memory). */
int report_write_file(const char *dir, const char *name, const char *text);

#endif
