/* sgemm_compare.c - row-major single-precision GEMM benchmark for towertrain.
 *
 * One source, one backend per binary (OpenBLAS and BLIS both export cblas_sgemm,
 * so they cannot share a process).  Build (Debian 12):
 *   OpenBLAS: gcc -O2 -std=c11 -DUSE_OPENBLAS sgemm_compare.c -o bench_openblas \
 *               -I/usr/include/x86_64-linux-gnu/openblas-pthread \
 *               -lopenblas -lpthread -lm
 *   BLIS    : gcc -O2 -std=c11 -DUSE_BLIS sgemm_compare.c -o bench_blis \
 *               -I/usr/include/x86_64-linux-gnu/blis-serial \
 *               -L/usr/lib/x86_64-linux-gnu/blis-serial \
 *               -Wl,-rpath,/usr/lib/x86_64-linux-gnu/blis-serial -lblis -lpthread -lm
 *             (use blis-pthread instead of blis-serial to enable the 2-thread mode)
 *   oneDNN  : gcc -O2 -std=c11 -DUSE_DNNL sgemm_compare.c -o bench_dnnl -ldnnl -lgomp -lpthread -lm
 *             (omp.h comes from GCC's own include dir; -fopenmp not required)
 * Run: ./bench_X [lib_threads]   (lib_threads=1 default; also prints the
 *      "2 own pthreads x single-threaded gemm" aggregate and a correctness check
 *      against a double-precision naive reference).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <pthread.h>

#if defined(USE_OPENBLAS)
#include <cblas.h>
#define LIBNAME "openblas"
#elif defined(USE_BLIS)
#include <blis.h>   /* brings in BLIS' own cblas.h prototypes */
#define LIBNAME "blis"
#elif defined(USE_DNNL)
#include <dnnl.h>
#include <omp.h>
#define LIBNAME "onednn"
#else
#error "define USE_OPENBLAS, USE_BLIS or USE_DNNL"
#endif

typedef struct { const char *name; int ta, tb, M, N, K; } shape_t;
static const shape_t shapes[] = {
  {"fwd X[128,784]*W^T[784,256]", 0,1,128,256,784},
  {"fwd X[128,256]*W^T[256,256]", 0,1,128,256,256},
  {"fwd X[128,400]*W^T[400,120]", 0,1,128,120,400},
  {"bwd dW[256,784]=dY^T*X",      1,0,256,784,128},
  {"bwd dX[128,784]=dY*W",        0,0,128,784,256},
  {"conv W[6,25]*col[25,784]",    0,0,  6,784, 25},
  {"conv W[16,150]*col[150,100]", 0,0, 16,100,150},
  {"conv W[16,150]*col[150,12800]",0,0,16,12800,150},
  {"cdW dY[16,12800]*col^T",      0,1, 16,150,12800},
  {"cdcol W^T[150,16]*dY[16,100]",1,0,150,100, 16},
  {"square 512^3",                0,0,512,512,512},
};
#define NSHAPES (int)(sizeof shapes / sizeof shapes[0])

static int g_libthreads = 1;

static double now(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+1e-9*t.tv_nsec; }

/* per-calling-thread setup: force the library to nt threads without env vars */
static void lib_thread_setup(int nt) {
#if defined(USE_OPENBLAS)
  openblas_set_num_threads(nt);
#elif defined(USE_BLIS)
  bli_thread_set_num_threads(nt);  /* global; per-call rntm used below as well */
#elif defined(USE_DNNL)
  omp_set_num_threads(nt);         /* per-thread OpenMP ICV: call in every caller thread */
#endif
}

