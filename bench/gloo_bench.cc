// gloo_bench.cc - Gloo's ring allreduce as PyTorch's ProcessGroupGloo runs
// it (gloo::allreduce, algorithm RING, float32 sum over TCP), one process
// per rank, for comparing ringd's CPU per GB with it (bench/gloo.sh).
//
//   gloo_bench RANK SIZE STORE_DIR HOST BYTES ITERS
//
// Ranks meet through a gloo FileStore in STORE_DIR (a directory every rank
// sees); HOST is this rank's address. After 2 warm-up allreduces, each rank
// times ITERS allreduces of BYTES of float32 back to back (the timing loop
// only: no refill, no check) and prints one line: its wall seconds and the
// CPU seconds (user + system) its process used in that loop, Gloo's
// threads included.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

static double cpu_s()
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        std::fprintf(stderr, "usage: gloo_bench RANK SIZE STORE_DIR HOST BYTES ITERS\n");
        return 2;
    }
    int rank = std::atoi(argv[1]), size = std::atoi(argv[2]);
    size_t count = std::strtoull(argv[5], nullptr, 10) / sizeof(float);
    int iters = std::atoi(argv[6]);

    gloo::transport::tcp::attr attr(argv[4]);
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(argv[3]);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(std::chrono::seconds(120));
    ctx->connectFullMesh(store, dev);

    std::vector<float> buf(count, 1.0f + rank);
    auto once = [&](uint32_t tag) {
        gloo::AllreduceOptions opts(ctx);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setOutput(buf.data(), buf.size());
        opts.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(
            &gloo::sum<float>));
        opts.setTag(tag);
        gloo::allreduce(opts);
    };
    once(0);
    once(1);
    double c0 = cpu_s();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; i++)
        once(2 + i);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank %d wall_s %.3f cpu_s %.3f bytes %zu iters %d\n", rank, wall, cpu_s() - c0,
                count * sizeof(float), iters);
    return 0;
}
