// gloo-allreduce-bench: the like-for-like peer of shs-allreduce-bench. Gloo's
// ibverbs transport and its AllreduceRingChunked (a pipelined ring over
// RDMA), float sum in place, with the same sizes, iterations and output
// columns as shs-allreduce-bench, so tools/allreduce-compare can put them
// side by side. Built only when Debian's libgloo-dev is installed; uses
// Gloo's public API only (no shadowsync).
//
//   shs-launch -n 4 -- gloo-allreduce-bench -b 64k -e 16m -f 4 -n 20 -w 5
//
// Rank and size come from SHS_RANK / SHS_SIZE (what shs-launch sets); the
// ranks meet in a Gloo FileStore under /tmp (one machine or guest), named by
// SHS_JOB_TOKEN. The device is SHS_DEVICE (default rxe0), port SHS_IB_PORT
// (default 1), GID index SHS_GID_INDEX or SHS_VM_GID_INDEX (default 1).
//
// Algorithm objects live until the end: destroying one right after run()
// can abort in this Gloo version ("Destructing buffer expecting
// completions"), so the program ends with a barrier and _exit().
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/ibverbs/device.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

double now_us()
{
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

bool parse_bytes(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end), mult = 1;
    if (*end == 'k' || *end == 'K')
        mult = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1024.0 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mult = 1024.0 * 1024 * 1024, end++;
    if (end == s || *end != '\0' || v < 0)
        return false;
    *out = (size_t)(v * mult);
    return true;
}

int env_int(const char *name, const char *alt, int def)
{
    const char *v = getenv(name);
    if (v == nullptr && alt != nullptr)
        v = getenv(alt);
    return v != nullptr && *v != '\0' ? atoi(v) : def;
}

float input(int r, size_t i)
{
    return (float)((int)((i * 7 + (size_t)r * 13) % 17) - 8);
}

}  // namespace

int main(int argc, char **argv)
{
    size_t min_bytes = 4096, max_bytes = 16u << 20;
    double factor = 4;
    int iters = 20, warmup = 5;
    for (int c; (c = getopt(argc, argv, "b:e:f:n:w:h")) != -1;) {
        switch (c) {
        case 'b': if (!parse_bytes(optarg, &min_bytes)) return 2; break;
        case 'e': if (!parse_bytes(optarg, &max_bytes)) return 2; break;
        case 'f': factor = atof(optarg); break;
        case 'n': iters = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: gloo-allreduce-bench [-b MIN] [-e MAX] [-f FACTOR] "
                            "[-n ITERS] [-w WARMUP]\n");
            return 2;
        }
    }
    if (iters < 1 || factor <= 1 || min_bytes < 4 || max_bytes < min_bytes)
        return 2;
    const int rank = env_int("SHS_RANK", nullptr, -1), size = env_int("SHS_SIZE", nullptr, -1);
    if (rank < 0 || size < 1) {
        fprintf(stderr, "gloo-allreduce-bench: SHS_RANK and SHS_SIZE must be set (shs-launch)\n");
        return 2;
    }
    const char *token = getenv("SHS_JOB_TOKEN");
    std::string dir = std::string("/tmp/gloo-store-") + (token != nullptr ? token : "default");
    mkdir(dir.c_str(), 0700);

    gloo::transport::ibverbs::attr attr;
    attr.name = getenv("SHS_DEVICE") != nullptr ? getenv("SHS_DEVICE") : "rxe0";
    attr.port = env_int("SHS_IB_PORT", nullptr, 1);
    attr.index = env_int("SHS_GID_INDEX", "SHS_VM_GID_INDEX", 1);
    auto dev = gloo::transport::ibverbs::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->connectFullMesh(store, dev);

    if (rank == 0) {
        printf("# gloo-allreduce-bench: %d ranks, ibverbs %s port %d gid %d, "
               "AllreduceRingChunked, %d iterations after %d warmup\n",
               size, attr.name.c_str(), attr.port, attr.index, iters, warmup);
        printf("# %10s %12s %6s %6s %11s %12s %12s %7s %10s %10s\n", "size", "count", "type",
               "redop", "time(us)", "algbw(MB/s)", "busbw(MB/s)", "#wrong", "p50(us)",
               "p99(us)");
    }
    gloo::BarrierAllToAll barrier(ctx); // one object, reused: see the note above
    std::vector<std::unique_ptr<std::vector<float>>> keep_bufs;
    std::vector<std::unique_ptr<gloo::Algorithm>> keep_algos;
    std::vector<double> times((size_t)iters);
    std::vector<std::unique_ptr<std::vector<double>>> keep_stats;

    for (double b = (double)min_bytes; b <= (double)max_bytes * 1.0001; b *= factor) {
        size_t count = (size_t)b / sizeof(float);
        keep_bufs.emplace_back(new std::vector<float>(count));
        std::vector<float> &buf = *keep_bufs.back();
        float *ptr = buf.data();
        auto *algo = new gloo::AllreduceRingChunked<float>(ctx, {ptr}, (int)count);
        keep_algos.emplace_back(algo);

        // one checked call against the host reference (exact small-integer sums)
        for (size_t i = 0; i < count; i++)
            buf[i] = input(rank, i);
        algo->run();
        double wrong = 0;
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int r = 0; r < size; r++)
                want += input(r, i);
            wrong += buf[i] != want;
        }
        for (size_t i = 0; i < count; i++)
            buf[i] = input(rank, i);
        for (int i = 0; i < warmup; i++)
            algo->run();
        barrier.run();
        for (int i = 0; i < iters; i++) {
            double t0 = now_us();
            algo->run();
            times[(size_t)i] = now_us() - t0;
        }
        // average per-call times and sum wrong counts over the ranks
        keep_stats.emplace_back(new std::vector<double>(times));
        std::vector<double> &stats = *keep_stats.back();
        stats.push_back(wrong);
        auto *red = new gloo::AllreduceRing<double>(ctx, {stats.data()}, (int)stats.size());
        keep_algos.emplace_back(red);
        red->run();
        wrong = stats.back();
        stats.pop_back();
        double mean = 0;
        for (double &t : stats) {
            t /= size;
            mean += t;
        }
        mean /= iters;
        std::sort(stats.begin(), stats.end());
        int k99 = (int)std::ceil(0.99 * iters) - 1;
        double p50 = stats[(size_t)(iters - 1) / 2], p99 = stats[(size_t)std::max(k99, 0)];
        double algbw = (double)(count * sizeof(float)) / mean;
        double busbw = algbw * 2.0 * (size - 1) / size;
        if (rank == 0) {
            printf("%12zu %12zu %6s %6s %11.1f %12.2f %12.2f %7.0f %10.1f %10.1f\n",
                   count * sizeof(float), count, "float", "sum", mean, algbw, busbw, wrong, p50,
                   p99);
            fflush(stdout);
        }
    }
    barrier.run();
    fflush(stdout);
    _exit(0);
}
