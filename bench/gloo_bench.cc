// SPDX-License-Identifier: Apache-2.0
/*
 * gloo_bench: the Gloo side of bench/compare. Forks N ranks that rendezvous through a
 * gloo FileStore in a temporary directory and connect over Gloo's TCP transport on
 * loopback; then times gloo::allreduce (ring algorithm, float sum, out of place),
 * gloo::allgather and gloo::broadcast (bytes) the way braid-perf does: warm-up, a
 * barrier, `iters` calls back to back, mean time per call, maximum over ranks, sizes and
 * bus bandwidth as nccl-tests. Each call's options (and so its buffer registration) are
 * built once per size, the cheapest way to drive Gloo. Then `check` calls with fresh
 * inputs whose exact result is known; wrong elements are counted over all ranks.
 *
 * usage: gloo_bench -N ranks -C allreduce|allgather|broadcast -b 8 -e 256M -f 4
 *                   [-n iters] [-w warmup] [-c checks]
 * Prints mpi_bench's rows; exit status 1 if any element was wrong.
 */
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

enum Coll { AR, AG, BC };

struct Config {
    int coll = AR, nranks = 2, iters = 20, warmup = 1, check = 1;
    size_t min_bytes = 32u << 20, max_bytes = 32u << 20;
    double factor = 2;
    std::string dir;
};

struct Result {
    size_t size = 0, count = 0;
    double time_us = 0;
    long wrong = 0;
};

double now_us()
{
    auto t = std::chrono::steady_clock::now().time_since_epoch();
    return std::chrono::duration<double, std::micro>(t).count();
}

size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024.0; break;
    case 'M': case 'm': v *= 1048576.0; break;
    case 'G': case 'g': v *= 1073741824.0; break;
    default: break;
    }
    return static_cast<size_t>(v);
}

float ar_val(int rank, size_t i, int seed)
{
    return static_cast<float>((static_cast<size_t>(rank + 1 + 3 * seed) * 7 + i) % 61);
}

uint8_t byte_val(int rank, size_t i, int seed)
{
    return static_cast<uint8_t>(rank * 37 + i * 11 + static_cast<size_t>(seed) * 101 + 5);
}

// One rank's view of one size: buffers and the reusable call.
class Op {
  public:
    Op(const std::shared_ptr<gloo::Context> &ctx, const Config &cfg, size_t count,
       std::vector<char> &send, std::vector<char> &recv)
        : ctx_(ctx), cfg_(cfg), count_(count), send_(send), recv_(recv)
    {
        if (cfg.coll == AR) {
            ar_ = std::make_unique<gloo::AllreduceOptions>(ctx);
            ar_->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
            ar_->setInput(reinterpret_cast<float *>(send.data()), count);
            ar_->setOutput(reinterpret_cast<float *>(recv.data()), count);
            void (*fn)(void *, const void *, const void *, size_t) = &gloo::sum<float>;
            ar_->setReduceFunction(fn);
        } else if (cfg.coll == AG) {
            ag_ = std::make_unique<gloo::AllgatherOptions>(ctx);
            ag_->setInput(reinterpret_cast<uint8_t *>(send.data()), count);
            ag_->setOutput(reinterpret_cast<uint8_t *>(recv.data()), count * ctx->size);
        } else {
            bc_ = std::make_unique<gloo::BroadcastOptions>(ctx);
            bc_->setRoot(0);
            if (ctx->rank == 0) {
                bc_->setInput(reinterpret_cast<uint8_t *>(send.data()), count);
            }
            bc_->setOutput(reinterpret_cast<uint8_t *>(recv.data()), count);
        }
    }

    void run()
    {
        if (ar_) {
            gloo::allreduce(*ar_);
        } else if (ag_) {
            gloo::allgather(*ag_);
        } else {
            gloo::broadcast(*bc_);
        }
    }

