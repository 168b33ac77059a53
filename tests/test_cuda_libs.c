/* test_cuda_libs.c - the CUDA build without a GPU (as in CI): cuBLAS, cuDNN
 * and NCCL load at run time with every function the backend calls, of the
 * major versions the headers describe; a GPU tower on a machine without a
 * usable GPU is refused with one line naming the device and CUDA's reason
 * (exit 2 material); --version's build line names the architectures. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "tt_test.h"

#ifndef HAVE_CUDA
int main(void)
{
    tt_skip("cuBLAS, cuDNN and NCCL load at run time (built without CUDA)");
    return tt_done();
}
#else

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_libs.h"

int main(void)
{
    tt_err err = {0};
    int rc = cuda_libs_load(&err);
    tt_ok(rc == 0, "cuBLAS, cuDNN and NCCL load with dlopen (%s)", rc ? err.msg : "ok");
    if (rc == 0) {
        /* every slot of the table is filled */
        void *const *slot = (void *const *)&cu;
        size_t n = sizeof(cu) / sizeof(void *), missing = 0;
        for (size_t i = 0; i < n; i++)
            missing += slot[i] == NULL;
        tt_ok(missing == 0, "all %zu functions resolved (%zu missing)", n, missing);
        size_t v = cu.cudnnGetVersion();
        int nv = 0;
        cu.ncclGetVersion(&nv);
        tt_ok(v / 10000 == CUDNN_MAJOR && nv / 10000 == NCCL_MAJOR,
              "loaded versions match the headers (%s)", cuda_libs_versions());
        tt_ok(strcmp(cu.cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM") == 0,
              "cudnnGetErrorString through the table");
    }
    tt_ok(cuda_libs_load(&err) == rc, "a second load returns the first outcome");

    const char *info = backend_cuda_build_info();
    tt_ok(info != NULL && strstr(info, "cuda: sm_80 sm_90 +ptx (CUDA ") && strstr(info, "cuDNN 9.") &&
              strstr(info, "NCCL 2."),
          "build info: %s", info ? info : "(null)");

    char reason[256] = "";
    int gpus = backend_cuda_device_count(reason, sizeof(reason));
    cuda_options opt = {0};
    err_clear(&err);
    backend_t *be = backend_cuda_create(gpus > 0 ? gpus : 0, &opt, &err);
    tt_ok(be == NULL && err.code == TT_ERR_USAGE && strchr(err.msg, '\n') == NULL &&
              strncmp(err.msg, gpus > 0 ? "cuda:" : "cuda:0: ", gpus > 0 ? 5 : 8) == 0,
          "a GPU tower on %s: refused, exit-2 error, one line (%s)",
          gpus > 0 ? "a device id that does not exist" : "a machine without a usable GPU",
          err.msg);
    if (gpus == 0)
        tt_ok(strstr(err.msg, reason) != NULL, "the line carries CUDA's reason (%s)", reason);
    else
        tt_ok(strstr(err.msg, "no such device") != NULL, "the line says no such device");
    /* the mixed-precision backends are refused the same way */
    backend_t *(*create[2])(int, const cuda_options *, tt_err *) = {backend_cuda_create_bf16,
                                                                     backend_cuda_create_fp16};
    for (int i = 0; i < 2; i++) {
        tt_err e = {0};
        be = create[i](gpus > 0 ? gpus : 0, &opt, &e);
        tt_ok(be == NULL && e.code == TT_ERR_USAGE && strchr(e.msg, '\n') == NULL &&
                  strcmp(e.msg, err.msg) == 0,
              "a %s GPU tower there: refused with the same line", i == 0 ? "bf16" : "fp16");
    }
    return tt_done();
}
#endif
