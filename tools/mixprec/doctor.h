/* tools/mixprec/doctor.h: `mixprec doctor` and the guard's pieces of
 * `mixprec train` (cmd_doctor.c). */
#ifndef MIXPREC_DOCTOR_H
#define MIXPREC_DOCTOR_H

#include "cli.h"

/* Exit code of `mixprec train` when a guard rule with action `stop` ended
 * the run (outputs and a final checkpoint are still written). */
#define CLI_EXIT_GUARD_STOP 4

int cmd_doctor(int argc, char **argv);

/* `train`: install the SIGUSR1 -> FP32 handler (a warning when impossible). */
void doctor_install_signal(void);
/* `train`: the guard's lines after the summary (nothing without a guard). */
void doctor_print_guard(FILE *f, mxp_world_model *wm);
/* `train --json`: `"guard":{...},` for the summary object ("guard":null,). */
void doctor_guard_json(FILE *f, mxp_world_model *wm);
/* `train`: the exit code after a successful run: CLI_EXIT_GUARD_STOP when a
 * stop rule fired, else rc. */
int doctor_exit_code(mxp_world_model *wm, int rc);

#endif
