// Holds N GiB of device memory (touched) for S seconds: a shared run that goes over its share (issue 38).
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cuda_runtime.h>

int main(int argc, char **argv) {
    int gib = argc > 1 ? atoi(argv[1]) : 1, seconds = argc > 2 ? atoi(argv[2]) : 10;
    for (int i = 0; i < gib; i++) {
        void *p = nullptr;
        if (cudaMalloc(&p, 1ull << 30) != cudaSuccess || cudaMemset(p, 1, 1ull << 30) != cudaSuccess) {
            printf("allocation %d failed\n", i + 1);
            return 1;
        }
        printf("holding %d GiB\n", i + 1);
        fflush(stdout);
        usleep(100000);
    }
    sleep(seconds);
    printf("done\n");
    return 0;
}
