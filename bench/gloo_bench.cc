// gloo_bench.cc - Gloo's ring allreduce as PyTorch's ProcessGroupGloo runs
// it (gloo::allreduce, algorithm RING, float32 sum over TCP), one process
// per rank, for comparing ringd's CPU per GB (bench/gloo.sh) and its times
// (bench/compare.sh) with it.
//
//   gloo_bench RANK SIZE STORE_DIR HOST BYTES ITERS [each]
//
// Ranks meet through a gloo FileStore in STORE_DIR (a directory every rank
// sees); HOST is this rank's address. After 2 warm-up allreduces, each rank
// times ITERS allreduces of BYTES of float32 back to back (the timing loop
// only: no refill, no check) and prints one line: its wall seconds and the
// CPU seconds (user + system) its process used in that loop, Gloo's
// threads included.
//
// With `each`, the runs are timed as ringd_bench times ringd's: each right
// after an 8-byte allreduce (untimed) so that the ranks start together, the
// time of a run the slowest rank's (an allreduce with max over every run's
// times, after the loop), and rank 0 alone prints "bytes B runs N median_us
// M min_us T" (bench/mpi_bench.c prints the same).
#include <sys/resource.h>

#include <algorithm>
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
    bool each = argc == 8 && std::string(argv[7]) == "each";
    if (argc != 7 && !each) {
        std::fprintf(stderr, "usage: gloo_bench RANK SIZE STORE_DIR HOST BYTES ITERS [each]\n");
        return 2;
    }
    int rank = std::atoi(argv[1]), size = std::atoi(argv[2]);
    size_t count = std::max<size_t>(1, std::strtoull(argv[5], nullptr, 10) / sizeof(float));
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
    if (each) {
        auto reduce = [&](double *v, size_t n,
                          void (*fn)(void *, const void *, const void *, size_t), uint32_t tag) {
            gloo::AllreduceOptions opts(ctx);
            opts.setOutput(v, n);
            opts.setReduceFunction(fn);
            opts.setTag(tag);
            gloo::allreduce(opts);
        };
        auto sum =
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<double>);
        auto max =
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::max<double>);
        std::vector<double> times(iters);
        double sync = 0;
        uint32_t tag = 2;
        for (int i = 0; i < iters; i++) {
            reduce(&sync, 1, sum, tag++);
            auto t0 = std::chrono::steady_clock::now();
            once(tag++);
            times[i] =
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                    .count();
        }
        reduce(times.data(), times.size(), max, tag++);
        if (rank == 0) {
            std::sort(times.begin(), times.end());
            double median =
                iters % 2 ? times[iters / 2] : (times[iters / 2 - 1] + times[iters / 2]) / 2;
            std::printf("bytes %zu runs %d median_us %.1f min_us %.1f\n", count * sizeof(float),
                        iters, median, times[0]);
        }
        return 0;
    }
    double c0 = cpu_s();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; i++)
        once(2 + i);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank %d wall_s %.3f cpu_s %.3f bytes %zu iters %d\n", rank, wall, cpu_s() - c0,
                count * sizeof(float), iters);
    return 0;
}
