/* SPDX-License-Identifier: MIT */
/* The subcommands of the qkv tool. Each returns the process exit status. */
#ifndef QKV_CLI_COMMANDS_H
#define QKV_CLI_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_translate(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_average(int argc, char **argv);
int cmd_train_lm(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_eval_lm(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

#endif
