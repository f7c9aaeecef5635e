/* stat_view.h - gnnstat's view of a run: per-stage and per-rank rates
 * computed from two "status" snapshots of the launcher, as the JSON object
 * `gnnstat --once` prints (schema in docs/profiling.md), and the text
 * frame of the live view. No I/O besides writing to the given stream. */
#ifndef SLUICE_TOOLS_STAT_VIEW_H
#define SLUICE_TOOLS_STAT_VIEW_H

#include <jansson.h>
#include <stdio.h>

#include "launcher/rundir.h"

/* The view of snapshot cur with rates since snapshot prev (NULL: every
 * rate is null). A new reference (json_decref it); NULL only when out of
 * memory. Snapshots may lack keys (an older launcher): what is missing is
 * null or left out. */
json_t *stat_view_make(const json_t *prev, const json_t *cur);

/* Writes one frame of the live view of view (from stat_view_make) of run
 * to f: header, epoch, one block per rank, the legend. */
void stat_view_render(FILE *f, const json_t *view, const struct rundir_info *run);

#endif