/* row-major C[M,N] = op(A)[M,K] * op(B)[K,N] */
static void sgemm_rm(int ta, int tb, int M, int N, int K, const float *A, const float *B, float *C, int nt) {
  int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
#if defined(USE_OPENBLAS)
  (void)nt;
  cblas_sgemm(CblasRowMajor, ta?CblasTrans:CblasNoTrans, tb?CblasTrans:CblasNoTrans,
              M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
#elif defined(USE_BLIS)
  /* BLIS typed expert API with a per-call rntm (thread-safe, no global state) */
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(nt, &rntm);
  float one = 1.0f, zero = 0.0f;
  /* row-major: rs = ld, cs = 1 ; transposes expressed through trans_t */
  bli_sgemm_ex(ta?BLIS_TRANSPOSE:BLIS_NO_TRANSPOSE, tb?BLIS_TRANSPOSE:BLIS_NO_TRANSPOSE,
               M, N, K, &one, (float*)A, lda, 1, (float*)B, ldb, 1, &zero, C, ldc, 1, NULL, &rntm);
#elif defined(USE_DNNL)
  (void)nt;
  dnnl_sgemm(ta?'T':'N', tb?'T':'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
#endif
}

static void fill(float *p, size_t n, unsigned seed){ for(size_t i=0;i<n;i++){ seed=seed*1664525u+1013904223u; p[i]=((seed>>9)&0xffff)/65536.0f-0.5f; } }

static double check(const shape_t *s, const float *A, const float *B, const float *C) {
  int M=s->M,N=s->N,K=s->K, lda=s->ta?M:K, ldb=s->tb?K:N; double maxerr=0, maxref=0;
  for(int i=0;i<M;i++) for(int j=0;j<N;j++){ double acc=0, aabs=0;
    for(int k=0;k<K;k++){ double a=s->ta?A[k*lda+i]:A[i*lda+k], b=s->tb?B[j*ldb+k]:B[k*ldb+j]; acc+=a*b; aabs+=fabs(a*b);} 
    double e=fabs(acc-C[(size_t)i*N+j]); if(e>maxerr)maxerr=e; if(aabs>maxref)maxref=aabs; }
  return maxerr/(maxref>0?maxref:1); /* error relative to the |a||b| scale */
}

typedef struct { const shape_t *s; float *A,*B,*C; int iters; pthread_barrier_t *bar; double t0,t1; double err; } job_t;

static void *worker(void *arg){
  job_t *j=arg; lib_thread_setup(1);
  for(int w=0;w<3;w++) sgemm_rm(j->s->ta,j->s->tb,j->s->M,j->s->N,j->s->K,j->A,j->B,j->C,1);
  pthread_barrier_wait(j->bar); j->t0=now();
  for(int it=0;it<j->iters;it++) sgemm_rm(j->s->ta,j->s->tb,j->s->M,j->s->N,j->s->K,j->A,j->B,j->C,1);
  j->t1=now();
  memset(j->C,0,sizeof(float)*j->s->M*j->s->N);
  sgemm_rm(j->s->ta,j->s->tb,j->s->M,j->s->N,j->s->K,j->A,j->B,j->C,1);
  j->err=check(j->s,j->A,j->B,j->C);
  return NULL;
}

static int cmpd(const void*a,const void*b){ double x=*(const double*)a,y=*(const double*)b; return x<y?-1:x>y; }

int main(int argc,char**argv){
  if(argc>1) g_libthreads=atoi(argv[1]);
  double ti=now(); lib_thread_setup(g_libthreads);
#if defined(USE_OPENBLAS)
  printf("# %s config: %s core=%s threads=%d\n", LIBNAME, openblas_get_config(), openblas_get_corename(), openblas_get_num_threads());
#elif defined(USE_BLIS)
  printf("# %s %s arch=%s threading=%s\n", LIBNAME, bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()),
         bli_info_get_enable_openmp()?"openmp":bli_info_get_enable_pthreads()?"pthreads":"none");
  printf("# sgemm ukr impl: %s\n", bli_info_get_gemm_ukr_impl_string(BLIS_NAT, BLIS_FLOAT));
#elif defined(USE_DNNL)
  { const dnnl_version_t *v=dnnl_version(); printf("# %s %d.%d.%d isa=%d omp_max_threads=%d\n",LIBNAME,v->major,v->minor,v->patch,(int)dnnl_get_effective_cpu_isa(),omp_get_max_threads()); }
#endif
  printf("# lib_threads=%d\n", g_libthreads);
  printf("%-32s %9s %9s %9s %9s\n","shape (M,N,K)","GF/s","GF/s2pt","relerr","us/call");
  for(int si=0;si<NSHAPES;si++){
    const shape_t *s=&shapes[si]; size_t na=(size_t)s->M*s->K, nb=(size_t)s->K*s->N, nc=(size_t)s->M*s->N;
    float *A=aligned_alloc(64,((na*4+63)/64)*64), *B=aligned_alloc(64,((nb*4+63)/64)*64), *C=aligned_alloc(64,((nc*4+63)/64)*64);
    fill(A,na,1+si); fill(B,nb,101+si); memset(C,0,nc*4);
    double flops=2.0*s->M*s->N*s->K, t;
    if(si==0){ t=now(); sgemm_rm(s->ta,s->tb,s->M,s->N,s->K,A,B,C,g_libthreads); printf("# first call (incl. lib init/JIT) %.3f ms, since start %.3f ms\n",(now()-t)*1e3,(now()-ti)*1e3); }
    /* warm up & calibrate inner loop so one sample ~2 ms */
    int inner=1; for(;;){ t=now(); for(int i=0;i<inner;i++) sgemm_rm(s->ta,s->tb,s->M,s->N,s->K,A,B,C,g_libthreads); t=now()-t; if(t>2e-3) break; inner*=2; }
    enum{NS=101}; double smp[NS];
    for(int r=0;r<NS;r++){ t=now(); for(int i=0;i<inner;i++) sgemm_rm(s->ta,s->tb,s->M,s->N,s->K,A,B,C,g_libthreads); smp[r]=(now()-t)/inner; }
    qsort(smp,NS,sizeof(double),cmpd); double med=smp[NS/2];
    memset(C,0,nc*4); sgemm_rm(s->ta,s->tb,s->M,s->N,s->K,A,B,C,g_libthreads); double err=check(s,A,B,C);
    /* two of our own pthreads, each doing single-threaded gemm on private buffers */
    double agg=0, err2=0;
    if(g_libthreads==1){
      pthread_barrier_t bar; pthread_barrier_init(&bar,NULL,2); job_t jb[2]; pthread_t th[2];
      int iters=(int)(0.4/med)+1;
      for(int k=0;k<2;k++){ jb[k].s=s; jb[k].A=aligned_alloc(64,((na*4+63)/64)*64); jb[k].B=aligned_alloc(64,((nb*4+63)/64)*64); jb[k].C=aligned_alloc(64,((nc*4+63)/64)*64);
        memcpy(jb[k].A,A,na*4); memcpy(jb[k].B,B,nb*4); jb[k].iters=iters; jb[k].bar=&bar; pthread_create(&th[k],NULL,worker,&jb[k]); }
      for(int k=0;k<2;k++) pthread_join(th[k],NULL);
      double t0=fmin(jb[0].t0,jb[1].t0), t1=fmax(jb[0].t1,jb[1].t1); agg=2.0*iters*flops/(t1-t0)/1e9;
      err2=fmax(jb[0].err,jb[1].err);
      for(int k=0;k<2;k++){ free(jb[k].A); free(jb[k].B); free(jb[k].C);} pthread_barrier_destroy(&bar);
    }
    char nm[64]; snprintf(nm,sizeof nm,"%s",s->name);
    printf("%-32s %9.1f %9.1f %9.1e %9.2f  (M=%d N=%d K=%d %c%c)\n",nm,flops/med/1e9,agg,fmax(err,err2),med*1e6,s->M,s->N,s->K,s->ta?'T':'N',s->tb?'T':'N');
    free(A);free(B);free(C);
  }
  return 0;
}
