#!/usr/bin/env bash
# Distributed search under mpirun (3 ranks, CPU): shards built with
# "simil build --part", searched with "simil search --distributed", must give
# exactly the single-process results (Flat), the same lists for IVF (the parts
# share the quantizer), and every rank must stop cleanly when one fails.
#   bash test_mpi.sh SIMIL MPIRUN
set -euo pipefail
simil=$1
mpirun=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Under AddressSanitizer: Open MPI's own leaks are suppressed, which needs whole
# stacks (the fast unwinder stops inside its plugins) and plugins that stay
# loaded until the leak check, so that their frames have names.
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/mpi-lsan.supp:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
run() { timeout 120 "$mpirun" -np 3 --oversubscribe "$simil" search --distributed --device cpu "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

"$simil" gen --kind mix --n 6000 --dim 16 --seed 1 --out base.fvecs
"$simil" gen --kind mix --n 77 --dim 16 --seed 2 --out q.fvecs
for desc in Flat IVF16,Flat; do
  tag=${desc%%,*}
  for i in 0 1 2; do
    "$simil" build --data base.fvecs --index "$desc" --part $i/3 --device cpu \
      --out "$tag-$i.simil" 2>/dev/null
  done
  "$simil" build --data base.fvecs --index "$desc" --device cpu --out "$tag-full.simil" 2>/dev/null
  "$simil" search --index "$tag-full.simil" --queries q.fvecs -k 10 --nprobe 3 --device cpu \
    --out "$tag-one.ivecs" --distances "$tag-one.fvecs" > /dev/null
  run --index "$tag-{rank}.simil" --queries q.fvecs -k 10 --nprobe 3 \
    --out "$tag-dist.ivecs" --distances "$tag-dist.fvecs" > "$tag.out"
  cmp "$tag-one.ivecs" "$tag-dist.ivecs" || fail "$desc: distributed ids differ"
  # distances: equal up to the rounding of GEMMs over other tilings
  python3 - "$tag-one.fvecs" "$tag-dist.fvecs" <<'PY' || fail "$desc: distributed distances differ"
import struct, sys
def floats(path):
    data = open(path, "rb").read()
    dim = struct.unpack_from("<i", data)[0]
    rows = len(data) // (4 + 4 * dim)
    return [struct.unpack_from("<%df" % dim, data, r * (4 + 4 * dim) + 4) for r in range(rows)]
a, b = floats(sys.argv[1]), floats(sys.argv[2])
assert len(a) == len(b)
for ra, rb in zip(a, b):
    for x, y in zip(ra, rb):
        assert abs(x - y) <= 1e-4 * (abs(x) + 1), (x, y)
PY
  grep -q "queries: 77" "$tag.out" || fail "$desc: rank 0 did not report"
done

# a rank without its shard: every rank stops, no hang, non-zero exit
mv Flat-2.simil away.simil
if run --index "Flat-{rank}.simil" --queries q.fvecs -k 5 2> err.txt; then fail "missing shard accepted"; fi
grep -q "failed on rank 2" err.txt || fail "other ranks did not say which rank failed"
mv away.simil Flat-2.simil
# rank 0 fails after the shards load: the others are released
if run --index "Flat-{rank}.simil" --queries q.fvecs -k 5 --gt none.ivecs 2> err.txt; then
  fail "missing ground truth accepted"
fi
grep -q "none.ivecs" err.txt || fail "rank 0 did not name the missing file"
echo "mpi: ok"
