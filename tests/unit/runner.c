/*
 * One runner for every unit suite: `shs_unit <suite>` runs one suite (CTest
 * registers each), `shs_unit` alone runs them all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

static const struct {
    const char *name;
    Suite *(*make)(void);
} suites[] = {
    {"status", status_suite},
    {"log", log_suite},
    {"config", config_suite},
    {"bootstrap", bootstrap_suite},
    {"memory", memory_suite},
    {"transport", transport_suite},
    {"schedule", schedule_suite},
    {"collective", collective_suite},
    {"shadow", shadow_suite},
    {"shadow_view", shadow_view_suite},
    {"embedding", embedding_suite},
    {"dlrm", dlrm_suite},
};

int main(int argc, char **argv)
{
    SRunner *sr = NULL;
    size_t n = sizeof(suites) / sizeof(suites[0]);

    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], suites[i].name) != 0)
            continue;
        if (sr == NULL)
            sr = srunner_create(suites[i].make());
        else
            srunner_add_suite(sr, suites[i].make());
    }
    if (sr == NULL) {
        fprintf(stderr, "shs_unit: no suite named '%s'\n", argv[1]);
        return 2;
    }
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
