/* ogbcsv.h - imp_run's input (importutil.h) from an OGB node-property
 * dataset in its CSV raw layout, as ogbn-arxiv and ogbn-products ship it
 * (OGB's read_csv_graph_raw reads the same files):
 *   raw/edge.csv.gz           one edge "SRC,DST" per line, no header
 *   raw/node-feat.csv.gz      one node per line: F comma-separated numbers,
 *                             F taken from line 1 (every line must have F)
 *   raw/node-label.csv.gz     one label per line: a whole number (3 or 3.0),
 *                             or nan / NaN / an empty line = unlabelled (-1)
 *   raw/num-node-list.csv.gz  one line: N, the node count
 *   raw/num-edge-list.csv.gz  one line: E, the number of lines of edge.csv.gz
 * Each file may be gzip-compressed or plain (zlib detects which).
 *
 * N is known up front from num-node-list.csv.gz; every other file is
 * checked against it as it streams by: labels and feature rows must number
 * exactly N, edge ids must be below N, edge lines must number exactly E.
 * Feature rows are checked last (imp_run converts them last), so a
 * node-feat.csv.gz with the wrong row count is reported after the topology
 * is built; a count far beyond what node-feat.csv.gz's size can hold is
 * refused when opened (so a bad num-node-list never makes the importer
 * allocate for it).
 *
 * Numbers are parsed strictly: a field must be one number and nothing else
 * (no spaces, no trailing text), features must be finite float32 values
 * (strtof, C locale), ids non-negative decimal integers. Every message names
 * FILE:LINE, and the column when a line has several.
 *
 * Memory: three line readers (about 1.3 MiB each) and one feature row. */
#ifndef SLUICE_OGBCSV_H
#define SLUICE_OGBCSV_H

#include <stddef.h>

#include "importutil.h"

/* Opens the CSV layout a job names: j->feat.path (node-feat.csv.gz),
 * j->labels.path, j->edges.path, j->num_nodes.path, j->num_edges.path
 * (members unused). Reads the two count files and the first feature row.
 * For struct imp_job.open. 0 or -errno (-ENOENT a file missing, -EINVAL bad text,
 * -EBADMSG damaged gzip data) with a message naming the file. */
int ogbcsv_open(struct imp_input **in, const struct imp_job *j, char *err, size_t errlen);

#endif
