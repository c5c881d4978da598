/* Shared declarations of the unit-test runner: one Suite per module. */
#ifndef SHS_TESTS_UNIT_H
#define SHS_TESTS_UNIT_H

#include <check.h>

Suite *status_suite(void);
Suite *log_suite(void);
Suite *config_suite(void);
Suite *bootstrap_suite(void);
Suite *memory_suite(void);
Suite *transport_suite(void);
Suite *schedule_suite(void);
Suite *collective_suite(void);
Suite *shadow_suite(void);
Suite *shadow_view_suite(void);
Suite *embedding_suite(void);
Suite *dlrm_suite(void);

#endif
