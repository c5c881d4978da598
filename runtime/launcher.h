/*
 * Private to runtime/: what the runtime's knob table (runtime/knobs.c) takes
 * from launchers when SHS_RANK, SHS_SIZE, SHS_BOOTSTRAP or SHS_JOB_TOKEN are
 * left at auto. verbose: log at info where each value came from.
 */
#ifndef SHS_RUNTIME_LAUNCHER_H
#define SHS_RUNTIME_LAUNCHER_H

#include <stdbool.h>

#include "runtime/knob.h"

/* Fill cfg->rank and/or cfg->size (those still -1) from the innermost
 * launcher found. SHS_ERR_CONFIG (logged) for a launcher variable out of range. */
shs_status_t shs__launcher_detect(shs__config_t *cfg, shs__getenv_fn getenv_fn, bool verbose);

/* SHS_BOOTSTRAP=auto: MASTER_ADDR:(MASTER_PORT+1) under torchrun, else
 * 127.0.0.1:SHS_BOOT_DEFAULT_PORT. SHS_ERR_CONFIG (logged) for a bad MASTER_*. */
shs_status_t shs__launcher_bootstrap(shs__config_t *cfg, shs__getenv_fn getenv_fn, bool verbose);

/* SHS_JOB_TOKEN=auto: the launcher's job id, else "default". */
void shs__launcher_token(shs__config_t *cfg, shs__getenv_fn getenv_fn);

#endif