    long check(int seed)
    {
        int me = ctx_->rank, n = ctx_->size;
        long wrong = 0;
        size_t out = cfg_.coll == AG ? count_ * n : count_;
        std::memset(recv_.data(), 0xa5, out * (cfg_.coll == AR ? sizeof(float) : 1));
        for (size_t i = 0; i < count_; i++) {
            if (cfg_.coll == AR) {
                reinterpret_cast<float *>(send_.data())[i] = ar_val(me, i, seed);
            } else {
                reinterpret_cast<uint8_t *>(send_.data())[i] =
                    byte_val(cfg_.coll == AG ? me : 0, i, seed);
            }
        }
        run();
        for (size_t i = 0; i < count_; i++) {
            if (cfg_.coll == AR) {
                float want = 0;
                for (int p = 0; p < n; p++) {
                    want += ar_val(p, i, seed);
                }
                wrong += reinterpret_cast<float *>(recv_.data())[i] != want;
            } else if (cfg_.coll == AG) {
                for (int p = 0; p < n; p++) {
                    wrong += reinterpret_cast<uint8_t *>(recv_.data())[p * count_ + i] !=
                             byte_val(p, i, seed);
                }
            } else {
                wrong += reinterpret_cast<uint8_t *>(recv_.data())[i] != byte_val(0, i, seed);
            }
        }
        return wrong;
    }

  private:
    std::shared_ptr<gloo::Context> ctx_;
    const Config &cfg_;
    size_t count_;
    std::vector<char> &send_, &recv_;
    std::unique_ptr<gloo::AllreduceOptions> ar_;
    std::unique_ptr<gloo::AllgatherOptions> ag_;
    std::unique_ptr<gloo::BroadcastOptions> bc_;
};

size_t count_of(const Config &cfg, size_t bytes)
{
    return cfg.coll == AR ? bytes / sizeof(float)
           : cfg.coll == AG ? bytes / static_cast<size_t>(cfg.nranks)
                            : bytes;
}

// A forked rank: connect, measure every size, write "size count time wrong" lines.
int run_rank(const Config &cfg, int rank)
{
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(cfg.dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, cfg.nranks);
    ctx->setTimeout(std::chrono::seconds(600));
    ctx->connectFullMesh(store, dev);
    std::shared_ptr<gloo::Context> base = ctx;

    std::vector<char> send(cfg.max_bytes + 64), recv(cfg.max_bytes + 64);
    std::string path = cfg.dir + "/result." + std::to_string(rank);
    FILE *out = fopen(path.c_str(), "w");
    if (out == nullptr) {
        return 2;
    }
    for (size_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes;
         bytes = static_cast<size_t>(bytes * cfg.factor)) {
        size_t count = count_of(cfg, bytes);
        Op op(base, cfg, count, send, recv);
        for (int w = 0; w < cfg.warmup; w++) {
            op.run();
        }
        gloo::BarrierOptions bopts(base);
        gloo::barrier(bopts);
        double t0 = now_us();
        for (int it = 0; it < cfg.iters; it++) {
            op.run();
        }
        double us = (now_us() - t0) / cfg.iters;
        long wrong = 0;
        for (int c = 0; c < cfg.check; c++) {
            wrong += op.check(c + 1);
        }
        fprintf(out, "%zu %zu %.6f %ld\n", bytes, count, us, wrong);
        if (bytes == 0) {
            break;
        }
    }
    fclose(out);
    return 0;
}

int parse(Config &cfg, int argc, char **argv)
{
    int c;
    while ((c = getopt(argc, argv, "N:C:b:e:f:n:w:c:")) != -1) {
        switch (c) {
        case 'N': cfg.nranks = atoi(optarg); break;
        case 'C':
            cfg.coll = strcmp(optarg, "allreduce") == 0   ? AR
                       : strcmp(optarg, "allgather") == 0 ? AG
                       : strcmp(optarg, "broadcast") == 0 ? BC
                                                          : -1;
            break;
        case 'b': cfg.min_bytes = parse_size(optarg); break;
        case 'e': cfg.max_bytes = parse_size(optarg); break;
        case 'f': cfg.factor = atof(optarg); break;
        case 'n': cfg.iters = atoi(optarg); break;
        case 'w': cfg.warmup = atoi(optarg); break;
        case 'c': cfg.check = atoi(optarg); break;
        default: return -1;
        }
    }
    return cfg.coll < 0 || cfg.nranks < 1 || cfg.iters < 1 || cfg.factor <= 1 ? -1 : 0;
}

