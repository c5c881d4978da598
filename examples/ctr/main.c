/*
 * shs-ctr: a Hogwild click-through-rate trainer that reproduces ShadowSync's
 * comparisons on a synthetic click log (see data.c and model.c).
 *
 *   shs-launch -n 4 -- shs-ctr --mode s-ma [options]     N ranks on one host
 *   mpirun -np 4 shs-ctr --mode s-ma [options]           the same under Open MPI
 *   shs-ctr --mode single [options]                      the one-process reference
 *
 * Rank and size come from the context (shs_ctx_create finds them under
 * shs-launch, Open MPI, Slurm, torchrun or from SHS_RANK/SHS_SIZE).
 *
 * Each rank materializes its 1/N share of the training stream once (one
 * pass, as in the paper), trains the model held in a registered region with
 * W lock-free worker threads, and keeps it in sync with the other ranks
 * according to the mode:
 *
 *   none                    no sync: N independent models on 1/N of the data each
 *   s-ma, s-bmuf, s-easgd   the shadow thread syncs in the background (shadow.h)
 *   fr-ma, fr-bmuf, fr-easgd  every --fr-every examples per worker, all workers
 *                           stop at a barrier, one of them runs a sync round
 *                           (which waits for the group's peers), all resume
 *   single                  one process, W workers, all the data, no RDMA
 *
 * --ds G uses DS-Sync groups of G ranks (hypercube schedule when N is a power
 * of G, the general one otherwise) instead of all ranks.
 *
 * Output: one line per rank on stdout, and with --out DIR a JSON file per
 * rank (DIR/<label>.rank<r>.json) that `tools/shs-report ctr` turns
 * into the table and the picture. --sync-only S measures the shadow engine alone
 * (no workers) for S seconds: syncs per minute for the model size.
 *
 * The parts: options.c, run.c (set-up and teardown), train.c (workers and
 * monitor), sync.c (the shadow engine or the foreground rounds), report.c
 * (evaluation and output), data.c and model.c (the workload, ctr.h).
 */
#include "trainer.h"

int main(int argc, char **argv)
{
    return ctr_main(argc, argv, NULL);
}
