/* tools/mixprec/doctor.h: `mixprec doctor` and the SIGUSR1 handler of
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

#endif