// Reads every rank's lines and prints one row per size: max time, summed wrong counts.
long report(const Config &cfg)
{
    static const char *names[] = {"allreduce", "allgather", "broadcast"};
    std::vector<std::vector<Result>> all(cfg.nranks);
    for (int r = 0; r < cfg.nranks; r++) {
        std::string path = cfg.dir + "/result." + std::to_string(r);
        FILE *f = fopen(path.c_str(), "r");
        Result res;
        while (f != nullptr &&
               fscanf(f, "%zu %zu %lf %ld", &res.size, &res.count, &res.time_us, &res.wrong) == 4) {
            all[r].push_back(res);
        }
        if (f != nullptr) {
            fclose(f);
        }
    }
    printf("# gloo_bench %s nranks %d iters %d warmup %d check %d (tcp transport, loopback)\n",
           names[cfg.coll], cfg.nranks, cfg.iters, cfg.warmup, cfg.check);
    printf("#       size         count      type   redop    root     time   algbw   busbw "
           "#wrong\n");
    long total = 0;
    double bw_sum = 0;
    size_t rows = all[0].size();
    int n = cfg.nranks;
    for (size_t i = 0; i < rows; i++) {
        double t = 0;
        long wrong = 0;
        for (int r = 0; r < n; r++) {
            t = std::max(t, all[r].size() > i ? all[r][i].time_us : 0.0);
            wrong += all[r].size() > i ? all[r][i].wrong : 0;
        }
        size_t count = all[0][i].count;
        size_t size = cfg.coll == AR ? count * 4 : cfg.coll == AG ? count * n : count;
        double factor = cfg.coll == AR ? 2.0 * (n - 1) / n
                        : cfg.coll == AG ? static_cast<double>(n - 1) / n
                                         : 1.0;
        double algbw = t > 0 ? static_cast<double>(size) / t / 1e3 : 0.0;
        total += wrong;
        bw_sum += algbw * factor;
        printf("%12zu  %12zu  %8s  %6s  %6d  %7.2f  %6.3f  %6.3f  %6ld\n", size, count,
               cfg.coll == AR ? "float" : "uint8", cfg.coll == AR ? "sum" : "none",
               cfg.coll == BC ? 0 : -1, t, algbw, algbw * factor, wrong);
    }
    printf("# Out of bounds values : %ld %s\n", total, total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g\n", rows ? bw_sum / rows : 0.0);
    return total;
}

} // namespace

int main(int argc, char **argv)
{
    Config cfg;
    if (parse(cfg, argc, argv) != 0) {
        fprintf(stderr, "usage: gloo_bench -N ranks -C allreduce|allgather|broadcast -b MIN -e MAX "
                        "-f FACTOR [-n iters] [-w warmup] [-c checks]\n");
        return 2;
    }
    char tmpl[] = "/tmp/gloo_bench.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
        perror("gloo_bench: mkdtemp");
        return 2;
    }
    cfg.dir = tmpl;
    std::vector<pid_t> pids;
    fflush(stdout);
    for (int r = 0; r < cfg.nranks; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            int rc = 2;
            try {
                rc = run_rank(cfg, r);
            } catch (const std::exception &e) {
                fprintf(stderr, "gloo_bench: rank %d: %s\n", r, e.what());
            }
            _exit(rc);
        }
        pids.push_back(pid);
    }
    int failed = 0;
    for (pid_t pid : pids) {
        int st;
        waitpid(pid, &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    long wrong = failed ? 0 : report(cfg);
    std::string cleanup = "rm -rf '" + cfg.dir + "'";
    if (system(cleanup.c_str()) != 0) {
        fprintf(stderr, "gloo_bench: could not remove %s\n", cfg.dir.c_str());
    }
    if (failed) {
        fprintf(stderr, "gloo_bench: a rank failed\n");
        return 2;
    }
    return wrong != 0;
}
