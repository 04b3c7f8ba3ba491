// cuda_workspace.cuh: carving one block of scratch memory into arrays.
//
// A GPU call that needs several scratch arrays takes them from one block (the
// device workspace, the pinned buffer or the input buffer of cuda_device.cuh),
// each array starting on a kWorkspaceAlign boundary.  As with cub's temporary
// storage, the same carving code runs twice: first over a null base, which
// only adds up the bytes (every pointer it hands out is null), then over the
// block of that size, which hands out the arrays:
//
//     Scratch carve(const Plan &p, void *base, size_t *bytes)
//     {
//         Carve c(base);
//         Scratch s;
//         s.keys = c.take<float>(p.n);
//         s.idx = c.take<int>(p.n);
//         *bytes = c.used();
//         return s;
//     }
//     carve(p, nullptr, &bytes);                // size
//     SML_TRY(device_workspace(dev, bytes, &ws));
//     Scratch s = carve(p, ws, &bytes);         // carve
//
// A host block carved as its device copy will be goes to the GPU in one copy;
// mirror() finds a host array's place in the copy.
#pragma once

#include <stddef.h>

namespace sml {

// Every carved array starts at a multiple of this many bytes: enough for
// 16-byte vector loads and for cub's and cuBLAS's alignment wishes.
constexpr size_t kWorkspaceAlign = 256;

// x rounded up to a multiple of kWorkspaceAlign.
__host__ __device__ constexpr size_t workspace_align(size_t x)
{
    return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

// A bump allocator over a block; over a null base it only counts.
class Carve {
public:
    explicit Carve(void *base) : base_(static_cast<char *>(base)) {}

    // count elements of T (count may be 0), or null when sizing.
    template <typename T>
    T *take(size_t count)
    {
        T *p = base_ ? reinterpret_cast<T *>(base_ + used_) : nullptr;
        used_ += workspace_align(sizeof(T) * count);
        return p;
    }

    // Bytes taken so far: the block size once every array is taken.
    size_t used() const { return used_; }

private:
    char *base_;
    size_t used_ = 0;
};

// Where p, an address in the host block at host, lies in its device copy at
// device (null while sizing, when device is null).
template <typename T>
T *mirror(void *device, const void *host, T *p)
{
    if (device == nullptr) return nullptr;
    const char *h = reinterpret_cast<const char *>(p);
    return reinterpret_cast<T *>(static_cast<char *>(device) + (h - static_cast<const char *>(host)));
}

}  // namespace sml
