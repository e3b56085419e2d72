/** \file HostMemory.h
 * Advice to the operating system about host buffers a CPU kernel is about to write.
 */
#pragma once

#include <cstddef>

namespace rf {

/** Buffers at least this large get the huge-page advice (two 2 MiB pages or more). */
constexpr size_t kHugePageAdviceBytes = size_t(4) << 20;

/** Asks Linux to back the 2 MiB-aligned interior of [data, data + bytes) with transparent huge pages
 *  (madvise MADV_HUGEPAGE) when the range holds at least kHugePageAdviceBytes. Why: an output freshly
 *  allocated by PyTorch or NumPy (large allocations are fresh mappings, returned to the system when
 *  freed) is first touched by the kernel, one page fault per 4 KiB page: writing a 64 MiB output
 *  took 18-24 ms of faults against 5.5 ms with huge pages on the development VM (AMD Zen 4, 2
 *  threads, THP in "madvise" mode), more than the kernel's own time for memory-bound chains. Only
 *  advice: nothing changes where THP is "always" or "never", on pages already present (khugepaged may
 *  collapse them later), or on other systems; errors are ignored, as the advice is optional. */
void advise_huge_pages(void *data, size_t bytes);

}  // namespace rf
