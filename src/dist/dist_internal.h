/* dist/dist_internal.h: test hooks of the dist module. Not public. */
#ifndef MIXPREC_DIST_INTERNAL_H
#define MIXPREC_DIST_INTERNAL_H

#include <stddef.h>

/* Largest all-reduce segment of the MPI communicator, in elements
 * (default 2^24; 0 restores it). Tests lower it to exercise the segment
 * loop on small buffers. Process-wide; set it while no collective runs.
 * No effect in a build without MPI. */
void mxp_dist_mpi_set_segment_max(size_t n);

#endif
