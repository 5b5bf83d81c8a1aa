/* tools/mixprec/data_cli.h: the verbs that use a model trained on user
 * data (cmd_data.c): `mixprec eval`, `mixprec predict`, and
 * `mixprec ckpt export --torch` (called from cmd_ckpt.c). */
#ifndef MIXPREC_DATA_CLI_H
#define MIXPREC_DATA_CLI_H

int cmd_eval(int argc, char **argv);
int cmd_predict(int argc, char **argv);
/* argv as ckpt export got it (argv[0] = "export"), one of them "--torch". */
int cli_export_torch(int argc, char **argv);

#endif
