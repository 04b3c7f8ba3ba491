// faiss_latency.cpp: latency of Faiss GPU per batch size, on the vectors
// bench_latency writes (--write-fvecs DIR), for the same run.  Built on the
// GPU machine against the Faiss 1.15 build of .device-deps/faiss-gpu by
// bench/latency.sh.
//
//   faiss_latency DIR DESC ip|l2 K NPROBE BATCHES REPS [CSV]
//
// DESC: Flat, IVFn,Flat or IVFn,PQm (precomputed tables), as the anchor
// harness builds them; trained on DIR/train.fvecs, DIR/base.fvecs added.
// Each call takes B rows of DIR/queries.fvecs (in turn) from host memory and
// returns host results; calls are timed one by one after a warm-up, min(REPS,
// max(3, 20000 / B)) per batch size.  Prints p50 and p99, and appends rows to
// the CSV of bench_latency (system faiss).
#include <faiss/gpu/GpuIndexFlat.h>
#include <faiss/gpu/GpuIndexIVFFlat.h>
#include <faiss/gpu/GpuIndexIVFPQ.h>
#include <faiss/gpu/StandardGpuResources.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

static std::vector<float> read_fvecs(const std::string &path, int64_t *n, int64_t *d)
{
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) {
        perror(path.c_str());
        exit(1);
    }
    int dim = 0;
    if (fread(&dim, 4, 1, f) != 1 || dim <= 0) exit(1);
    fseek(f, 0, SEEK_END);
    const long long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    *n = bytes / (4 + 4LL * dim);
    *d = dim;
    std::vector<float> x((size_t)*n * dim);
    std::vector<int> row(dim + 1);
    for (int64_t i = 0; i < *n; i++) {
        if (fread(row.data(), 4, dim + 1, f) != (size_t)dim + 1) exit(1);
        memcpy(&x[(size_t)i * dim], row.data() + 1, 4 * (size_t)dim);
    }
    fclose(f);
    return x;
}

static double now_ms()
{
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

static double percentile(const std::vector<double> &sorted, double p)
{
    long i = (long)std::ceil(p / 100 * (double)sorted.size()) - 1;
    i = std::max(0L, std::min((long)sorted.size() - 1, i));
    return sorted[i];
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: faiss_latency DIR DESC ip|l2 K NPROBE BATCHES REPS [CSV]\n");
        return 2;
    }
    const std::string dir = argv[1], desc = argv[2];
    const faiss::MetricType metric =
        !strcmp(argv[3], "ip") ? faiss::METRIC_INNER_PRODUCT : faiss::METRIC_L2;
    const int64_t k = atoll(argv[4]);
    const int nprobe = atoi(argv[5]);
    const int max_reps = atoi(argv[7]);
    int64_t nb, d, nq, dq, nt, dt;
    std::vector<float> xb = read_fvecs(dir + "/base.fvecs", &nb, &d);
    std::vector<float> xq = read_fvecs(dir + "/queries.fvecs", &nq, &dq);
    std::vector<float> xt = read_fvecs(dir + "/train.fvecs", &nt, &dt);
    faiss::gpu::StandardGpuResources res;
    std::unique_ptr<faiss::Index> index;
    faiss::gpu::GpuIndexIVF *ivf = nullptr;
    if (desc == "Flat") {
        index.reset(new faiss::gpu::GpuIndexFlat(&res, (int)d, metric));
    } else {
        const int nlist = atoi(desc.c_str() + 3);
        const std::string rest = desc.substr(desc.find(',') + 1);
        if (rest == "Flat") {
            auto *p = new faiss::gpu::GpuIndexIVFFlat(&res, (int)d, nlist, metric);
            index.reset(p);
            ivf = p;
        } else {
            faiss::gpu::GpuIndexIVFPQConfig c;
            c.usePrecomputedTables = true;
            auto *p = new faiss::gpu::GpuIndexIVFPQ(&res, (int)d, nlist, atoi(rest.c_str() + 2), 8,
                                                   metric, c);
            index.reset(p);
            ivf = p;
        }
    }
    double t0 = now_ms();
    if (!index->is_trained) index->train(nt, xt.data());
    index->add(nb, xb.data());
    if (ivf) ivf->nprobe = nprobe;
    printf("faiss %s: train + add %.1f s\n", desc.c_str(), (now_ms() - t0) / 1e3);
    FILE *csv = argc > 8 ? fopen(argv[8], "a") : nullptr;
    std::vector<float> dist((size_t)nq * k), batch((size_t)nq * d);
    std::vector<faiss::idx_t> ids((size_t)nq * k);
    char *list = strdup(argv[6]);
    for (char *tok = strtok(list, ","); tok; tok = strtok(nullptr, ",")) {
        const int64_t b = std::min<int64_t>(atoll(tok), nq);
        const int reps = std::min(max_reps, std::max(3, (int)(20000 / b)));
        auto take = [&](int r) {
            for (int64_t i = 0; i < b; i++)
                memcpy(&batch[(size_t)i * d], &xq[(size_t)(((int64_t)r * b + i) % nq) * d],
                       4 * (size_t)d);
        };
        for (int w = 0; w < 2; w++) {
            take(w);
            index->search(b, batch.data(), k, dist.data(), ids.data());
        }
        std::vector<double> ms;
        for (int r = 0; r < reps; r++) {
            take(r);
            const double a = now_ms();
            index->search(b, batch.data(), k, dist.data(), ids.data());
            ms.push_back(now_ms() - a);
        }
        std::sort(ms.begin(), ms.end());
        const double p50 = percentile(ms, 50), p99 = percentile(ms, 99);
        const std::string params = ivf ? "nprobe=" + std::to_string(nprobe) : "";
        printf("  faiss %-16s %-10s batch %6lld: p50 %9.3f ms  p99 %9.3f ms  %11.0f QPS  (%d calls)\n",
               desc.c_str(), params.c_str(), (long long)b, p50, p99, b / p50 * 1e3, reps);
        if (csv)
            fprintf(csv, "faiss,\"gpu\",\"%s\",%s,%lld,%lld,1,call,%d,%.4f,%.4f,%.1f\n", desc.c_str(),
                    params.c_str(), (long long)k, (long long)b, reps, p50, p99, b / p50 * 1e3);
    }
    free(list);
    if (csv) fclose(csv);
    return 0;
}
