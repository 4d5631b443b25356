/* SPDX-License-Identifier: MIT */
/* The OpenBLAS this test program runs on is its OpenMP build, the one qkv needs
 * (qkv_blas_check). Every program here is linked with that build's directory as RUNPATH, so this
 * fails only when another build is forced in, e.g. through LD_LIBRARY_PATH or LD_PRELOAD;
 * tests/e2e/test_blas.sh does exactly that to see it fail. With the pthreads build, the threads
 * of OpenBLAS and qkv's fight, and test_flash_attention's backward differs between thread
 * counts. */
#include "test_util.h"

static void test_openmp_build_loaded(void **state)
{
    (void)state;
    qkv_error err = {0};
    if (qkv_blas_check(&err) != QKV_OK) fail_msg("%s", err.msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openmp_build_loaded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
